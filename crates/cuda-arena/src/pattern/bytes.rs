//! The pattern itself: each writer's seed and the salts of a run, filling and verifying a
//! range (serially or in parallel), and [`PatternMemory`], what a backend implements (the
//! host arena does it in place).

use memplan_ir::TensorId;

use crate::host::CheckArena;
use crate::layout::Region;

pub(super) const K: u64 = 0x9E37_79B9_7F4A_7C15;

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
#[non_exhaustive]
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

    pub(super) fn merge(a: Option<Mismatch>, b: Option<Mismatch>) -> Option<Mismatch> {
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
#[non_exhaustive]
pub struct OutOfRegion {
    /// The region.
    pub region: Region,
    /// First byte.
    pub offset: u64,
    /// Length.
    pub bytes: u64,
}

fn host_range(
    arena: &CheckArena,
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

impl PatternMemory for CheckArena {
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
}
