//! The pattern check: execute a plan on real bytes and prove no live tensor is clobbered.
//!
//! Walk the schedule. Before step 0, every weight and every graph input in the layout gets
//! its pattern. At each step the node's inputs are checked (each must still hold the pattern
//! its writer left), then each output the node writes gets its own pattern:
//! - an ordinary output is written over its whole range;
//! - an in-place output is written too: it overwrites its parent's bytes;
//! - a view output is not written: its bytes *are* its parent's, so its writer is its root
//!   storage's writer and reading it checks that writer's pattern over the view's range;
//! - a Concat part (Concat elision) is written by its producer where the Concat's output
//!   will be. The Concat then writes its whole output, but a part at exactly its input's
//!   slice (the op's definition, [`op_effects::concat_slot`]) is a legal source of that
//!   write: its bytes, and every tensor reading them, now hold the output's pattern. A part
//!   of an output with several rows (the dims before the axis) is one run per row: it is
//!   written and checked run by run, and the bytes between its runs are its neighbours'.
//!
//! A node that runs bodies reads, besides its inputs, every value of the graph its bodies
//! read at any depth, found by name (as ONNX resolves them), so a capture the graph forgot
//! to declare is still checked live. A node with a workspace fills it with a pattern of its
//! own (its bodies' scratch), then
//! runs the plan of each of its bodies there: a check of its own on the body graph, its
//! arena and weights inside the workspace (nested bodies too), reported per body run; a
//! body range outside the workspace is reported and not touched.
//!
//! Some ops overwrite an input with new values while it stays live (a gradient accumulator,
//! an optimizer step: [`op_effects::updates`]). Each such update writes a pattern of its
//! own over the input's bytes; a reader of the input must find the version the graph's node
//! order gives it (the original before the first update in node order, else the last
//! update before it), so a schedule that moves a reader across an update is caught
//! ([`Cause::UpdateOrder`]). `Shape` and `Size` read no bytes ([`op_effects::reads_bytes`]).
//!
//! After the last step every graph output is checked once more, and so is every graph input
//! or training state that a node updated (the caller reads it back). The check reads only the
//! graph, the layout and the bytes; it knows nothing of how the plan was made, so a planner
//! bug shows up as a [`Clobber`] naming the victim, the reader and (from a log of writes) the
//! tensor whose write destroyed it.
//!
//! The pattern of writer `w` at byte address `a` of a region is byte `a % 8` (little-endian)
//! of `seed(w) ^ (a / 8) * K`, with `seed` a bijective 64-bit mix of the tensor id. So two
//! writers differ in every 8-byte word they share, and whole words can be written and checked
//! with wide stores and loads. Backends implement [`PatternMemory`] (fill a range, verify a
//! range); the host arena does it in place, the device arena through staging copies.

use memplan_ir::{Graph, Grouped, IndexVec, Node, NodeId, OpRule, OpTable, TensorId, TensorKind};
use memplan_planner::AliasKind;

use crate::host::HostArena;
use crate::layout::{Layout, Region, Slot};
use crate::op_effects;

const K: u64 = 0x9E37_79B9_7F4A_7C15;

/// The pattern seed of writer `t` under `salt`: for a fixed salt a bijection of the id, so
/// distinct writers of one run have distinct seeds.
pub fn seed(t: TensorId, salt: u64) -> u64 {
    // splitmix64's finalizer: invertible, so distinct inputs give distinct outputs.
    let mut z = u64::from(t.0) ^ 0x6D65_6D70_6C61_6E00 ^ salt;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Arenas made so far in this process: each arena's salts start from its own number.
static ARENAS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The salts of one arena: a new one for every check run on it, none shared with any other
/// arena of the process. A tensor's pattern depends on the run's salt, so bytes left by an
/// earlier run (on this memory, or on a pooled buffer that served another arena) never match
/// what a tensor of this run should hold, and a read before its write is caught.
///
/// Deterministic: the `n`-th arena of a process gets the same salts in every process.
#[derive(Debug)]
pub struct Salts {
    arena: u64,
    runs: u64,
}

impl Salts {
    /// The salts of a new arena.
    pub fn new() -> Salts {
        Salts {
            arena: ARENAS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            runs: 0,
        }
    }

    /// The salt of the next run.
    pub fn next_salt(&mut self) -> u64 {
        self.runs = self.runs.wrapping_add(1);
        seed(
            TensorId(self.runs as u32),
            self.arena.wrapping_mul(K) ^ (self.runs >> 32),
        )
    }
}

impl Default for Salts {
    fn default() -> Salts {
        Salts::new()
    }
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
    /// The same mismatch found checking against addresses from `from`, for bytes at `to`.
    pub fn moved(self, from: u64, to: u64) -> Mismatch {
        Mismatch {
            first: self.first.wrapping_sub(from).wrapping_add(to),
            count: self.count,
        }
    }

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
    /// The salt of a new check run on this memory (see [`Salts`]).
    fn next_salt(&mut self) -> u64;
    /// Writes the pattern of `seed` over `[offset, offset + bytes)` of `region`.
    fn fill(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<(), Self::Error>;
    /// Checks `[offset, offset + bytes)` of `region` against the pattern of `seed` for the
    /// addresses from `pattern_at` (a view's bytes hold its source's pattern at the address
    /// the op selects them from). A mismatch's `first` is an address of the region.
    fn verify(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
        pattern_at: u64,
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

/// The most threads a fill or a verify uses, whatever it is asked for.
pub const MAX_THREADS: usize = 64;

/// The smallest piece one thread gets.
const MIN_PIECE: usize = 1 << 20;

/// The piece length when `len` bytes are cut for `threads` threads: whole pages, at least
/// [`MIN_PIECE`], and at most [`MAX_THREADS`] pieces.
fn pieces(len: usize, threads: usize) -> usize {
    len.div_ceil(threads.clamp(1, MAX_THREADS))
        .next_multiple_of(4096)
        .max(MIN_PIECE)
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

    fn next_salt(&mut self) -> u64 {
        self.salts_mut().next_salt()
    }

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
        pattern_at: u64,
    ) -> Result<Option<Mismatch>, OutOfRegion> {
        let range = host_range(self, region, offset, bytes)?;
        let buf = self.region(region).get(range).ok_or(OutOfRegion {
            region,
            offset,
            bytes,
        })?;
        Ok(verify_parallel(buf, pattern_at, seed, self.threads())
            .map(|m| m.moved(pattern_at, offset)))
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
    /// Leave the weight and half regions alone: no weight is written or checked, so their
    /// memory is never touched (a zeroed allocation costs no pages). Activations live in
    /// their own region, so no activation write can reach a weight; the plan verifier checks
    /// that weights do not overlap each other.
    pub skip_weights: bool,
    /// Refuse what the check cannot confirm (aliases made by `OpRule::Custom` ops) instead of
    /// trusting it.
    pub strict: bool,
    /// The pattern salt; `None` takes the memory's next one (see [`Salts`]).
    pub salt: Option<u64>,
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
    /// The workspace of a node (scratch bytes of its bodies) covered the first wrong byte.
    Workspace {
        /// The node.
        node: NodeId,
        /// Its step.
        step: u32,
    },
    /// The tensor's writer had not run yet (the schedule reads it before producing it).
    NotYetWritten,
    /// The tensor is updated in place by `node`, and the read runs on the other side of that
    /// update than the graph's node order puts it.
    UpdateOrder {
        /// The updating node.
        node: NodeId,
    },
    /// No write in the plan explains the bytes.
    Unexplained,
}

/// A tensor found not holding its pattern when read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clobber {
    /// The tensor read.
    pub tensor: TensorId,
    /// The tensor whose pattern it should hold (itself, or its source's writer for a view).
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

/// What is wrong with a view the plan claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewFault {
    /// The op's definition does not make this output a known byte range of an input.
    NotAView,
    /// The op selects the bytes from another input than the plan's parent.
    WrongSource {
        /// The input the op selects from.
        expected: TensorId,
    },
    /// The view does not start where the selected bytes are, or is not as long.
    WrongPlace {
        /// Where the selected bytes start in the region.
        expected_offset: u64,
        /// How many bytes the op selects.
        expected_bytes: u64,
    },
}

/// A view output the check refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadView {
    /// The view.
    pub tensor: TensorId,
    /// The node producing it.
    pub node: NodeId,
    /// Its step.
    pub step: u32,
    /// What is wrong.
    pub fault: ViewFault,
}

/// An alias the check could not confirm and trusted (made by an `OpRule::Custom` op).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trusted {
    /// The aliased output.
    pub tensor: TensorId,
    /// The node producing it.
    pub node: NodeId,
    /// View or in-place.
    pub alias: AliasKind,
}

/// One run of a body's plan inside its node's workspace, at the node's step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyRun {
    /// The node.
    pub node: NodeId,
    /// The body's attribute.
    pub attr: String,
    /// The node's step.
    pub step: u32,
    /// The body's own check (tensors are the body graph's).
    pub report: CheckReport,
    /// The first byte range `[start, end)` of the workspace's region that the body's plan
    /// touched outside its workspace (not written: the plan does not fit).
    pub outside: Option<(u64, u64)>,
    /// A memory failure that stopped the run.
    pub failed: Option<String>,
}

impl BodyRun {
    fn is_clean(&self) -> bool {
        self.report.is_clean() && self.outside.is_none() && self.failed.is_none()
    }
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
    /// Of those, reads of a tensor that was checked whole and held, with no write touching
    /// it since: its bytes cannot have changed, so they were not read again.
    pub reads_unchanged: u64,
    /// Bytes checked.
    pub bytes_checked: u64,
    /// Reads of tensors the layout gives no bytes (skipped).
    pub unplaced_reads: u64,
    /// Reads of weights skipped ([`CheckOptions::skip_weights`]).
    pub weight_reads_skipped: u64,
    /// Whether reads were sampled rather than checked whole.
    pub sampled: bool,
    /// Every clobbered tensor, once, at its first detection, in detection order.
    pub clobbers: Vec<Clobber>,
    /// Every view the check refuses, in schedule order.
    pub bad_views: Vec<BadView>,
    /// Aliases trusted, not verified, in schedule order.
    pub trusted: Vec<Trusted>,
    /// Every body run, in schedule order (the node's bodies in order), with its own report.
    pub bodies: Vec<BodyRun>,
}

impl CheckReport {
    /// Whether no tensor was clobbered and every view holds the bytes its op selects, in
    /// the graph and in every body run.
    pub fn is_clean(&self) -> bool {
        self.clobbers.is_empty()
            && self.bad_views.is_empty()
            && self.bodies.iter().all(BodyRun::is_clean)
    }

    /// One line per clobber, then one per bad view, naming tensors and nodes by their graph
    /// names.
    pub fn render_clobbers(&self, graph: &Graph) -> Vec<String> {
        let tname = |t: TensorId| {
            graph
                .tensors()
                .get(t)
                .map_or_else(|| t.to_string(), |x| format!("{t} `{}`", x.name))
        };
        let nname = |n: NodeId| {
            graph
                .nodes()
                .get(n)
                .map_or_else(|| n.to_string(), |x| format!("{n} `{}` ({})", x.name, x.op))
        };
        let clobbers = self.clobbers.iter().map(|c| {
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
                Cause::Workspace { node, step } => {
                    format!(
                        "overwritten by the workspace of {} at step {step}",
                        nname(node)
                    )
                }
                Cause::NotYetWritten => "read before it was written".to_owned(),
                Cause::UpdateOrder { node } => format!(
                    "it holds another version than the graph's order gives this read (the update by {} is on the wrong side of it)",
                    nname(node)
                ),
                Cause::Unexplained => "changed by no planned write".to_owned(),
            };
            format!(
                "{when} {}{whose}: {} wrong bytes from {} offset {}; {cause}",
                tname(c.tensor),
                Grouped(c.bad_bytes),
                c.region,
                Grouped(c.first_bad)
            )
        });
        let views = self.bad_views.iter().map(|v| {
            let what = match v.fault {
                ViewFault::NotAView => {
                    "is planned as a view, but the op's definition selects no byte range of an input"
                        .to_owned()
                }
                ViewFault::WrongSource { expected } => {
                    format!("is planned as a view of another input than {}", tname(expected))
                }
                ViewFault::WrongPlace {
                    expected_offset,
                    expected_bytes,
                } => format!(
                    "does not hold the bytes its op selects ({} bytes at offset {})",
                    Grouped(expected_bytes),
                    Grouped(expected_offset)
                ),
            };
            format!("step {} ({}) view {} {what}", v.step, nname(v.node), tname(v.tensor))
        });
        let mut lines: Vec<String> = clobbers.chain(views).collect();
        for run in self.bodies.iter().filter(|r| !r.is_clean()) {
            let at = format!(
                "step {} ({}), body `{}`",
                run.step,
                nname(run.node),
                run.attr
            );
            if let Some((start, end)) = run.outside {
                lines.push(format!(
                    "{at}: its plan touches arena bytes {}..{}, outside the node's workspace",
                    Grouped(start),
                    Grouped(end)
                ));
            }
            if let Some(why) = &run.failed {
                lines.push(format!("{at}: could not be run: {why}"));
            }
            let body = graph
                .nodes()
                .get(run.node)
                .and_then(|n| n.bodies.iter().find(|b| b.attr == run.attr));
            if let Some(body) = body {
                for line in run.report.render_clobbers(&body.graph) {
                    lines.push(format!("{at}: {line}"));
                }
            }
        }
        lines
    }

    /// One line per trusted alias.
    pub fn render_trusted(&self, graph: &Graph) -> Vec<String> {
        self.trusted
            .iter()
            .map(|t| {
                let name = graph
                    .tensors()
                    .get(t.tensor)
                    .map_or("?", |x| x.name.as_str());
                let op = graph.nodes().get(t.node).map_or("?", |x| x.op.as_str());
                format!(
                    "{} `{name}` ({op}, {:?}): trusted, not verified",
                    t.tensor, t.alias
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
    /// The node whose workspace this write is (its `writer` is then a pseudo id).
    workspace: Option<NodeId>,
}

/// What a tensor's bytes should hold: the pattern of `writer` for the addresses from `at`,
/// as the node `update` left it when a node updated it in place.
#[derive(Clone, Copy)]
struct Expect {
    writer: TensorId,
    at: u64,
    update: Option<NodeId>,
}

/// The salt of the values node `n` writes over a tensor it updates in place: a bijection of
/// the id, never 0, so each update's pattern differs from the tensor's first write.
fn update_salt(n: NodeId) -> u64 {
    seed(TensorId(n.0), 0x7570_6461_7465_0000) | 1
}

struct Checker<'a, M> {
    graph: &'a Graph,
    layout: &'a Layout,
    ops: &'a OpTable,
    mem: &'a mut M,
    opts: CheckOptions,
    salt: u64,
    /// Per tensor: what it holds once written (views: their source's writer).
    expect: IndexVec<TensorId, Option<Expect>>,
    written: IndexVec<TensorId, bool>,
    reported: IndexVec<TensorId, bool>,
    /// Per tensor: the length of `log` when it was last checked whole and held; a later read
    /// re-reads its bytes only if a write since then touched them (bytes change only through
    /// the check's own writes).
    clean_at: IndexVec<TensorId, Option<usize>>,
    log: Vec<WriteRecord>,
    report: CheckReport,
    /// Per tensor: the nodes that update it in place, in node order (the graph's program
    /// order decides which version each reader sees).
    updaters: IndexVec<TensorId, Vec<NodeId>>,
}

impl<'a, M: PatternMemory> Checker<'a, M> {
    fn skipped(&self, slot: &Slot) -> bool {
        self.opts.skip_weights && slot.region != Region::Arena
    }

    fn expect(&self, t: TensorId, slot: &Slot) -> Expect {
        self.expect.get(t).copied().flatten().unwrap_or(Expect {
            writer: t,
            at: slot.offset,
            update: None,
        })
    }

    fn seed_of(&self, e: Expect) -> u64 {
        match e.update {
            None => seed(e.writer, self.salt),
            Some(n) => seed(e.writer, self.salt ^ update_salt(n)),
        }
    }

    /// The update of `t` a read by `reader` must see: the last updater before it in node
    /// order (after the last step, the last one).
    fn update_seen_by(&self, t: TensorId, reader: Option<NodeId>) -> Option<NodeId> {
        let list = self.updaters.get(t)?;
        match reader {
            Some(r) => list.iter().rev().find(|&&m| m < r).copied(),
            None => list.last().copied(),
        }
    }

    fn write(&mut self, t: TensorId, step: Option<u32>) -> Result<(), M::Error> {
        self.write_version(t, step, None)
    }

    /// Writes `t`'s pattern over its bytes: its first write (`update` `None`), or the new
    /// values node `update` gives it in place.
    fn write_version(
        &mut self,
        t: TensorId,
        step: Option<u32>,
        update: Option<NodeId>,
    ) -> Result<(), M::Error> {
        let Some(slot) = self.layout.slot(t) else {
            return Ok(());
        };
        if self.skipped(slot) {
            return Ok(());
        }
        let e = Expect {
            writer: t,
            at: slot.offset,
            update,
        };
        let s = self.seed_of(e);
        // Run by run: a strided Concat part leaves the bytes between its runs alone.
        for (start, end) in slot.runs() {
            self.mem.fill(slot.region, start, end - start, s)?;
        }
        if let Some(w) = self.written.get_mut(t) {
            *w = true;
        }
        if let Some(x) = self.expect.get_mut(t) {
            *x = Some(e);
        }
        if let Some(c) = self.clean_at.get_mut(t) {
            *c = None;
        }
        self.log.push(WriteRecord {
            region: slot.region,
            start: slot.offset,
            end: slot.end(),
            writer: t,
            step,
            workspace: None,
        });
        self.report.writes += 1;
        self.report.bytes_written = self.report.bytes_written.saturating_add(slot.bytes);
        Ok(())
    }

    /// Checks `t`'s bytes in `[from, to)` (its whole range when `None`).
    fn read(
        &mut self,
        t: TensorId,
        within: Option<(u64, u64)>,
        step: Option<u32>,
        reader: Option<NodeId>,
    ) -> Result<(), M::Error> {
        let Some(slot) = self.layout.slot(t) else {
            self.report.unplaced_reads += 1;
            return Ok(());
        };
        if self.skipped(slot) {
            self.report.weight_reads_skipped += 1;
            return Ok(());
        }
        let whole = within.is_none();
        // Which version an updated tensor must hold depends on the reader: check it anew.
        let writer = self.expect(t, slot).writer;
        let updated = self.updaters.get(writer).is_some_and(|u| !u.is_empty());
        if whole && !updated && self.unchanged_since_checked(t, slot) {
            self.report.reads += 1;
            self.report.reads_unchanged += 1;
            return Ok(());
        }
        let mut e = self.expect(t, slot);
        // An updated tensor (or a view of one) must hold the version the graph's order gives
        // this reader.
        let now = e.update;
        if self.updaters.get(e.writer).is_some_and(|u| !u.is_empty()) {
            e.update = self.update_seen_by(e.writer, reader);
        }
        let s = self.seed_of(e);
        let (from, to) = within.unwrap_or((slot.offset, slot.end()));
        let mut bad: Option<Mismatch> = None;
        // Run by run (one for most tensors), each cut to `[from, to)`.
        for (start, end) in slot.runs() {
            let (from, to) = (from.max(start), to.min(end));
            if from >= to {
                continue;
            }
            for (offset, bytes) in self.opts.sampling.ranges(from, to - from) {
                let at = e.at.wrapping_add(offset.wrapping_sub(slot.offset));
                bad = Mismatch::merge(bad, self.mem.verify(slot.region, offset, bytes, s, at)?);
                self.report.bytes_checked = self.report.bytes_checked.saturating_add(bytes);
            }
        }
        self.report.reads += 1;
        let Some(m) = bad else {
            if whole && let Some(c) = self.clean_at.get_mut(t) {
                *c = Some(self.log.len());
            }
            return Ok(());
        };
        if !self.first_report(t) {
            return Ok(());
        }
        let cause = if !self.written.get(e.writer).copied().unwrap_or(false) {
            Cause::NotYetWritten
        } else if e.update != now {
            Cause::UpdateOrder {
                node: e.update.or(now).unwrap_or(NodeId(u32::MAX)),
            }
        } else {
            match self
                .log
                .iter()
                .rev()
                .find(|w| w.region == slot.region && w.start <= m.first && m.first < w.end)
            {
                Some(WriteRecord {
                    workspace: Some(node),
                    step: Some(step),
                    ..
                }) => Cause::Workspace {
                    node: *node,
                    step: *step,
                },
                Some(w) if w.writer != e.writer => Cause::Overwritten {
                    by: w.writer,
                    step: w.step,
                },
                _ => Cause::Unexplained,
            }
        };
        self.report.clobbers.push(Clobber {
            tensor: t,
            writer: e.writer,
            step,
            reader,
            region: slot.region,
            first_bad: m.first,
            bad_bytes: m.count,
            cause,
        });
        Ok(())
    }

    /// Whether `t` was checked whole and held, and no write since touched its bytes.
    fn unchanged_since_checked(&self, t: TensorId, slot: &Slot) -> bool {
        let Some(Some(k)) = self.clean_at.get(t).copied() else {
            return false;
        };
        self.log.get(k..).is_some_and(|since| {
            !since
                .iter()
                .any(|w| w.region == slot.region && w.start < slot.end() && slot.offset < w.end)
        })
    }

    /// Whether `t` has not been reported yet (and marks it reported).
    fn first_report(&mut self, t: TensorId) -> bool {
        match self.reported.get_mut(t) {
            Some(r) if !*r => {
                *r = true;
                true
            }
            _ => false,
        }
    }

    fn custom(&self, node: &Node) -> bool {
        matches!(self.ops.rule(&node.op), OpRule::Custom(_))
    }

    /// Output `j` of `node`, planned as a view: it must be the bytes the op's definition
    /// selects from its source. Sets what it holds: its source's pattern from the selected
    /// address.
    fn view(
        &mut self,
        node_id: NodeId,
        node: &Node,
        j: usize,
        slot: &Slot,
        step: u32,
    ) -> Result<(), M::Error> {
        let layout: &'a Layout = self.layout;
        let t = slot.tensor;
        let parent = slot.alias_of.and_then(|p| Some((p, layout.slot(p)?)));
        let trusted = self.custom(node) && !self.opts.strict;
        let sel = op_effects::view_selection(self.graph, node, j, layout.bindings());
        let (source, source_slot, offset, bytes) = match (sel, parent) {
            (_, _) if trusted => {
                self.report.trusted.push(Trusted {
                    tensor: t,
                    node: node_id,
                    alias: AliasKind::View,
                });
                let Some((p, ps)) = parent else { return Ok(()) };
                (p, ps, slot.offset.wrapping_sub(ps.offset), slot.bytes)
            }
            (Some(sel), _) => {
                let Some(src) = node.inputs.get(sel.input).copied().flatten() else {
                    return self.bad_view(t, node_id, step, ViewFault::NotAView);
                };
                if slot.alias_of != Some(src) {
                    return self.bad_view(
                        t,
                        node_id,
                        step,
                        ViewFault::WrongSource { expected: src },
                    );
                }
                let Some(ss) = layout.slot(src) else {
                    return self.bad_view(t, node_id, step, ViewFault::NotAView);
                };
                // A strided Concat part is runs, no range for a view to select from.
                if ss.rows > 1 {
                    return self.bad_view(t, node_id, step, ViewFault::NotAView);
                }
                (src, ss, sel.offset, sel.bytes)
            }
            (None, _) => return self.bad_view(t, node_id, step, ViewFault::NotAView),
        };
        let src = self.expect(source, source_slot);
        let e = Expect {
            writer: src.writer,
            at: src.at.wrapping_add(offset),
            update: src.update,
        };
        if let Some(x) = self.expect.get_mut(t) {
            *x = Some(e);
        }
        if let Some(c) = self.clean_at.get_mut(t) {
            *c = None;
        }
        let expected_offset = source_slot.offset.wrapping_add(offset);
        let in_place = slot.region == source_slot.region
            && slot.offset == expected_offset
            && slot.bytes == bytes;
        if !in_place && !trusted {
            // Not where the selected bytes are: say so (its bytes are then wrong too, unless
            // by accident; later reads of it are not reported again).
            self.bad_view(
                t,
                node_id,
                step,
                ViewFault::WrongPlace {
                    expected_offset,
                    expected_bytes: bytes,
                },
            )?;
        }
        // A view in place holds bytes its source's read just checked: nothing to re-read.
        Ok(())
    }

    fn bad_view(
        &mut self,
        t: TensorId,
        node: NodeId,
        step: u32,
        fault: ViewFault,
    ) -> Result<(), M::Error> {
        if self.first_report(t) {
            self.report.bad_views.push(BadView {
                tensor: t,
                node,
                step,
                fault,
            });
        }
        Ok(())
    }

    /// Whether input `x` of `node` may have been overwritten by the node's own outputs: an
    /// output planned in place over exactly its bytes, for an op that computes each output
    /// element from the same input element alone (or, trusted, a custom op).
    fn legal_in_place_source(&mut self, node_id: NodeId, node: &Node, x: TensorId) -> bool {
        let layout: &'a Layout = self.layout;
        let (Some(&y), Some(xs)) = (node.outputs.first(), layout.slot(x)) else {
            return false;
        };
        let Some(ys) = layout.slot(y) else {
            return false;
        };
        if ys.alias != Some(AliasKind::InPlace) || ys.alias_of != Some(x) {
            return false;
        }
        if self.custom(node) && !self.opts.strict {
            self.report.trusted.push(Trusted {
                tensor: y,
                node: node_id,
                alias: AliasKind::InPlace,
            });
            return true;
        }
        let same_bytes = (ys.region, ys.offset, ys.bytes) == (xs.region, xs.offset, xs.bytes)
            && xs.rows == 1
            && ys.rows == 1;
        same_bytes
            && node.inputs.iter().enumerate().any(|(i, &input)| {
                input == Some(x)
                    && op_effects::in_place_allowed(self.graph, node, i, layout.bindings())
            })
    }

    /// The inputs of `node` planned as parts of its output `out` (Concat elision) that sit
    /// exactly at the slice the op's definition gives them, pushed onto `parts`; a part
    /// anywhere else is reported as a bad view.
    fn legal_parts(
        &mut self,
        node_id: NodeId,
        node: &Node,
        out: &Slot,
        step: u32,
        parts: &mut Vec<TensorId>,
    ) -> Result<(), M::Error> {
        let layout: &'a Layout = self.layout;
        for (i, x) in node.inputs.iter().enumerate() {
            let Some(x) = *x else { continue };
            let Some(xs) = layout.slot(x) else { continue };
            if xs.alias != Some(AliasKind::Part) || xs.alias_of != Some(out.tensor) {
                continue;
            }
            if self.custom(node) && !self.opts.strict {
                self.report.trusted.push(Trusted {
                    tensor: x,
                    node: node_id,
                    alias: AliasKind::Part,
                });
                parts.push(x);
                continue;
            }
            match op_effects::concat_slot(self.graph, node, i, layout.bindings()) {
                Some(slot)
                    if xs.region == out.region
                        && out.offset.checked_add(slot.offset) == Some(xs.offset)
                        && xs.rows == slot.rows
                        && (slot.rows == 1 || xs.stride == slot.stride)
                        && slot.bytes.checked_mul(slot.rows) == Some(xs.bytes) =>
                {
                    parts.push(x);
                }
                Some(slot) => self.bad_view(
                    x,
                    node_id,
                    step,
                    ViewFault::WrongPlace {
                        expected_offset: out.offset.wrapping_add(slot.offset),
                        expected_bytes: slot.bytes.saturating_mul(slot.rows),
                    },
                )?,
                None => self.bad_view(x, node_id, step, ViewFault::NotAView)?,
            }
        }
        Ok(())
    }

    /// After `out`'s write over its legal `parts`: whatever held a part's pattern holds
    /// `out`'s now (same addresses, so the same place in the pattern).
    fn adopt(&mut self, parts: &[TensorId], out: TensorId) {
        if parts.is_empty() {
            return;
        }
        for (e, c) in self
            .expect
            .raw_mut()
            .iter_mut()
            .zip(self.clean_at.raw_mut())
        {
            if let Some(e) = e
                && parts.contains(&e.writer)
            {
                e.writer = out;
                *c = None;
            }
        }
    }

    /// Fills `node`'s workspace with a pattern of its own, as its bodies would scribble on it.
    fn scratch(
        &mut self,
        node: NodeId,
        offset: u64,
        bytes: u64,
        step: u32,
    ) -> Result<(), M::Error> {
        // A pseudo writer id no tensor has (ids count up from 0), so the pattern is its own.
        let writer = TensorId(u32::MAX - node.0);
        self.mem
            .fill(Region::Arena, offset, bytes, seed(writer, self.salt))?;
        self.log.push(WriteRecord {
            region: Region::Arena,
            start: offset,
            end: offset.saturating_add(bytes),
            writer,
            step: Some(step),
            workspace: Some(node),
        });
        self.report.writes += 1;
        self.report.bytes_written = self.report.bytes_written.saturating_add(bytes);
        Ok(())
    }

    /// Runs the plan of each of `node`'s bodies inside its workspace `(offset, bytes)` (on
    /// the workspace's scratch pattern): the body's arena from the workspace's first byte,
    /// its weights from its `weights_at`, with a salt of their own. A body's check is its
    /// own report; a byte it would touch outside the workspace is reported, not touched.
    fn run_bodies(&mut self, node_id: NodeId, node: &Node, workspace: (u64, u64), step: u32) {
        let layout: &'a Layout = self.layout;
        for (k, body_layout) in layout.bodies(node_id).iter().enumerate() {
            let Some(body) = node.bodies.iter().find(|b| b.attr == body_layout.attr) else {
                continue;
            };
            let salt = seed(
                TensorId(u32::MAX - node_id.0),
                self.salt ^ (k as u64).wrapping_add(1).wrapping_mul(K),
            );
            let opts = CheckOptions {
                skip_weights: false,
                salt: Some(salt),
                ..self.opts
            };
            let mut window = Window {
                inner: &mut *self.mem,
                base: workspace.0,
                len: workspace.1,
                weights_at: body_layout.weights_at,
                outside: None,
            };
            let run = run_check_with_ops(
                &body.graph,
                &body_layout.layout,
                &mut window,
                opts,
                self.ops,
            );
            let outside = window.outside;
            let (report, failed) = match run {
                Ok(r) => (r, None),
                Err(e) => (CheckReport::default(), Some(e.to_string())),
            };
            self.report.writes = self.report.writes.saturating_add(report.writes);
            self.report.bytes_written = self
                .report
                .bytes_written
                .saturating_add(report.bytes_written);
            self.report.reads = self.report.reads.saturating_add(report.reads);
            self.report.bytes_checked = self
                .report
                .bytes_checked
                .saturating_add(report.bytes_checked);
            self.report.bodies.push(BodyRun {
                node: node_id,
                attr: body_layout.attr.clone(),
                step,
                report,
                outside,
                failed,
            });
        }
    }

    /// One step: check the inputs, write the workspace and the outputs (views: check they are what the op
    /// selects), then re-check every input that is not a legal in-place source where an
    /// output of this step was written over it.
    fn step(
        &mut self,
        step: u32,
        node_id: NodeId,
        node: &Node,
        inputs: &mut Vec<TensorId>,
    ) -> Result<(), M::Error> {
        let layout: &'a Layout = self.layout;
        inputs.clear();
        // Shape and Size read no bytes.
        inputs.extend(
            node.inputs
                .iter()
                .enumerate()
                .filter(|&(i, _)| op_effects::reads_bytes(node, i))
                .filter_map(|(_, t)| *t)
                .chain(node.implicit_inputs.iter().copied()),
        );
        // What its bodies read of this graph, found by name at any depth (ONNX resolves a
        // body's names in the scopes around it), whatever the node's implicit inputs say.
        captured_by_name(self.graph, node, inputs);
        inputs.sort_unstable();
        inputs.dedup();
        for &t in inputs.iter() {
            self.read(t, None, Some(step), Some(node_id))?;
        }
        if let Some((offset, bytes)) = layout.workspace(node_id) {
            self.scratch(node_id, offset, bytes, step)?;
            self.run_bodies(node_id, node, (offset, bytes), step);
            // Scratch destroys whatever it covers: every input under it is re-checked, an
            // in-place source too.
            for &x in inputs.iter() {
                let Some(xs) = layout.slot(x) else { continue };
                let end = offset.saturating_add(bytes);
                if xs.region == Region::Arena && offset < xs.end() && xs.offset < end {
                    let within = (offset.max(xs.offset), end.min(xs.end()));
                    self.read(x, Some(within), Some(step), Some(node_id))?;
                }
            }
        }
        let first_write = self.log.len();
        let mut parts: Vec<TensorId> = Vec::new();
        for (j, &t) in node.outputs.iter().enumerate() {
            match layout.slot(t) {
                Some(slot) if slot.alias == Some(AliasKind::View) => {
                    self.view(node_id, node, j, slot, step)?;
                }
                Some(slot) => {
                    let first_part = parts.len();
                    self.legal_parts(node_id, node, slot, step, &mut parts)?;
                    self.write(t, Some(step))?;
                    self.adopt(&parts[first_part..], t);
                }
                None => self.write(t, Some(step))?,
            }
        }
        for &x in inputs.iter() {
            let Some(xs) = layout.slot(x) else {
                continue;
            };
            let hits = self.writes_over(first_write, xs);
            if hits.is_empty() || parts.contains(&x) || self.legal_in_place_source(node_id, node, x)
            {
                continue;
            }
            for within in hits {
                self.read(x, Some(within), Some(step), Some(node_id))?;
            }
        }
        self.apply_updates(step, node_id, node, inputs)
    }

    /// The byte ranges of `slot` that the writes logged since `first_write` covered.
    fn writes_over(&self, first_write: usize, slot: &Slot) -> Vec<(u64, u64)> {
        self.log[first_write..]
            .iter()
            .filter(|w| w.region == slot.region && w.start < slot.end() && slot.offset < w.end)
            .map(|w| (w.start.max(slot.offset), w.end.min(slot.end())))
            .collect()
    }

    /// The in-place updates `node` makes (see [`op_effects::updates`]): each updated input
    /// gets the pattern of this update; every other input whose bytes it covers is checked
    /// again.
    fn apply_updates(
        &mut self,
        step: u32,
        node_id: NodeId,
        node: &Node,
        inputs: &[TensorId],
    ) -> Result<(), M::Error> {
        let layout: &'a Layout = self.layout;
        let updated: Vec<TensorId> = op_effects::updates(node)
            .into_iter()
            .filter_map(|i| node.inputs.get(i).copied().flatten())
            .collect();
        if updated.is_empty() {
            return Ok(());
        }
        let first_write = self.log.len();
        for &t in &updated {
            self.write_version(t, Some(step), Some(node_id))?;
        }
        for &x in inputs {
            if updated.contains(&x) {
                continue;
            }
            let Some(xs) = layout.slot(x) else { continue };
            let hits = self.writes_over(first_write, xs);
            for within in hits {
                self.read(x, Some(within), Some(step), Some(node_id))?;
            }
        }
        Ok(())
    }
}

/// Appends the tensors of `graph` that `node`'s bodies read, at any depth: body inputs
/// named like a tensor of `graph`.
fn captured_by_name(graph: &Graph, node: &Node, out: &mut Vec<TensorId>) {
    for body in &node.bodies {
        for t in body.graph.tensors().iter() {
            if t.kind == TensorKind::Input
                && let Some(id) = graph.find_tensor(&t.name)
            {
                out.push(id);
            }
        }
        for inner in body.graph.nodes().iter() {
            captured_by_name(graph, inner, out);
        }
    }
}

/// A memory failure inside a body run, its cause kept as text (bodies nest to any depth on
/// one memory type, so the backend's own error type cannot be named).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BodyMemoryError(String);

/// [`PatternMemory`] with its error as text: what a body run writes through.
trait ErasedMemory {
    fn fill(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<(), BodyMemoryError>;
    fn verify(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
        pattern_at: u64,
    ) -> Result<Option<Mismatch>, BodyMemoryError>;
}

impl<M: PatternMemory> ErasedMemory for M {
    fn fill(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<(), BodyMemoryError> {
        PatternMemory::fill(self, region, offset, bytes, seed)
            .map_err(|e| BodyMemoryError(e.to_string()))
    }

    fn verify(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
        pattern_at: u64,
    ) -> Result<Option<Mismatch>, BodyMemoryError> {
        PatternMemory::verify(self, region, offset, bytes, seed, pattern_at)
            .map_err(|e| BodyMemoryError(e.to_string()))
    }
}

/// A node's workspace as the memory of a body's plan: the body's arena region is the
/// workspace from its first byte, its weight region the workspace from `weights_at`. A range
/// outside the workspace is recorded in `outside` and left alone.
struct Window<'m> {
    inner: &'m mut dyn ErasedMemory,
    base: u64,
    len: u64,
    weights_at: u64,
    outside: Option<(u64, u64)>,
}

impl Window<'_> {
    /// The arena range of a body range, if it lies inside the workspace.
    fn place(&mut self, region: Region, offset: u64, bytes: u64) -> Option<u64> {
        let start = match region {
            Region::Arena => Some(offset),
            Region::Weights => self.weights_at.checked_add(offset),
            Region::Half => None,
        };
        let end = start.and_then(|s| s.checked_add(bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= self.len => self.base.checked_add(s),
            _ => {
                let s = self.base.saturating_add(start.unwrap_or(u64::MAX));
                self.outside.get_or_insert((s, s.saturating_add(bytes)));
                None
            }
        }
    }
}

impl PatternMemory for Window<'_> {
    type Error = BodyMemoryError;

    fn next_salt(&mut self) -> u64 {
        // Body runs are always given their salt.
        0
    }

    fn fill(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
    ) -> Result<(), BodyMemoryError> {
        match self.place(region, offset, bytes) {
            Some(at) => self.inner.fill(Region::Arena, at, bytes, seed),
            None => Ok(()),
        }
    }

    fn verify(
        &mut self,
        region: Region,
        offset: u64,
        bytes: u64,
        seed: u64,
        pattern_at: u64,
    ) -> Result<Option<Mismatch>, BodyMemoryError> {
        match self.place(region, offset, bytes) {
            // Patterns are written for the arena's addresses: the address the pattern is
            // read from moves by as much as the range does.
            Some(at) => Ok(self
                .inner
                .verify(
                    Region::Arena,
                    at,
                    bytes,
                    seed,
                    pattern_at.wrapping_add(at.wrapping_sub(offset)),
                )?
                .map(|m| m.moved(at, offset))),
            None => Ok(None),
        }
    }
}

/// Runs the pattern check of `layout` (made for `graph`) on `mem`, with the default op table
/// (see [`run_check_with_ops`]).
pub fn run_check<M: PatternMemory>(
    graph: &Graph,
    layout: &Layout,
    mem: &mut M,
    opts: CheckOptions,
) -> Result<CheckReport, M::Error> {
    run_check_with_ops(graph, layout, mem, opts, &OpTable::default())
}

/// Runs the pattern check of `layout` (made for `graph`) on `mem`. An `Err` is a memory
/// failure; clobbers and refused views are in the report. `ops` serves only to know which
/// ops have a custom memory rule (their aliases are trusted unless
/// [`CheckOptions::strict`]); what a view selects and which in-place writes are legal come
/// from [`crate::op_effects`], never from the planner.
pub fn run_check_with_ops<M: PatternMemory>(
    graph: &Graph,
    layout: &Layout,
    mem: &mut M,
    opts: CheckOptions,
    ops: &OpTable,
) -> Result<CheckReport, M::Error> {
    run_check_observed(graph, layout, mem, opts, ops, &mut |_, _| {})
}

/// [`run_check_with_ops`], calling `on_step(done, total)` after each step (for a progress
/// display).
pub fn run_check_observed<M: PatternMemory>(
    graph: &Graph,
    layout: &Layout,
    mem: &mut M,
    opts: CheckOptions,
    ops: &OpTable,
    on_step: &mut dyn FnMut(u32, u32),
) -> Result<CheckReport, M::Error> {
    let n = graph.tensors().len();
    let total = u32::try_from(layout.schedule().len()).unwrap_or(u32::MAX);
    let salt = match opts.salt {
        Some(s) => s,
        None => mem.next_salt(),
    };
    let mut c = Checker {
        graph,
        layout,
        ops,
        mem,
        opts,
        salt,
        expect: IndexVec::from_elem(None, n),
        written: IndexVec::from_elem(false, n),
        reported: IndexVec::from_elem(false, n),
        clean_at: IndexVec::from_elem(None, n),
        log: Vec::new(),
        report: CheckReport {
            sampled: opts.sampling != Sampling::Full,
            ..CheckReport::default()
        },
        updaters: IndexVec::from_elem(Vec::new(), n),
    };
    for (m, node) in graph.nodes().iter_enumerated() {
        for i in op_effects::updates(node) {
            if let Some(t) = node.inputs.get(i).copied().flatten()
                && let Some(list) = c.updaters.get_mut(t)
            {
                list.push(m);
            }
        }
    }
    let producers = graph.producers();
    for (t, tensor) in graph.tensors().iter_enumerated() {
        // Training state a node writes gets its pattern then; fed state keeps the caller's.
        let fed_state = tensor.kind == TensorKind::State && producers[t].is_none();
        if matches!(tensor.kind, TensorKind::Weight | TensorKind::Input) || fed_state {
            c.write(t, None)?;
        }
    }
    let mut inputs: Vec<TensorId> = Vec::new();
    for (step, &node_id) in layout.schedule().iter().enumerate() {
        let step = u32::try_from(step).unwrap_or(u32::MAX);
        let Some(node) = graph.nodes().get(node_id) else {
            continue;
        };
        c.step(step, node_id, node, &mut inputs)?;
        c.report.steps = step.saturating_add(1);
        on_step(c.report.steps, total);
    }
    for (t, tensor) in graph.tensors().iter_enumerated() {
        // The caller reads outputs, and inputs and state it had updated, after the last step.
        let updated = matches!(tensor.kind, TensorKind::Input | TensorKind::State)
            && c.updaters.get(t).is_some_and(|u| !u.is_empty());
        if tensor.kind == TensorKind::Output || updated {
            c.read(t, None, None, None)?;
        }
    }
    Ok(c.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_distinct() {
        let mut seeds: Vec<u64> = (0..10_000).map(|i| seed(TensorId(i), 0)).collect();
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
                fill(b, start, seed(TensorId(5), 0));
                assert_eq!(
                    verify(b, start, seed(TensorId(5), 0)),
                    None,
                    "start {start} len {len}"
                );
                for (i, &x) in b.iter().enumerate() {
                    assert_eq!(x, pattern_byte(seed(TensorId(5), 0), start + i as u64));
                }
                if len >= 8 {
                    // Another writer's pattern differs in every word.
                    assert!(verify(b, start, seed(TensorId(6), 0)).is_some());
                }
            }
        }
    }

    #[test]
    fn verify_reports_first_bad_byte_and_count() {
        let mut buf = vec![0u8; 100_000];
        fill(&mut buf, 64, seed(TensorId(1), 0));
        buf[40_000] ^= 1;
        buf[40_001] ^= 1;
        buf[99_999] ^= 0xFF;
        assert_eq!(
            verify(&buf, 64, seed(TensorId(1), 0)),
            Some(Mismatch {
                first: 40_064,
                count: 3
            })
        );
        // Also through the unaligned path: one byte in.
        assert_eq!(
            verify(&buf[1..], 65, seed(TensorId(1), 0)),
            Some(Mismatch {
                first: 40_064,
                count: 3
            })
        );
    }

    /// A huge thread count cuts a large range into at most
    /// `MAX_THREADS` pieces (it used to be one 4 KiB piece, and one thread, per page).
    #[test]
    fn huge_thread_counts_make_few_pieces() {
        let len = 1usize << 30;
        assert!(len.div_ceil(pieces(len, 1_000_000)) <= MAX_THREADS);
        assert_eq!(pieces(len, 1), len);
        assert_eq!(pieces(len, 4), len / 4);
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
    use crate::host::HostPool;
    use crate::layout::LayoutOptions;
    use crate::pool::PoolLimits;
    use crate::test_util::{chain_graph, chain_plan};
    use memplan_ir::{DType, GraphBuilder};
    use memplan_planner::{Alias, Plan, PlanOptions, PlannedBuffer, plan_graph};

    /// Lays `plan` out without the planner's verifier (the mutants below are plans it
    /// rejects) and runs the check on a fresh host arena.
    fn check_with(plan: &Plan, g: &Graph, opts: CheckOptions) -> CheckReport {
        let layout = Layout::new_unverified(g, plan, &LayoutOptions::default()).unwrap();
        let mut arena = HostArena::new(layout.clone()).unwrap();
        run_check(g, &layout, &mut arena, opts).unwrap()
    }

    fn check(plan: &Plan, g: &Graph) -> CheckReport {
        check_with(plan, g, CheckOptions::default())
    }

    fn buffer(plan: &mut Plan, t: TensorId) -> &mut PlannedBuffer {
        plan.buffers.iter_mut().find(|b| b.tensor == t).unwrap()
    }

    /// Makes `t` an alias of `parent` of this kind, `delta` bytes into it.
    fn claim(plan: &mut Plan, t: TensorId, parent: TensorId, kind: AliasKind, delta: u64) {
        let at = buffer(plan, parent).offset + delta;
        let b = buffer(plan, t);
        b.offset = at;
        b.alias = Some(match kind {
            AliasKind::View => Alias::View {
                of: parent,
                offset: delta,
            },
            AliasKind::InPlace => Alias::InPlace { of: parent },
            AliasKind::Part => Alias::Part {
                of: parent,
                offset: delta,
            },
        });
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
        // Reads: x,w | a,k | v,w2 | b,a | final y; y is written over x, which step 3 does
        // not read: no re-check. a, read again at step 3, was untouched since step 1.
        assert_eq!(r.reads, 9);
        assert_eq!(r.reads_unchanged, 1);
        assert_eq!(r.bytes_checked, 64 * 7 + 16);
        assert!(r.trusted.is_empty());
    }

    #[test]
    fn overlapping_live_buffers_are_caught() {
        let (g, ids) = chain_graph();
        let mut plan = chain_plan(&g, &ids);
        // b = Mul(v, w2) is written at step 2 over a, which step 3 still reads, and over its
        // own input v (a view of a): the re-check after the write finds v changed at step 2,
        // then step 3 finds a.
        buffer(&mut plan, ids.b).offset = 0;
        let r = check(&plan, &g);
        assert_eq!(r.clobbers.len(), 2, "{:?}", r.clobbers);
        let c = &r.clobbers[0];
        assert_eq!(
            (c.tensor, c.writer, c.step, c.cause),
            (
                ids.v,
                ids.a,
                Some(2),
                Cause::Overwritten {
                    by: ids.b,
                    step: Some(2)
                }
            )
        );
        let c = &r.clobbers[1];
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
        assert_eq!((c.region, c.first_bad), (Region::Arena, 0));
        let lines = r.render_clobbers(&g);
        assert!(
            lines[1].contains("t4 `t0_Add`") && lines[1].contains("overwritten by t6"),
            "{}",
            lines[1]
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

    /// A read before its write on memory that an earlier run left
    /// holding the same tensor ids' patterns. Unsalted patterns (one per tensor id and
    /// address) matched the stale bytes and passed.
    #[test]
    fn stale_patterns_from_an_earlier_run_or_arena_are_caught() {
        let (g, ids) = chain_graph();
        let good = chain_plan(&g, &ids);
        let mut bad = good.clone();
        bad.schedule = vec![NodeId(0), NodeId(1), NodeId(3), NodeId(2)];
        let opts = LayoutOptions::default();
        let layout = Layout::new(&g, &good, &opts).unwrap();
        let bad_layout = Layout::new_unverified(&g, &bad, &opts).unwrap();
        let stale = |r: &CheckReport| r.clobbers.iter().any(|c| c.tensor == ids.b);

        // The same arena, run again.
        let mut arena = HostArena::new(layout.clone()).unwrap();
        assert!(
            run_check(&g, &layout, &mut arena, CheckOptions::default())
                .unwrap()
                .is_clean()
        );
        let r = run_check(&g, &bad_layout, &mut arena, CheckOptions::default()).unwrap();
        assert!(stale(&r), "a second run on one arena: {:?}", r.clobbers);

        // A new arena on the pooled buffers of the first.
        let mut pool = HostPool::new(PoolLimits::default());
        let mut first = HostArena::from_pool(layout.clone(), &mut pool).unwrap();
        assert!(
            run_check(&g, &layout, &mut first, CheckOptions::default())
                .unwrap()
                .is_clean()
        );
        first.release(&mut pool);
        let mut second = HostArena::from_pool(bad_layout.clone(), &mut pool).unwrap();
        assert!(pool.stats().hits >= 1, "the arena reuses pooled memory");
        let r = run_check(&g, &bad_layout, &mut second, CheckOptions::default()).unwrap();
        assert!(stale(&r), "a pooled arena: {:?}", r.clobbers);

        // With one salt for both runs the stale bytes would pass: the salt is what catches
        // them.
        let mut arena = HostArena::new(layout.clone()).unwrap();
        let fixed = CheckOptions {
            salt: Some(7),
            ..CheckOptions::default()
        };
        assert!(
            run_check(&g, &layout, &mut arena, fixed)
                .unwrap()
                .is_clean()
        );
        assert!(!stale(
            &run_check(&g, &bad_layout, &mut arena, fixed).unwrap()
        ));
    }

    #[test]
    fn sampled_check_counts_fewer_bytes() {
        let (g, ids) = chain_graph();
        let plan = chain_plan(&g, &ids);
        let r = check_with(
            &plan,
            &g,
            CheckOptions {
                sampling: Sampling::Sampled {
                    block: 8,
                    stride: 32,
                },
                ..CheckOptions::default()
            },
        );
        assert!(r.is_clean() && r.sampled);
        assert!(r.bytes_checked < 64 * 8 + 16);
    }

    #[test]
    fn skipping_weights_touches_only_the_arena() {
        let (g, ids) = chain_graph();
        let r = check_with(
            &chain_plan(&g, &ids),
            &g,
            CheckOptions {
                skip_weights: true,
                ..CheckOptions::default()
            },
        );
        assert!(r.is_clean());
        assert_eq!(r.writes, 4, "x, a, b, y");
        assert_eq!(r.weight_reads_skipped, 3, "w, k, w2");
    }

    /// `x -> [Relu] r -> [Transpose] t -> [MatMul with w] m -> [Reshape] v -> [Add v, r] y`,
    /// f32[4, 4] (64 bytes), planned without aliases: every buffer of its own.
    fn kernel_graph() -> (Graph, [TensorId; 7]) {
        let mut b = GraphBuilder::new("kernels");
        let x = b.input("x", DType::F32, [4, 4]);
        let w = b.weight("w", DType::F32, [4, 4]);
        let shape = b.int_constant("shape", &[16]);
        let r = b.op("Relu", &[x], DType::F32, [4, 4]);
        let t = b.op("Transpose", &[r], DType::F32, [4, 4]);
        let m = b.op("MatMul", &[t, w], DType::F32, [4, 4]);
        let v = b.op("Reshape", &[m, shape], DType::F32, [16]);
        let r2 = b.op("Relu", &[r], DType::F32, [4, 4]);
        let y = b.op("Add", &[v, r2], DType::F32, [16]);
        b.mark_output(y);
        (b.build().unwrap(), [x, r, t, m, v, r2, y])
    }

    fn kernel_plan(g: &Graph) -> Plan {
        let plan = plan_graph(g, &PlanOptions::default().without_aliasing()).unwrap();
        assert!(
            crate::check_on_host(g, &plan, CheckOptions::default())
                .unwrap()
                .is_clean()
        );
        plan
    }

    /// Mutant: `t = Transpose(r)` written over its own input at the same step, claimed as
    /// in-place. The verifier refuses it; the check, which knows only the ONNX definition,
    /// finds `r` changed by its own reader's write.
    #[test]
    fn a_transpose_written_over_its_input_is_caught() {
        let (g, [_, r, t, ..]) = kernel_graph();
        let mut plan = kernel_plan(&g);
        claim(&mut plan, t, r, AliasKind::InPlace, 0);
        assert!(Layout::new(&g, &plan, &LayoutOptions::default()).is_err());
        let rep = check(&plan, &g);
        let c = rep
            .clobbers
            .iter()
            .find(|c| c.tensor == r)
            .expect("r clobbered");
        assert_eq!(
            c.cause,
            Cause::Overwritten {
                by: t,
                step: c.step
            }
        );
        // Unclaimed, the same placement is caught the same way.
        let tb = buffer(&mut plan, t);
        tb.alias = None;
        assert!(check(&plan, &g).clobbers.iter().any(|c| c.tensor == r));
    }

    /// Legal in-place writes (elementwise ops over inputs read by nobody after) pass.
    #[test]
    fn legal_in_place_writes_pass() {
        let mut b = GraphBuilder::new("inplace");
        let x = b.input("x", DType::F32, [16]);
        let a = b.op("Exp", &[x], DType::F32, [16]);
        let r = b.op("Relu", &[a], DType::F32, [16]);
        let y = b.op("Neg", &[r], DType::F32, [16]);
        b.mark_output(y);
        let g = b.build().unwrap();
        let plan = plan_graph(&g, &PlanOptions::default()).unwrap();
        assert!(
            plan.buffers
                .iter()
                .any(|b| b.alias_kind() == Some(AliasKind::InPlace))
        );
        let rep = check(&plan, &g);
        assert!(rep.is_clean(), "{:?}", rep.render_clobbers(&g));
    }

    /// Mutant: the Reshape view `v` at a wrong offset inside its source `m`'s range.
    #[test]
    fn a_view_at_a_wrong_offset_is_caught() {
        let (g, [.., m, v, _, _]) = kernel_graph();
        let mut plan = kernel_plan(&g);
        // 16 bytes into m (and 48 long, to stay inside it); the op selects m's 64 bytes.
        let mo = buffer(&mut plan, m).offset;
        claim(&mut plan, v, m, AliasKind::View, 16);
        buffer(&mut plan, v).bytes = 48;
        let rep = check(&plan, &g);
        let bad = rep
            .bad_views
            .iter()
            .find(|b| b.tensor == v)
            .expect("v refused");
        assert_eq!(
            bad.fault,
            ViewFault::WrongPlace {
                expected_offset: mo,
                expected_bytes: 64
            }
        );
        assert!(!rep.is_clean());
        assert!(
            rep.render_clobbers(&g)
                .iter()
                .any(|l| l.contains("does not hold the bytes"))
        );
    }

    /// Mutant: a MatMul output claimed as a view of its first input.
    #[test]
    fn a_matmul_claimed_as_a_view_is_caught() {
        let (g, [_, _, t, m, ..]) = kernel_graph();
        let mut plan = kernel_plan(&g);
        claim(&mut plan, m, t, AliasKind::View, 0);
        let rep = check(&plan, &g);
        let bad = rep
            .bad_views
            .iter()
            .find(|b| b.tensor == m)
            .expect("m refused");
        assert_eq!(bad.fault, ViewFault::NotAView);
    }

    /// A custom op's alias is trusted, not verified, unless strict.
    #[test]
    fn custom_ops_are_trusted_unless_strict() {
        let (g, [_, _, t, m, ..]) = kernel_graph();
        let mut plan = kernel_plan(&g);
        claim(&mut plan, m, t, AliasKind::View, 0);
        let layout = Layout::new_unverified(&g, &plan, &LayoutOptions::default()).unwrap();
        let mut ops = OpTable::default();
        ops.insert(
            "MatMul",
            OpRule::Custom(std::sync::Arc::new(|_, n, _| {
                vec![
                    memplan_ir::MemorySemantics::View {
                        input: 0,
                        offset: 0
                    };
                    n.outputs.len()
                ]
            })),
        );
        let mut arena = HostArena::new(layout.clone()).unwrap();
        let rep =
            run_check_with_ops(&g, &layout, &mut arena, CheckOptions::default(), &ops).unwrap();
        // (Its bytes may still be clobbered later: the plan was made without this alias.)
        assert!(rep.bad_views.is_empty(), "{:?}", rep.bad_views);
        assert_eq!(rep.trusted.len(), 1);
        assert!(rep.render_trusted(&g)[0].contains("trusted, not verified"));
        let strict = CheckOptions {
            strict: true,
            ..CheckOptions::default()
        };
        let rep = run_check_with_ops(&g, &layout, &mut arena, strict, &ops).unwrap();
        assert!(rep.bad_views.iter().any(|b| b.tensor == m));
    }

    /// Every mutant of a hand-made graph's valid plan that makes one output a view or an
    /// in-place write of an input its op does not allow (9 of them: a Relu, a Transpose, a
    /// MatMul and an Add claimed as views, a Transpose, a MatMul and a Reshape claimed as
    /// in-place writes) is refused.
    #[test]
    fn every_illegal_alias_mutant_is_refused() {
        let (g, _) = kernel_graph();
        let plan = kernel_plan(&g);
        let mut passed = Vec::new();
        let mut built = 0;
        for node in g.nodes().iter() {
            let y = node.outputs[0];
            for (i, x) in node.present_inputs().enumerate() {
                let legal_view = node.op == "Reshape" && i == 0;
                let legal_in_place = node.op == "Relu" || node.op == "Add";
                for kind in [AliasKind::View, AliasKind::InPlace, AliasKind::Part] {
                    let legal = match kind {
                        AliasKind::View => legal_view,
                        AliasKind::InPlace => legal_in_place,
                        // No Concat here: a part of anything is illegal.
                        AliasKind::Part => false,
                    };
                    if legal || g.tensors()[x].kind == TensorKind::Weight {
                        continue;
                    }
                    let mut bad = plan.clone();
                    claim(&mut bad, y, x, kind, 0);
                    built += 1;
                    if check(&bad, &g).is_clean() {
                        passed.push(format!("{} {kind:?} of {x}", node.op));
                    }
                }
            }
        }
        assert_eq!(built, 16);
        assert!(passed.is_empty(), "mutants that passed: {passed:?}");
    }
}
