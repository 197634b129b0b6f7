//! The pattern check: execute a plan on real bytes and prove no live tensor is clobbered.
//!
//! Walk the schedule. Before step 0, every weight and every graph input in the layout gets
//! its pattern. At each step the node's inputs are checked (each must still hold the pattern
//! its writer left), then each output the node writes gets its own pattern:
//! - an ordinary output is written over its whole range;
//! - an in-place output is written too: it overwrites its parent's bytes;
//! - a view output is not written: its bytes *are* its parent's, so its writer is its root
//!   storage's writer and reading it checks that writer's pattern over the view's range.
//!
//! After the last step every graph output is checked once more. The check reads only the
//! graph, the layout and the bytes; it knows nothing of how the plan was made, so a planner
//! bug shows up as a [`Clobber`] naming the victim, the reader and (from a log of writes) the
//! tensor whose write destroyed it.
//!
//! The pattern of writer `w` at byte address `a` of a region is byte `a % 8` (little-endian)
//! of `seed(w) ^ (a / 8) * K`, with `seed` a bijective 64-bit mix of the tensor id. So two
//! writers differ in every 8-byte word they share, and whole words can be written and checked
//! with wide stores and loads. Backends implement [`PatternMemory`] (fill a range, verify a
//! range); the host arena does it in place, the device arena through staging copies.

use memplan_ir::{Graph, NodeId, TensorId, TensorKind};
use memplan_planner::AliasKind;

use crate::host::HostArena;
use crate::layout::{Layout, Region};

const K: u64 = 0x9E37_79B9_7F4A_7C15;

/// The pattern seed of writer `t`: a bijection of the id, so distinct writers have distinct
/// seeds.
pub fn seed(t: TensorId) -> u64 {
    // splitmix64's finalizer: invertible, so distinct inputs give distinct outputs.
    let mut z = u64::from(t.0) ^ 0x6D65_6D70_6C61_6E00;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[inline]
fn word(seed: u64, word_index: u64) -> u64 {
    seed ^ word_index.wrapping_mul(K)
}

/// The pattern byte of `seed` at address `addr`.
#[inline]
pub fn pattern_byte(seed: u64, addr: u64) -> u8 {
    let w = word(seed, addr >> 3).to_le_bytes();
    w[(addr & 7) as usize]
}

/// Writes the pattern of `seed` into `buf`, whose first byte is at address `start`.
pub fn fill(buf: &mut [u8], start: u64, seed: u64) {
    let head = usize::try_from(start.wrapping_neg() & 7)
        .unwrap_or(0)
        .min(buf.len());
    let (h, rest) = buf.split_at_mut(head);
    for (i, b) in h.iter_mut().enumerate() {
        *b = pattern_byte(seed, start.wrapping_add(i as u64));
    }
    let body_start = start.wrapping_add(head as u64);
    let (body, tail) = rest.split_at_mut(rest.len() - rest.len() % 8);
    let w0 = body_start >> 3;
    match bytemuck::try_cast_slice_mut::<u8, u64>(body) {
        Ok(words) => {
            for (j, w) in words.iter_mut().enumerate() {
                *w = word(seed, w0.wrapping_add(j as u64)).to_le();
            }
        }
        Err(_) => {
            for (j, c) in body.chunks_exact_mut(8).enumerate() {
                c.copy_from_slice(&word(seed, w0.wrapping_add(j as u64)).to_le_bytes());
            }
        }
    }
    let tail_start = body_start.wrapping_add(body.len() as u64);
    for (i, b) in tail.iter_mut().enumerate() {
        *b = pattern_byte(seed, tail_start.wrapping_add(i as u64));
    }
}

/// Where bytes differ from the pattern they should hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Address of the first wrong byte.
    pub first: u64,
    /// Number of wrong bytes.
    pub count: u64,
}

impl Mismatch {
    fn merge(a: Option<Mismatch>, b: Option<Mismatch>) -> Option<Mismatch> {
        match (a, b) {
            (Some(x), Some(y)) => Some(Mismatch {
                first: x.first.min(y.first),
                count: x.count.saturating_add(y.count),
            }),
            (x, None) => x,
            (None, y) => y,
        }
    }
}

fn verify_bytes(buf: &[u8], start: u64, seed: u64) -> Option<Mismatch> {
    let mut out: Option<Mismatch> = None;
    for (i, &b) in buf.iter().enumerate() {
        let addr = start.wrapping_add(i as u64);
        if b != pattern_byte(seed, addr) {
            out = Mismatch::merge(
                out,
                Some(Mismatch {
                    first: addr,
                    count: 1,
                }),
            );
        }
    }
    out
}

/// Checks that `buf`, whose first byte is at address `start`, holds the pattern of `seed`.
pub fn verify(buf: &[u8], start: u64, seed: u64) -> Option<Mismatch> {
    const BLOCK: usize = 4096;
    let head = usize::try_from(start.wrapping_neg() & 7)
        .unwrap_or(0)
        .min(buf.len());
    let (h, rest) = buf.split_at(head);
    let mut out = verify_bytes(h, start, seed);
    let body_start = start.wrapping_add(head as u64);
    let (body, tail) = rest.split_at(rest.len() - rest.len() % 8);
    let w0 = body_start >> 3;
    match bytemuck::try_cast_slice::<u8, u64>(body) {
        Ok(words) => {
            for (k, block) in words.chunks(BLOCK).enumerate() {
                let base = w0.wrapping_add((k * BLOCK) as u64);
                let diff = block.iter().enumerate().fold(0u64, |acc, (j, &w)| {
                    acc | (u64::from_le(w) ^ word(seed, base.wrapping_add(j as u64)))
                });
                if diff != 0 {
                    let bytes = bytemuck::cast_slice::<u64, u8>(block);
                    out = Mismatch::merge(out, verify_bytes(bytes, base << 3, seed));
                }
            }
        }
        Err(_) => {
            for (k, block) in body.chunks(BLOCK * 8).enumerate() {
                let addr = body_start.wrapping_add((k * BLOCK * 8) as u64);
                let diff = block.chunks_exact(8).enumerate().fold(0u64, |acc, (j, c)| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(c);
                    acc | (u64::from_le_bytes(b) ^ word(seed, (addr >> 3).wrapping_add(j as u64)))
                });
                if diff != 0 {
                    out = Mismatch::merge(out, verify_bytes(block, addr, seed));
                }
            }
        }
    }
    let tail_start = body_start.wrapping_add(body.len() as u64);
    Mismatch::merge(out, verify_bytes(tail, tail_start, seed))
}

/// Memory the pattern check can run on: a host arena, a device arena.
pub trait PatternMemory {
    /// What can go wrong touching the memory.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Writes the pattern of `seed` over `[offset, offset + bytes)` of `region`.
    fn fill(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<(), Self::Error>;
    /// Checks `[offset, offset + bytes)` of `region` against the pattern of `seed`.
    fn verify(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<Option<Mismatch>, Self::Error>;
}

/// A byte range outside its region (a layout that does not match the memory).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bytes [{offset}, +{bytes}) lie outside the {region} region")]
pub struct OutOfRegion {
    /// The region.
    pub region: Region,
    /// First byte.
    pub offset: u64,
    /// Length.
    pub bytes: u64,
}

fn host_range(
    arena: &HostArena,
    region: Region,
    offset: u64,
    bytes: u64,
) -> Result<std::ops::Range<usize>, OutOfRegion> {
    let err = OutOfRegion {
        region,
        offset,
        bytes,
    };
    let start = usize::try_from(offset).map_err(|_| err.clone())?;
    let len = usize::try_from(bytes).map_err(|_| err.clone())?;
    let end = start.checked_add(len).ok_or(err.clone())?;
    if end > arena.region(region).len() {
        return Err(err);
    }
    Ok(start..end)
}

/// Ranges at least this long are split across threads.
const PAR_MIN_BYTES: usize = 8 << 20;

/// `buf` cut into at most `threads` pieces of whole pages, with each piece's address.
fn pieces(len: usize, threads: usize) -> usize {
    len.div_ceil(threads.max(1))
        .next_multiple_of(4096)
        .max(4096)
}

/// [`fill`] on `threads` threads (one for short ranges).
pub fn fill_parallel(buf: &mut [u8], start: u64, seed: u64, threads: usize) {
    if threads <= 1 || buf.len() < PAR_MIN_BYTES {
        return fill(buf, start, seed);
    }
    let chunk = pieces(buf.len(), threads);
    std::thread::scope(|s| {
        for (i, c) in buf.chunks_mut(chunk).enumerate() {
            s.spawn(move || fill(c, start.wrapping_add((i * chunk) as u64), seed));
        }
    });
}

/// [`verify`] on `threads` threads (one for short ranges); the result does not depend on
/// the thread count.
pub fn verify_parallel(buf: &[u8], start: u64, seed: u64, threads: usize) -> Option<Mismatch> {
    if threads <= 1 || buf.len() < PAR_MIN_BYTES {
        return verify(buf, start, seed);
    }
    let chunk = pieces(buf.len(), threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks(chunk)
            .enumerate()
            .map(|(i, c)| s.spawn(move || verify(c, start.wrapping_add((i * chunk) as u64), seed)))
            .collect();
        handles.into_iter().fold(None, |acc, h| {
            // A panic in `verify` is a bug in this module, not bad input: pass it on.
            let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            Mismatch::merge(acc, r)
        })
    })
}

impl PatternMemory for HostArena {
    type Error = OutOfRegion;

    fn fill(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<(), OutOfRegion> {
        let range = host_range(self, region, offset, bytes)?;
        let threads = self.threads();
        let buf = self.region_mut(region).get_mut(range).ok_or(OutOfRegion {
            region,
            offset,
            bytes,
        })?;
        fill_parallel(buf, offset, seed, threads);
        Ok(())
    }

    fn verify(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<Option<Mismatch>, OutOfRegion> {
        let range = host_range(self, region, offset, bytes)?;
        let buf = self.region(region).get(range).ok_or(OutOfRegion {
            region,
            offset,
            bytes,
        })?;
        Ok(verify_parallel(buf, offset, seed, self.threads()))
    }
}

/// How much of each read to check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sampling {
    /// Every byte of every read.
    #[default]
    Full,
    /// The first and last `block` bytes of every read, plus every `block`-byte block whose
    /// address is a multiple of `stride`. Writes are always whole, so a clobber shows unless
    /// it is smaller than `stride` and lies strictly inside the victim.
    Sampled {
        /// Bytes per checked block.
        block: u64,
        /// Distance between checked blocks.
        stride: u64,
    },
}

impl Sampling {
    /// The ranges of `[offset, offset + bytes)` to check, in address order, disjoint.
    fn ranges(self, offset: u64, bytes: u64) -> Vec<(u64, u64)> {
        let end = offset.saturating_add(bytes);
        let Sampling::Sampled { block, stride } = self else {
            return vec![(offset, bytes)];
        };
        let (block, stride) = (block.max(1), stride.max(block.max(1)));
        if bytes <= block.saturating_mul(2) || bytes <= stride {
            return vec![(offset, bytes)];
        }
        let mut out: Vec<(u64, u64)> = vec![(offset, block)];
        let mut a = offset.div_ceil(stride).saturating_mul(stride);
        while a < end.saturating_sub(block) {
            out.push((a, block));
            a = a.saturating_add(stride);
        }
        out.push((end - block, block));
        // Merge overlaps, keeping address order.
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(out.len());
        for (s, n) in out {
            match merged.last_mut() {
                Some((ps, pn)) if *ps + *pn >= s => *pn = (*pn).max(s + n - *ps),
                _ => merged.push((s, n)),
            }
        }
        merged
    }
}

/// Options of the pattern check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckOptions {
    /// How much of each read to check.
    pub sampling: Sampling,
}

/// Why a tensor does not hold its pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A later write covered the first wrong byte.
    Overwritten {
        /// The tensor whose write it was.
        by: TensorId,
        /// The step of that write (`None`: before step 0).
        step: Option<u32>,
    },
    /// The tensor's writer had not run yet (the schedule reads it before producing it).
    NotYetWritten,
    /// No write in the plan explains the bytes.
    Unexplained,
}

/// A tensor found not holding its pattern when read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clobber {
    /// The tensor read.
    pub tensor: TensorId,
    /// The tensor whose pattern it should hold (itself, or its root storage's writer for a
    /// view).
    pub writer: TensorId,
    /// The step reading it; `None` for the check of graph outputs after the last step.
    pub step: Option<u32>,
    /// The node reading it (`None` after the last step).
    pub reader: Option<NodeId>,
    /// Its region.
    pub region: Region,
    /// Address of the first wrong byte.
    pub first_bad: u64,
    /// Wrong bytes among those checked.
    pub bad_bytes: u64,
    /// What happened.
    pub cause: Cause,
}

/// The result of a pattern check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Steps executed.
    pub steps: u32,
    /// Tensors written (weights, inputs, node outputs that are not views).
    pub writes: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Reads checked (node inputs and final outputs with bytes).
    pub reads: u64,
    /// Bytes checked.
    pub bytes_checked: u64,
    /// Reads of tensors the layout gives no bytes (skipped).
    pub unplaced_reads: u64,
    /// Whether reads were sampled rather than checked whole.
    pub sampled: bool,
    /// Every clobbered tensor, once, at its first detection, in detection order.
    pub clobbers: Vec<Clobber>,
}

impl CheckReport {
    /// Whether no tensor was clobbered.
    pub fn is_clean(&self) -> bool {
        self.clobbers.is_empty()
    }

    /// One line per clobber, naming tensors and nodes by their graph names.
    pub fn render_clobbers(&self, graph: &Graph) -> Vec<String> {
        let tname = |t: TensorId| {
            graph
                .tensors
                .get(t)
                .map_or_else(|| t.to_string(), |x| format!("{t} `{}`", x.name))
        };
        let nname = |n: NodeId| {
            graph
                .nodes
                .get(n)
                .map_or_else(|| n.to_string(), |x| format!("{n} `{}`", x.name))
        };
        self.clobbers
            .iter()
            .map(|c| {
                let when = match (c.step, c.reader) {
                    (Some(s), Some(n)) => format!("step {s} ({}) reads", nname(n)),
                    _ => "after the last step, graph output".to_owned(),
                };
                let whose = if c.writer == c.tensor {
                    String::new()
                } else {
                    format!(" (view of {})", tname(c.writer))
                };
                let cause = match c.cause {
                    Cause::Overwritten { by, step: Some(s) } => {
                        format!("overwritten by {} at step {s}", tname(by))
                    }
                    Cause::Overwritten { by, step: None } => {
                        format!("overwritten by {} before step 0", tname(by))
                    }
                    Cause::NotYetWritten => "read before it was written".to_owned(),
                    Cause::Unexplained => "changed by no planned write".to_owned(),
                };
                format!(
                    "{when} {}{whose}: {} wrong bytes from {} offset {}; {cause}",
                    tname(c.tensor),
                    c.bad_bytes,
                    c.region,
                    c.first_bad
                )
            })
            .collect()
    }
}

struct WriteRecord {
    region: Region,
    start: u64,
    end: u64,
    writer: TensorId,
    step: Option<u32>,
}

struct Checker<'a, M> {
    layout: &'a Layout,
    mem: &'a mut M,
    opts: CheckOptions,
    /// Per tensor: whose pattern it holds.
    writer: Vec<Option<TensorId>>,
    written: Vec<bool>,
    reported: Vec<bool>,
    log: Vec<WriteRecord>,
    report: CheckReport,
}

impl<M: PatternMemory> Checker<'_, M> {
    fn write(&mut self, t: TensorId, step: Option<u32>) -> Result<(), M::Error> {
        let Some(slot) = self.layout.slot(t) else {
            return Ok(());
        };
        if slot.alias == Some(AliasKind::View) {
            return Ok(());
        }
        self.mem
            .fill(slot.region, slot.offset, slot.bytes, seed(t))?;
        if let Some(w) = self.written.get_mut(t.0 as usize) {
            *w = true;
        }
        self.log.push(WriteRecord {
            region: slot.region,
            start: slot.offset,
            end: slot.end(),
            writer: t,
            step,
        });
        self.report.writes += 1;
        self.report.bytes_written = self.report.bytes_written.saturating_add(slot.bytes);
        Ok(())
    }

    fn read(
        &mut self,
        t: TensorId,
        step: Option<u32>,
        reader: Option<NodeId>,
    ) -> Result<(), M::Error> {
        let Some(slot) = self.layout.slot(t) else {
            self.report.unplaced_reads += 1;
            return Ok(());
        };
        let writer = self
            .writer
            .get(t.0 as usize)
            .copied()
            .flatten()
            .unwrap_or(t);
        let s = seed(writer);
        let mut bad: Option<Mismatch> = None;
        for (offset, bytes) in self.opts.sampling.ranges(slot.offset, slot.bytes) {
            bad = Mismatch::merge(bad, self.mem.verify(slot.region, offset, bytes, s)?);
            self.report.bytes_checked = self.report.bytes_checked.saturating_add(bytes);
        }
        self.report.reads += 1;
        let Some(m) = bad else { return Ok(()) };
        let already = self.reported.get(t.0 as usize).copied().unwrap_or(true);
        if already {
            return Ok(());
        }
        if let Some(r) = self.reported.get_mut(t.0 as usize) {
            *r = true;
        }
        let cause = if !self
            .written
            .get(writer.0 as usize)
            .copied()
            .unwrap_or(false)
        {
            Cause::NotYetWritten
        } else {
            match self
                .log
                .iter()
                .rev()
                .find(|w| w.region == slot.region && w.start <= m.first && m.first < w.end)
            {
                Some(w) if w.writer != writer => Cause::Overwritten {
                    by: w.writer,
                    step: w.step,
                },
                _ => Cause::Unexplained,
            }
        };
        self.report.clobbers.push(Clobber {
            tensor: t,
            writer,
            step,
            reader,
            region: slot.region,
            first_bad: m.first,
            bad_bytes: m.count,
            cause,
        });
        Ok(())
    }
}

/// Runs the pattern check of `layout` (made for `graph`) on `mem`. An `Err` is a memory
/// failure; clobbers are in the report.
pub fn run_check<M: PatternMemory>(
    graph: &Graph,
    layout: &Layout,
    mem: &mut M,
    opts: CheckOptions,
) -> Result<CheckReport, M::Error> {
    let n = graph.tensors.len();
    // Writers: a view holds its root storage's writer's pattern; anything else its own.
    let mut writer: Vec<Option<TensorId>> = vec![None; n];
    for slot in layout.slots() {
        let mut w = slot.tensor;
        for _ in 0..=n {
            match layout.slot(w) {
                Some(s) if s.alias == Some(AliasKind::View) => match s.alias_of {
                    Some(p) => w = p,
                    None => break,
                },
                _ => break,
            }
        }
        if let Some(e) = writer.get_mut(slot.tensor.0 as usize) {
            *e = Some(w);
        }
    }
    let mut c = Checker {
        layout,
        mem,
        opts,
        writer,
        written: vec![false; n],
        reported: vec![false; n],
        log: Vec::new(),
        report: CheckReport {
            sampled: opts.sampling != Sampling::Full,
            ..CheckReport::default()
        },
    };
    for (t, tensor) in graph.tensors.iter_enumerated() {
        if matches!(tensor.kind, TensorKind::Weight | TensorKind::Input) {
            c.write(t, None)?;
        }
    }
    let mut inputs: Vec<TensorId> = Vec::new();
    for (step, &node_id) in layout.schedule().iter().enumerate() {
        let step = u32::try_from(step).unwrap_or(u32::MAX);
        let Some(node) = graph.nodes.get(node_id) else {
            continue;
        };
        inputs.clear();
        inputs.extend(node.present_inputs());
        inputs.sort_unstable();
        inputs.dedup();
        for &t in &inputs {
            c.read(t, Some(step), Some(node_id))?;
        }
        for &t in &node.outputs {
            c.write(t, Some(step))?;
        }
        c.report.steps = step.saturating_add(1);
    }
    for (t, tensor) in graph.tensors.iter_enumerated() {
        if tensor.kind == TensorKind::Output {
            c.read(t, None, None)?;
        }
    }
    Ok(c.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_distinct() {
        let mut seeds: Vec<u64> = (0..10_000).map(|i| seed(TensorId(i))).collect();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), 10_000);
    }

    #[test]
    fn fill_then_verify_at_any_alignment() {
        let mut buf = vec![0u8; 300];
        for start in [0u64, 1, 3, 7, 8, 1001] {
            for len in [0usize, 1, 5, 8, 13, 64, 299] {
                let b = &mut buf[1..1 + len];
                fill(b, start, seed(TensorId(5)));
                assert_eq!(
                    verify(b, start, seed(TensorId(5))),
                    None,
                    "start {start} len {len}"
                );
                for (i, &x) in b.iter().enumerate() {
                    assert_eq!(x, pattern_byte(seed(TensorId(5)), start + i as u64));
                }
                if len >= 8 {
                    // Another writer's pattern differs in every word.
                    assert!(verify(b, start, seed(TensorId(6))).is_some());
                }
            }
        }
    }

    #[test]
    fn verify_reports_first_bad_byte_and_count() {
        let mut buf = vec![0u8; 100_000];
        fill(&mut buf, 64, seed(TensorId(1)));
        buf[40_000] ^= 1;
        buf[40_001] ^= 1;
        buf[99_999] ^= 0xFF;
        assert_eq!(
            verify(&buf, 64, seed(TensorId(1))),
            Some(Mismatch {
                first: 40_064,
                count: 3
            })
        );
        // Also through the unaligned path: one byte in.
        assert_eq!(
            verify(&buf[1..], 65, seed(TensorId(1))),
            Some(Mismatch {
                first: 40_064,
                count: 3
            })
        );
    }

    #[test]
    fn parallel_fill_and_verify_match_serial() {
        let n = PAR_MIN_BYTES + 12_345;
        let mut a = vec![0u8; n];
        let mut b = vec![0u8; n];
        fill(&mut a, 3, 77);
        fill_parallel(&mut b, 3, 77, 3);
        assert!(a == b);
        b[n - 1] ^= 1;
        b[5000] ^= 1;
        let want = Some(Mismatch {
            first: 5003,
            count: 2,
        });
        assert_eq!(verify(&b, 3, 77), want);
        for threads in [1, 2, 3, 8] {
            assert_eq!(verify_parallel(&b, 3, 77, threads), want);
        }
    }

    #[test]
    fn sampled_ranges_cover_ends_and_strides() {
        let s = Sampling::Sampled {
            block: 16,
            stride: 1000,
        };
        assert_eq!(s.ranges(10, 20), vec![(10, 20)]);
        assert_eq!(
            s.ranges(0, 3000),
            vec![(0, 16), (1000, 16), (2000, 16), (2984, 16)]
        );
        assert_eq!(s.ranges(990, 1100), vec![(990, 26), (2000, 16), (2074, 16)]);
        assert_eq!(Sampling::Full.ranges(5, 7), vec![(5, 7)]);
    }
}

#[cfg(test)]
mod check_tests {
    use super::*;
    use crate::layout::LayoutOptions;
    use crate::test_util::{chain_graph, chain_plan};

    fn check(plan: &memplan_planner::Plan, g: &Graph) -> CheckReport {
        let layout = Layout::new(g, plan, &LayoutOptions::default()).unwrap();
        let mut arena = HostArena::new(layout.clone()).unwrap();
        run_check(g, &layout, &mut arena, CheckOptions::default()).unwrap()
    }

    #[test]
    fn correct_plan_is_clean() {
        let (g, ids) = chain_graph();
        let r = check(&chain_plan(&g, &ids), &g);
        assert!(r.is_clean(), "{:?}", r.clobbers);
        assert_eq!(r.steps, 4);
        // w, w2, k, x before step 0; a, b, y by nodes (v is a view: no write).
        assert_eq!(r.writes, 7);
        assert_eq!(r.bytes_written, 64 * 6 + 16);
        // Reads: x,w | a,k | v,w2 | b,a | final y.
        assert_eq!(r.reads, 9);
        assert_eq!(r.bytes_checked, 64 * 8 + 16);
    }

    #[test]
    fn overlapping_live_buffers_are_caught() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        // b is written at step 2 over a, which step 3 still reads.
        plan.buffers
            .iter_mut()
            .find(|b| b.tensor == ids.b)
            .unwrap()
            .offset = 0;
        let r = check(&plan, &g);
        assert_eq!(r.clobbers.len(), 1, "{:?}", r.clobbers);
        let c = &r.clobbers[0];
        assert_eq!(
            (c.tensor, c.writer, c.step, c.reader),
            (ids.a, ids.a, Some(3), Some(NodeId(3)))
        );
        assert_eq!(
            c.cause,
            Cause::Overwritten {
                by: ids.b,
                step: Some(2)
            }
        );
        assert_eq!((c.region, c.first_bad, c.bad_bytes), (Region::Arena, 0, 64));
        let lines = r.render_clobbers(&g);
        assert!(
            lines[0].contains("t4 `t0_Add`") && lines[0].contains("overwritten by t6"),
            "{}",
            lines[0]
        );
    }

    #[test]
    fn check_on_host_lays_out_and_runs() {
        let (g, ids) = chain_graph();
        let r = crate::check_on_host(&g, &chain_plan(&g, &ids), CheckOptions::default()).unwrap();
        assert!(r.is_clean());
        let mut bad = chain_plan(&g, &ids);
        bad.alignment = 3;
        assert!(matches!(
            crate::check_on_host(&g, &bad, CheckOptions::default()),
            Err(crate::CheckError::Layout(crate::LayoutError::BadAlignment(
                3
            )))
        ));
    }

    #[test]
    fn reading_before_writing_is_caught() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        // Run y = Add(b, a) before b = Mul(v, w2): b is read before anything wrote it.
        plan.schedule = vec![NodeId(0), NodeId(1), NodeId(3), NodeId(2)];
        let r = check(&plan, &g);
        let c = r.clobbers.iter().find(|c| c.tensor == ids.b).unwrap();
        assert_eq!((c.step, c.cause), (Some(2), Cause::NotYetWritten));
    }

    #[test]
    fn sampled_check_counts_fewer_bytes() {
        let (g, ids) = chain_graph();
        let plan = chain_plan(&g, &ids);
        let layout = Layout::new(&g, &plan, &LayoutOptions::default()).unwrap();
        let mut arena = HostArena::new(layout.clone()).unwrap();
        let opts = CheckOptions {
            sampling: Sampling::Sampled {
                block: 8,
                stride: 32,
            },
        };
        let r = run_check(&g, &layout, &mut arena, opts).unwrap();
        assert!(r.is_clean() && r.sampled);
        assert!(r.bytes_checked < 64 * 8 + 16);
    }
}
