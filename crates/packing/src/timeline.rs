//! Compressed time and an index of placed buffers by time.
//!
//! [`TimeSlots`] renumbers the distinct start and end times `t_0 < t_1 < ...` so that slot `j`
//! is the span `[t_j, t_{j+1})`; a buffer live over `[start, end)` covers the slots
//! `[lo, hi)` with `t_lo = start` and `t_hi = end`. Two buffers overlap in time exactly when
//! their slot ranges do.
//!
//! [`PlacedIndex`] holds the byte ranges of placed buffers and answers "which bytes do the
//! placed buffers overlapping these slots occupy". It is a segment tree over buckets of
//! consecutive slots: a buffer is stored at the canonical nodes covering the buckets it
//! spans completely, and at the leaf buckets it covers only in part (where a query filters
//! by slot range). Placement only needs the union of the occupied bytes, never which buffer
//! occupies them, so nodes store unions of byte ranges, which merge as the packing fills up.

use std::hint::select_unpredictable;

use super::problem::Problem;

/// The slot range of every buffer (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct TimeSlots {
    /// First slot of each buffer.
    pub lo: Vec<u32>,
    /// One past the last slot of each buffer.
    pub hi: Vec<u32>,
    /// The number of distinct times (an upper bound on every `hi`).
    pub count: u32,
    /// Working memory of [`TimeSlots::fill`]: the rank table or the sorted times.
    rank: Vec<u32>,
    times: Vec<u64>,
}

impl TimeSlots {
    /// Compresses the problem's times (see [`TimeSlots::fill`]).
    pub fn new(problem: &Problem) -> TimeSlots {
        let mut slots = TimeSlots::default();
        slots.fill(problem);
        slots
    }

    /// Compresses the problem's times, reusing this value's vectors. Buffers must have
    /// `end > start` (checked by [`Problem::validate`]). Times that span at most a few times
    /// as many steps as there are buffers (schedules numbered step by step) are ranked by
    /// counting, in `O(n + span)`; others by sorting.
    pub fn fill(&mut self, problem: &Problem) {
        let times = problem.buffers.iter().flat_map(|b| [b.start, b.end]);
        let (min, max) = times.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
        let dense_limit = 4 * problem.len() as u64 + 1024;
        match max.checked_sub(min) {
            Some(span) if span <= dense_limit => self.by_counting(problem, min, span),
            _ => self.by_sorting(problem),
        }
    }

    /// Ranks times in `[min, min + span]` with a table of `span + 1` entries.
    fn by_counting(&mut self, problem: &Problem, min: u64, span: u64) {
        let rank = &mut self.rank;
        rank.clear();
        rank.resize(span as usize + 1, 0);
        for b in &problem.buffers {
            for t in [b.start, b.end] {
                if let Some(r) = rank.get_mut((t - min) as usize) {
                    *r = 1;
                }
            }
        }
        // Each entry becomes the number of distinct times below it.
        let mut count = 0u32;
        for r in rank.iter_mut() {
            let present = *r;
            *r = count;
            count += present;
        }
        let slot = |t: u64| rank.get((t - min) as usize).copied().unwrap_or(u32::MAX);
        self.lo.clear();
        self.lo
            .extend(problem.buffers.iter().map(|b| slot(b.start)));
        self.hi.clear();
        self.hi.extend(problem.buffers.iter().map(|b| slot(b.end)));
        self.count = count;
    }

    fn by_sorting(&mut self, problem: &Problem) {
        let times = &mut self.times;
        times.clear();
        for b in &problem.buffers {
            times.push(b.start);
            times.push(b.end);
        }
        times.sort_unstable();
        times.dedup();
        let slot = |t: u64| u32::try_from(times.partition_point(|&x| x < t)).unwrap_or(u32::MAX);
        self.lo.clear();
        self.lo
            .extend(problem.buffers.iter().map(|b| slot(b.start)));
        self.hi.clear();
        self.hi.extend(problem.buffers.iter().map(|b| slot(b.end)));
        self.count = u32::try_from(times.len()).unwrap_or(u32::MAX);
    }
}

/// The placed buffers stored at a leaf bucket that they cover only in part, sorted by
/// offset: bytes `[offset, end)` in `bytes` and the slots `[lo, hi)` they cover in the
/// bucket, counted from its first slot, in `lo` and `hi`. The slots are kept apart from the
/// bytes, one byte each, so that a query, which keeps about one partial in eight, filters on
/// a compact array and reads the bytes of only the ones it keeps.
#[derive(Clone, Debug, Default)]
struct Partials {
    bytes: Vec<(u64, u64)>,
    slots: Vec<[u8; 2]>,
}

impl Partials {
    fn clear(&mut self) {
        self.bytes.clear();
        self.slots.clear();
    }

    fn insert(&mut self, offset: u64, end: u64, lo: u8, hi: u8) {
        let at = self.bytes.partition_point(|&(o, _)| o <= offset);
        self.bytes.insert(at, (offset, end));
        self.slots.insert(at, [lo, hi]);
    }

    /// Appends the byte ranges of the partials that overlap slots `[lo, hi)` to `out`, by
    /// offset. The test is branch-free, 64 partials at a time into a bit mask, then the kept
    /// ones are read from the mask's set bits.
    fn overlapping(&self, (lo, hi): (u8, u8), out: &mut Vec<(u64, u64)>) {
        for (slots, bytes) in self.slots.chunks(64).zip(self.bytes.chunks(64)) {
            let mut mask = 0u64;
            for (j, &[a, b]) in slots.iter().enumerate() {
                mask |= u64::from((a < hi) & (lo < b)) << j;
            }
            while mask != 0 {
                if let Some(&range) = bytes.get(mask.trailing_zeros() as usize) {
                    out.push(range);
                }
                mask &= mask - 1;
            }
        }
    }
}

/// One node of the index. Byte ranges are kept as unions: sorted, disjoint, not touching.
#[derive(Clone, Debug, Default)]
struct Node {
    /// The union of the buffers stored here, which cover every slot of the node.
    own: Vec<(u64, u64)>,
    /// The union of every buffer stored in this node's subtree, itself included; kept only
    /// for nodes whose height is in the index's union band.
    all: Vec<(u64, u64)>,
    /// At a leaf: buffers that cover only some of its slots.
    partial: Partials,
}

impl Node {
    fn clear(&mut self) {
        self.own.clear();
        self.all.clear();
        self.partial.clear();
    }
}

/// Placed buffers, queried by slot range (see the module docs). The default value is an
/// index over no slots, to be [`PlacedIndex::reset`].
///
/// Each node keeps the union of the byte ranges stored at it. Unions stay short when the
/// packing is tight (neighbouring buffers merge into one range), so a query reads `O(log n)`
/// short unions whatever the number of overlapping buffers. Two kinds of derived unions make
/// the common queries cheap:
/// - covers: every buffer that spans a whole leaf bucket is copied into a few pre-merged
///   lists that a query inside that bucket reads, without a tree walk. Heights come in
///   groups of `group_height`; the buffers stored at the heights of group `k` go into the
///   covers of group `k`, one per run of `2^(k · group_height)` buckets. A buffer stored at
///   height `h` is copied into `2^(h mod group_height)` covers, so an insertion costs
///   `O(2^group_height · log n)` whatever the buffer's lifetime, and a query inside one
///   bucket (most queries) reads one cover per group and the leaf's partial buffers. With
///   two groups or fewer holding anything there (every problem of under about four million slots), it
///   merges them on the fly, without collecting runs.
/// - for the nodes in a band of heights, `all`, the union over the node's subtree: a long
///   query that covers such a node whole takes it and does not descend. The band starts
///   above the leaves (every insertion would pay for a leaf union, and a covered leaf is
///   cheap to read directly) and ends at nodes about four mean lifetimes wide (higher nodes
///   are rarely covered).
#[derive(Debug, Default)]
pub(crate) struct PlacedIndex {
    /// log2 of the number of slots per leaf bucket.
    shift: u32,
    /// Number of leaves, a power of two; node 1 is the root, node `leaves + b` is bucket `b`.
    leaves: usize,
    /// Nodes `first_union..past_union` keep their subtree union.
    first_union: usize,
    past_union: usize,
    nodes: Vec<Node>,
    /// Whether anything is stored in each node's subtree (apart from `nodes`, so that a query
    /// skips empty subtrees without loading them).
    filled: Vec<bool>,
    /// The insertion that last added to each node's subtree union (to add once per insert).
    stamp: Vec<u32>,
    inserts: u32,
    /// The covers, group by group: cover `c` of group `k` is `cover[group_start[k] + c]`, the
    /// union of the buffers stored at the heights of group `k` above buckets
    /// `c << (k · group_height)..(c + 1) << (k · group_height)`.
    cover: Vec<Vec<(u64, u64)>>,
    group_start: Vec<usize>,
    /// Heights per cover group.
    group_height: u32,
    /// Reused buffers of a query: the nodes left to visit, the start of each sorted run in
    /// the collected ranges, a merge buffer and the collected ranges.
    stack: Vec<usize>,
    ranges: Vec<(u64, u64)>,
    runs: Vec<usize>,
    scratch: Vec<(u64, u64)>,
    /// Work done since the last [`PlacedIndex::reset`], in ranges: read by a query (a quarter
    /// for a leaf's partial buffers, which a query scans a byte pair at a time; every pass of
    /// a merge of collected runs), or a union a buffer is added to. Deterministic, and within
    /// a factor of about 1.5 of the time over the generated and the idealloc instances.
    work: u64,
}

/// Slots per leaf bucket, as a power of two; chosen by measurement. 64 beat 8, 16 and 32 on
/// the generated and the idealloc instances; 128 is as fast on the realistic generator and
/// faster where lifetimes are long, because a long-lived buffer spans fewer buckets: on
/// 1M heavy-tailed buffers `greedy-size` takes 2.2-2.4 s against 2.9-3.5 s with 64, and on
/// `iopddl_Y_1` 0.28 s against 0.36 s (2026-11-23, same machine and hour). At most 7:
/// partials store their slots in the bucket in a byte.
const BUCKET_SHIFT: u32 = 7;
const _: () = assert!(BUCKET_SHIFT <= 7);

/// Heights per cover group (see [`PlacedIndex`]): a buffer is copied into at most
/// `2 · (2^GROUP_HEIGHT − 1)` covers per group, and a query inside one bucket reads one cover
/// per group. 8 keeps the first group as the single leaf cover of earlier versions (heights
/// 0 to 7), and puts the buffers stored higher, which were read as one list per height, in
/// one cover per 256 buckets. Measured with `heur_time -s greedy-size` (user time, same
/// offsets): heavy-tailed family members 1.1 to 1.8 times as fast at 300k to 1M buffers
/// (`heavy-1%-n/2` at 1M 7.4 s to 4.2 s), the others unchanged; groups of 4, 6 or 7 heights
/// were slower where buffers span under 256 buckets (two covers instead of one).
const GROUP_HEIGHT: u32 = 8;

/// The lowest level that keeps subtree unions. Unions at lower levels cost an insertion
/// for nearly every buffer (short ones are stored at leaves), while a query that covers
/// such a small node whole reads a few leaves directly. (Measured on 1M generated buffers:
/// the band [3, 3] about 20% faster than [1, 2]; on `iopddl_Y_1`, 1 to 3 alike.)
const UNION_LOW: u32 = 3;

/// The highest level that keeps subtree unions, from the mean lifetime in slots: unions pay
/// off for queries that cover whole nodes, so they are kept up to nodes about four mean
/// lifetimes wide, and at least at [`UNION_LOW`]. (Measured: 7-8 levels are best on
/// `iopddl_Y_1`, whose mean lifetime is in the thousands of slots.)
fn union_height(mean_span: u64) -> u32 {
    let nodes_wide = (4 * mean_span) >> BUCKET_SHIFT;
    (u64::BITS - nodes_wide.leading_zeros()).max(UNION_LOW)
}

/// Adds `[start, end)` to a union of ranges, merging it with every range it overlaps or
/// touches.
fn add_range(union: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    let first = union.partition_point(|&(_, e)| e < start);
    add_range_at(union, first, start, end);
}

/// As [`add_range`], given `first`, the position of the union's first range that ends at or
/// after `start`. The ranges it merges with follow it, so they are found by reading on from
/// there (they are all moved anyway), not by a second search.
fn add_range_at(union: &mut Vec<(u64, u64)>, first: usize, start: u64, end: u64) {
    let merged = union.get(first..).unwrap_or(&[]);
    let past = first + merged.iter().take_while(|&&(s, _)| s <= end).count();
    if first >= past {
        union.insert(first, (start, end));
        return;
    }
    let merged_start = union.get(first).map_or(start, |&(s, _)| s.min(start));
    let merged_end = union.get(past - 1).map_or(end, |&(_, e)| e.max(end));
    if let Some(slot) = union.get_mut(first) {
        *slot = (merged_start, merged_end);
    }
    union.drain(first + 1..past);
}

/// Covers searched side by side by [`add_to_covers`].
const LANES: usize = 8;

/// Adds `[start, end)` to every union of `covers`, as [`add_range`] does. A long buffer goes
/// into up to a few hundred covers, each of which may hold thousands of ranges and is seldom
/// in cache: the searches for where it goes run [`LANES`] covers at a time, one step of each
/// in turn and without branches on the data, so that their cache misses overlap instead of
/// following one another (a training-shaped problem spent 40% of its placement time in these
/// searches).
fn add_to_covers(covers: &mut [Vec<(u64, u64)>], start: u64, end: u64) {
    for lanes in covers.chunks_mut(LANES) {
        // The branch-free lower bound, for each cover: `base` ends on the last range that
        // ends below `start` (or on the first range), `size` halves each step.
        let mut base = [0usize; LANES];
        let mut size = [0usize; LANES];
        for (size, cover) in size.iter_mut().zip(lanes.iter()) {
            *size = cover.len();
        }
        let steps = size.iter().map(|&n| usize::BITS - n.leading_zeros()).max();
        for _ in 0..steps.unwrap_or(0) {
            for ((base, size), cover) in base.iter_mut().zip(size.iter_mut()).zip(lanes.iter()) {
                let half = *size / 2;
                let below = cover.get(*base + half).is_some_and(|r| r.1 < start);
                *base = select_unpredictable(below & (half > 0), *base + half, *base);
                *size -= half;
            }
        }
        for (&base, cover) in base.iter().zip(lanes.iter_mut()) {
            let first = base + usize::from(cover.get(base).is_some_and(|r| r.1 < start));
            add_range_at(cover, first, start, end);
        }
    }
}

impl PlacedIndex {
    /// Empties the index and shapes it for `slots` slots and buffers whose mean lifetime is
    /// `mean_span` slots, keeping the memory its vectors hold.
    pub fn reset(&mut self, slots: u32, mean_span: u64) {
        self.reshape(
            slots,
            BUCKET_SHIFT,
            GROUP_HEIGHT,
            (UNION_LOW, union_height(mean_span)),
        );
    }

    /// Empties the index and shapes it for `slots` slots with buckets of `2^shift` slots
    /// (`shift <= 7`), cover groups of `group_height >= 1` heights and subtree unions at the
    /// heights `unions.0..=unions.1` (each capped at the root's height).
    pub(crate) fn reshape(
        &mut self,
        slots: u32,
        shift: u32,
        group_height: u32,
        unions: (u32, u32),
    ) {
        let buckets = ((slots as usize) >> shift) + 1;
        let leaves = buckets.next_power_of_two();
        let levels = leaves.trailing_zeros();
        let union_high = unions.1.min(levels);
        let union_low = unions.0.min(union_high);
        self.shift = shift;
        self.leaves = leaves;
        self.first_union = leaves >> union_high;
        self.past_union = (2 * leaves) >> union_low;
        self.nodes.truncate(2 * leaves);
        self.nodes.iter_mut().for_each(Node::clear);
        self.nodes.resize_with(2 * leaves, Node::default);
        self.filled.clear();
        self.filled.resize(2 * leaves, false);
        self.stamp.clear();
        self.stamp.resize(2 * leaves, 0);
        self.inserts = 0;
        self.group_height = group_height.max(1);
        self.group_start.clear();
        let mut covers = 0;
        for group in 0..=levels / self.group_height {
            self.group_start.push(covers);
            covers += leaves >> (group * self.group_height);
        }
        self.group_start.push(covers);
        self.cover.truncate(covers);
        self.cover.iter_mut().for_each(Vec::clear);
        self.cover.resize_with(covers, Vec::new);
        self.stack.clear();
        self.ranges.clear();
        self.runs.clear();
        self.scratch.clear();
        self.work = 0;
    }

    /// Work done since the last reset, in ranges (see the field).
    pub fn work(&self) -> u64 {
        self.work
    }

    /// Records a placed buffer with bytes `[offset, end)`, `offset < end`, over slots
    /// `[lo, hi)`, `lo < hi`.
    pub fn insert(&mut self, lo: u32, hi: u32, offset: u64, end: u64) {
        self.inserts = self.inserts.wrapping_add(1);
        let mask = (1u32 << self.shift) - 1;
        let first = (lo >> self.shift) as usize;
        let last = ((hi - 1) >> self.shift) as usize;
        if first == last && (lo & mask != 0 || (hi & mask != 0)) {
            self.store_partial(self.leaves + first, lo, hi, offset, end);
            return;
        }
        let mut from = first;
        if lo & mask != 0 {
            self.store_partial(self.leaves + first, lo, hi, offset, end);
            from += 1;
        }
        let mut to = last + 1;
        if hi & mask != 0 {
            self.store_partial(self.leaves + last, lo, hi, offset, end);
            to -= 1;
        }
        let (mut l, mut r) = (from + self.leaves, to + self.leaves);
        while l < r {
            if l & 1 == 1 {
                self.store_own(l, offset, end);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.store_own(r, offset, end);
            }
            l >>= 1;
            r >>= 1;
        }
    }

    fn store_own(&mut self, node: usize, offset: u64, end: u64) {
        self.work += 1;
        if let Some(n) = self.nodes.get_mut(node) {
            add_range(&mut n.own, offset, end);
        }
        let height = self.height(node);
        let group = height / self.group_height;
        let base = group * self.group_height;
        let first = ((node << height) - self.leaves) >> base;
        let start = self.group_start.get(group as usize).copied().unwrap_or(0);
        let count = 1usize << (height - base);
        let covers = self.cover.get_mut(start + first..).unwrap_or_default();
        let covers = covers.get_mut(..count).unwrap_or_default();
        add_to_covers(covers, offset, end);
        self.work += count as u64;
        self.add_to_subtree_unions(node, offset, end);
    }

    fn store_partial(&mut self, node: usize, lo: u32, hi: u32, offset: u64, end: u64) {
        self.work += 1;
        let (lo, hi) = self.in_bucket(node - self.leaves, lo, hi);
        if let Some(n) = self.nodes.get_mut(node) {
            n.partial.insert(offset, end, lo, hi);
        }
        self.add_to_subtree_unions(node, offset, end);
    }

    /// Adds the range to the subtree unions of `node` and its ancestors in the union band,
    /// stopping at the first one this insertion already reached, and marks every ancestor
    /// filled.
    fn add_to_subtree_unions(&mut self, node: usize, offset: u64, end: u64) {
        let mut n = node;
        while let Some(filled) = self.filled.get_mut(n)
            && !*filled
        {
            *filled = true;
            n >>= 1;
        }
        let mut n = node;
        while n >= self.past_union {
            n >>= 1;
        }
        while n >= self.first_union {
            let (Some(stamp), Some(target)) = (self.stamp.get_mut(n), self.nodes.get_mut(n)) else {
                return;
            };
            if *stamp == self.inserts {
                return;
            }
            *stamp = self.inserts;
            add_range(&mut target.all, offset, end);
            n >>= 1;
        }
    }

    /// The part of slots `[lo, hi)` in bucket `bucket`, counted from the bucket's first slot.
    /// (Whether a query overlaps a buffer stored in part at a leaf needs only their parts in
    /// that bucket: an overlap elsewhere is found where the rest of the buffer is stored.)
    fn in_bucket(&self, bucket: usize, lo: u32, hi: u32) -> (u8, u8) {
        let first = (bucket as u32) << self.shift;
        let width = 1u32 << self.shift;
        let clamp =
            |slot: u32| u8::try_from(slot.saturating_sub(first).min(width)).unwrap_or(u8::MAX);
        (clamp(lo), clamp(hi))
    }

    /// The cover of group `group` above bucket `bucket`.
    fn cover(&self, group: usize, bucket: usize) -> &[(u64, u64)] {
        cover_of(
            &self.cover,
            &self.group_start,
            self.group_height,
            group,
            bucket,
        )
    }

    /// The number of cover groups.
    fn groups(&self) -> usize {
        self.group_start.len().saturating_sub(1)
    }

    /// The height of `node` above the leaves.
    fn height(&self, node: usize) -> u32 {
        (self.leaves.trailing_zeros() + node.leading_zeros()).saturating_sub(usize::BITS - 1)
    }

    /// Reads a little of what a query starting at slot `lo` will read (the bucket's cover and
    /// partial buffers, one value per cache line), so that the loads are under way while the
    /// caller does other work; returns a value that depends on them.
    pub fn warm(&self, lo: u32) -> u64 {
        let bucket = (lo >> self.shift) as usize;
        let mut sum = 0u64;
        for r in self.cover(0, bucket).iter().step_by(4) {
            sum = sum.wrapping_add(r.0);
        }
        if let Some(node) = self.nodes.get(self.leaves + bucket) {
            for s in node.partial.slots.iter().step_by(32) {
                sum = sum.wrapping_add(u64::from(s[0]));
            }
            for r in node.partial.bytes.iter().step_by(4) {
                sum = sum.wrapping_add(r.0);
            }
        }
        sum
    }

    /// Calls `f` with byte ranges in offset order (they may overlap or touch) whose union
    /// covers the placed buffers that overlap slots `[lo, hi)`, `lo < hi`, and leaves free
    /// exactly the same maximal free intervals of at least `min_gap` bytes (and the same
    /// highest occupied byte) as that union. Free intervals shorter than `min_gap` may be
    /// filled: a query for a buffer of `min_gap` bytes skips the ranges that only bound gaps
    /// it cannot use. `min_gap` 0 or 1 gives the union itself.
    ///
    /// Why filling is exact: a maximal free interval of length `min_gap` or more lies inside
    /// a gap of that length of every union (or list) that a query merges, so filling any
    /// shorter gap of a part, or of a partial merge, never touches it; and a filled set only
    /// shrinks the free space, so such an interval stays maximal.
    pub fn for_each_occupied(&mut self, lo: u32, hi: u32, min_gap: u64, f: impl FnMut((u64, u64))) {
        let first = (lo >> self.shift) as usize;
        if first == ((hi - 1) >> self.shift) as usize {
            // Inside one bucket (most queries): when at most two of the bucket's covers hold
            // anything, just those covers and the overlapping partials, merged on the fly.
            let mut filled = (0..self.groups()).filter(|&g| !self.cover(g, first).is_empty());
            let (one, two, other) = (filled.next(), filled.next(), filled.next());
            if other.is_none() {
                let leaf = self.leaves + first;
                self.ranges.clear();
                let mut scanned = 0;
                if let Some(node) = self.nodes.get(leaf) {
                    let part = self.in_bucket(first, lo, hi);
                    node.partial.overlapping(part, &mut self.ranges);
                    scanned = node.partial.bytes.len();
                }
                let cover = |g: Option<usize>| {
                    g.map_or(&[][..], |g| {
                        cover_of(&self.cover, &self.group_start, self.group_height, g, first)
                    })
                };
                let (a, b) = (cover(one), cover(two));
                self.work += (1 + a.len() + b.len() + self.ranges.len() + scanned / 4) as u64;
                if b.is_empty() {
                    merge_each(a, &self.ranges, f);
                } else {
                    merge3_each(a, b, &self.ranges, f);
                }
                return;
            }
        }
        let mut ranges = std::mem::take(&mut self.ranges);
        self.collect(lo, hi, min_gap, &mut ranges);
        ranges.iter().copied().for_each(f);
        self.ranges = ranges;
    }

    /// Replaces `out` with the union of the byte ranges of the placed buffers that overlap
    /// slots `[lo, hi)`, `lo < hi`: sorted by offset, disjoint and not touching.
    ///
    /// A buffer overlapping the query is stored at a node whose buckets meet the query's
    /// buckets `first..=last`. Such a node either contains `first` or `last` (it is one of
    /// their ancestors, read through their covers, or one of the two leaves, whose partial
    /// buffers are filtered by slot), or lies inside `first + 1..last` (the query covers it
    /// whole, so everything in its subtree counts).
    ///
    /// Gaps shorter than `min_gap` may be filled (see [`PlacedIndex::for_each_occupied`]);
    /// the work counted is that of the unfiltered query, so that budgets by work do not
    /// depend on the filter.
    fn collect(&mut self, lo: u32, hi: u32, min_gap: u64, out: &mut Vec<(u64, u64)>) {
        out.clear();
        self.runs.clear();
        let mut unfiltered = 0;
        let first = (lo >> self.shift) as usize;
        let last = ((hi - 1) >> self.shift) as usize;
        let (first_leaf, last_leaf) = (self.leaves + first, self.leaves + last);
        for group in 0..self.groups() {
            let cover =
                |b: usize| cover_of(&self.cover, &self.group_start, self.group_height, group, b);
            unfiltered += push_run(out, &mut self.runs, cover(first), min_gap);
            let shift = group as u32 * self.group_height;
            if first >> shift != last >> shift {
                unfiltered += push_run(out, &mut self.runs, cover(last), min_gap);
            }
        }
        if first == last {
            if let Some(node) = self.nodes.get(first_leaf) {
                let start = out.len();
                node.partial.overlapping(self.in_bucket(first, lo, hi), out);
                unfiltered += push_merged_run(out, &mut self.runs, start, min_gap);
            }
            self.merge_collected(out, unfiltered, min_gap);
            return;
        }
        for bucket in [first, last] {
            if let Some(node) = self.nodes.get(self.leaves + bucket) {
                let start = out.len();
                node.partial
                    .overlapping(self.in_bucket(bucket, lo, hi), out);
                unfiltered += push_merged_run(out, &mut self.runs, start, min_gap);
            }
        }
        // The canonical nodes of the buckets strictly between, as in `insert`.
        self.stack.clear();
        let (mut l, mut r) = (first_leaf + 1, last_leaf);
        while l < r {
            if l & 1 == 1 {
                self.stack.push(l);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.stack.push(r);
            }
            l >>= 1;
            r >>= 1;
        }
        while let Some(index) = self.stack.pop() {
            if !self.filled.get(index).is_some_and(|&f| f) {
                continue;
            }
            let Some(node) = self.nodes.get(index) else {
                continue;
            };
            if (self.first_union..self.past_union).contains(&index) {
                unfiltered += push_run(out, &mut self.runs, &node.all, min_gap);
                continue;
            }
            unfiltered += push_run(out, &mut self.runs, &node.own, min_gap);
            if index >= self.leaves {
                let start = out.len();
                out.extend_from_slice(&node.partial.bytes);
                unfiltered += push_merged_run(out, &mut self.runs, start, min_gap);
            } else {
                self.stack.push(2 * index + 1);
                self.stack.push(2 * index);
            }
        }
        self.merge_collected(out, unfiltered, min_gap);
    }

    /// Merges the runs a query collected into `out`, filling gaps shorter than `min_gap`,
    /// and counts the work: each pairwise pass of the unfiltered merge reads every one of the
    /// `unfiltered` ranges it would have collected.
    fn merge_collected(&mut self, out: &mut Vec<(u64, u64)>, unfiltered: usize, min_gap: u64) {
        let passes = usize::BITS - self.runs.len().leading_zeros();
        self.work += 1 + unfiltered as u64 * u64::from(passes);
        merge_runs(out, &mut self.runs, &mut self.scratch, min_gap);
    }
}

/// The cover of group `group` above bucket `bucket` (see [`PlacedIndex`]'s fields).
fn cover_of<'a>(
    cover: &'a [Vec<(u64, u64)>],
    group_start: &[usize],
    group_height: u32,
    group: usize,
    bucket: usize,
) -> &'a [(u64, u64)] {
    let start = group_start.get(group).copied().unwrap_or(0);
    let shift = group as u32 * group_height;
    cover
        .get(start + (bucket >> shift))
        .map_or(&[][..], Vec::as_slice)
}

/// Appends a union (sorted, disjoint, not touching) to `out` as one run, filling its gaps
/// shorter than `min_gap`; returns its length.
///
/// With a filter the run is written straight from the union, without copying it first: in a
/// union every range ends below the next one's start, so a filled run is the union cut at
/// the gaps of `min_gap` bytes or more, and each of its ranges runs from the start of a cut
/// piece's first range to the end of its last. The loop is branch-free (whether a gap is
/// wide enough is as good as random) and carries only the current piece's start from one
/// range to the next.
fn push_run(
    out: &mut Vec<(u64, u64)>,
    runs: &mut Vec<usize>,
    list: &[(u64, u64)],
    min_gap: u64,
) -> usize {
    let (Some(&first), Some(&last)) = (list.first(), list.last()) else {
        return 0;
    };
    let start = out.len();
    runs.push(start);
    if min_gap <= 1 {
        out.extend_from_slice(list);
        return list.len();
    }
    // Written by index: one slot per range at most, the unused ones cut off at the end.
    out.resize(start + list.len(), (0, 0));
    let written = out.get_mut(start..).unwrap_or_default();
    let mut len = 0;
    let mut piece = first.0;
    for pair in list.windows(2) {
        let &[(_, end), (next, _)] = pair else {
            continue;
        };
        let cut = next.saturating_sub(end) >= min_gap;
        if let Some(w) = written.get_mut(len) {
            *w = (piece, end);
        }
        len += usize::from(cut);
        piece = select_unpredictable(cut, next, piece);
    }
    if let Some(w) = written.get_mut(len) {
        *w = (piece, last.1);
    }
    out.truncate(start + len + 1);
    list.len()
}

/// Makes `out[start..]`, sorted by offset, one run, merging its overlapping or touching
/// ranges (which keeps the run's union and makes it shorter) and filling its gaps shorter
/// than `min_gap`. Returns the length the run would have had with no gap filled.
fn push_merged_run(
    out: &mut Vec<(u64, u64)>,
    runs: &mut Vec<usize>,
    start: usize,
    min_gap: u64,
) -> usize {
    let Some(&first) = out.get(start) else {
        return 0;
    };
    let mut run = Run::new(start, first, min_gap);
    for read in start + 1..out.len() {
        if let Some(&range) = out.get(read) {
            run.push(out, range);
        }
    }
    out.truncate(run.len);
    runs.push(start);
    run.unfiltered
}

/// A run of ranges being written in offset order at `out[..len]`, whose last range, `last`,
/// is kept in a register. Pushing a range merges it into `last` when they overlap or touch,
/// or leave a gap shorter than `min_gap` between them: the run stays sorted, only shorter,
/// and keeps its union apart from the filled gaps.
///
/// Branch-free: whether a range merges is as good as random, so a branch would be
/// mispredicted half the time. `out[len]` must exist unless the range merges.
struct Run {
    len: usize,
    last: (u64, u64),
    min_gap: u64,
    /// The number of ranges the run would hold with no gap filled (`last.1`, the highest end
    /// so far, is the same either way).
    unfiltered: usize,
}

impl Run {
    /// A run whose first range, `first`, is at `out[start]`, filling gaps shorter than
    /// `min_gap` (0 or 1: none).
    fn new(start: usize, first: (u64, u64), min_gap: u64) -> Run {
        Run {
            len: start + 1,
            last: first,
            min_gap: min_gap.max(1),
            unfiltered: 1,
        }
    }

    fn push(&mut self, out: &mut [(u64, u64)], range: (u64, u64)) {
        let gap = range.0.saturating_sub(self.last.1);
        let merge = gap < self.min_gap;
        self.unfiltered += usize::from(gap != 0);
        let at = self.len - usize::from(merge);
        let value = select_unpredictable(merge, (self.last.0, self.last.1.max(range.1)), range);
        if let Some(slot) = out.get_mut(at) {
            *slot = value;
        }
        self.last = value;
        self.len = at + 1;
    }
}

/// Calls `f` with the ranges of two lists sorted by offset, in offset order.
fn merge_each(a: &[(u64, u64)], b: &[(u64, u64)], mut f: impl FnMut((u64, u64))) {
    let (mut i, mut j) = (0, 0);
    while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
        let take_a = x.0 <= y.0;
        f(select_unpredictable(take_a, x, y));
        i += usize::from(take_a);
        j += usize::from(!take_a);
    }
    let rest = a.get(i..).unwrap_or(&[]).iter();
    rest.chain(b.get(j..).unwrap_or(&[])).copied().for_each(f);
}

/// Calls `f` with the ranges of two lists sorted by offset and a third, short one, in
/// offset order: the two merged without data-dependent branches, the short one slipped in
/// where it belongs (a branch that is almost always not taken). One loop, so that `f` is
/// inlined into it (a closure per range, called through a reference, was not).
fn merge3_each(
    a: &[(u64, u64)],
    b: &[(u64, u64)],
    short: &[(u64, u64)],
    mut f: impl FnMut((u64, u64)),
) {
    let (mut i, mut j, mut k) = (0, 0, 0);
    let mut next_short = short.first().map_or(u64::MAX, |r| r.0);
    while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
        let take_a = x.0 <= y.0;
        let z = select_unpredictable(take_a, x, y);
        i += usize::from(take_a);
        j += usize::from(!take_a);
        slip_in(z, short, (&mut k, &mut next_short), &mut f);
    }
    let rest = a.get(i..).unwrap_or(&[]).iter();
    for &z in rest.chain(b.get(j..).unwrap_or(&[])) {
        slip_in(z, short, (&mut k, &mut next_short), &mut f);
    }
    short.get(k..).unwrap_or(&[]).iter().copied().for_each(f);
}

/// Calls `f` with the ranges of `short` from `k` on that start below `x` (`next` is the start
/// of `short[k]`, or `u64::MAX` past its end), then with `x`.
#[inline(always)]
fn slip_in(
    x: (u64, u64),
    short: &[(u64, u64)],
    (k, next): (&mut usize, &mut u64),
    f: &mut impl FnMut((u64, u64)),
) {
    while *next < x.0 {
        if let Some(&y) = short.get(*k) {
            f(y);
        }
        *k += 1;
        *next = short.get(*k).map_or(u64::MAX, |r| r.0);
    }
    f(x);
}

/// Sorts `ranges` by offset, given that it is made of sorted runs starting at `runs`
/// (ascending), by merging the runs pairwise: `O(k log r)` for `k` ranges in `r` runs.
/// Ranges that overlap or touch are merged on the way, so the union is kept, not the list;
/// so are ranges with a gap shorter than `min_gap` between them (see [`Run`]).
fn merge_runs(
    ranges: &mut Vec<(u64, u64)>,
    runs: &mut Vec<usize>,
    scratch: &mut Vec<(u64, u64)>,
    min_gap: u64,
) {
    while runs.len() > 1 {
        let (count, len) = (runs.len(), ranges.len());
        // Written by index: long enough for every range (and stale beyond what is written).
        if scratch.len() < len {
            scratch.resize(len, (0, 0));
        }
        // A slice, so that the merge loops keep its address and length in registers rather than
        // reload them from the vector after every store.
        let written = scratch.as_mut_slice();
        let mut filled = 0;
        let (mut read, mut write) = (0, 0);
        while read < count {
            let start = runs.get(read).copied().unwrap_or(len);
            let middle = runs.get(read + 1).copied().unwrap_or(len);
            let end = runs.get(read + 2).copied().unwrap_or(len);
            if let Some(slot) = runs.get_mut(write) {
                *slot = filled;
            }
            let a = ranges.get(start..middle).unwrap_or(&[]);
            let b = ranges.get(middle..end).unwrap_or(&[]);
            // The head goes first, unmerged; runs are never empty, but two empty ones would
            // merge into nothing (the slot above is then overwritten by the next pair).
            let (mut i, mut j) = (0, 0);
            let head = match (a.first(), b.first()) {
                (Some(&x), Some(&y)) if y.0 < x.0 => {
                    j = 1;
                    y
                }
                (Some(&x), _) => {
                    i = 1;
                    x
                }
                (None, Some(&y)) => {
                    j = 1;
                    y
                }
                (None, None) => {
                    read += 2;
                    continue;
                }
            };
            let Some(slot) = written.get_mut(filled) else {
                break;
            };
            *slot = head;
            let mut run = Run::new(filled, head, min_gap);
            while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
                let take_a = x.0 <= y.0;
                run.push(written, select_unpredictable(take_a, x, y));
                i += usize::from(take_a);
                j += usize::from(!take_a);
            }
            for &x in a
                .get(i..)
                .unwrap_or(&[])
                .iter()
                .chain(b.get(j..).unwrap_or(&[]))
            {
                run.push(written, x);
            }
            filled = run.len;
            read += 2;
            write += 1;
        }
        scratch.truncate(filled);
        runs.truncate(write);
        std::mem::swap(ranges, scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Buffer;

    #[test]
    fn slots_follow_distinct_times() {
        let p = Problem::new(vec![Buffer::new(10, 20, 1), Buffer::new(20, 40, 1)]);
        let s = TimeSlots::new(&p);
        assert_eq!((s.lo, s.hi, s.count), (vec![0, 1], vec![1, 2], 3));
    }

    #[test]
    fn counting_and_sorting_rank_times_alike() {
        let p = crate::generate::realistic(3000, 5);
        let a = TimeSlots::new(&p);
        let mut b = TimeSlots::default();
        b.by_sorting(&p);
        assert_eq!((a.lo, a.hi, a.count), (b.lo, b.hi, b.count));
        // Sparse times take the sorting path and still rank densely.
        let p = Problem::new(vec![Buffer::new(0, 1 << 40, 1), Buffer::new(5, 1 << 41, 1)]);
        let s = TimeSlots::new(&p);
        assert_eq!((s.lo, s.hi, s.count), (vec![0, 1], vec![2, 3], 4));
    }

    #[test]
    fn add_range_merges_overlapping_and_touching_ranges() {
        let mut u = vec![(0, 2), (4, 6), (8, 10), (12, 14)];
        add_range(&mut u, 5, 8);
        assert_eq!(u, vec![(0, 2), (4, 10), (12, 14)]);
        add_range(&mut u, 2, 3);
        assert_eq!(u, vec![(0, 3), (4, 10), (12, 14)]);
        add_range(&mut u, 20, 30);
        add_range(&mut u, 15, 16);
        assert_eq!(u, vec![(0, 3), (4, 10), (12, 14), (15, 16), (20, 30)]);
        add_range(&mut u, 1, 25);
        assert_eq!(u, vec![(0, 30)]);
    }

    /// The union of `ranges` the obvious way: sorted, then overlapping or touching ranges
    /// merged.
    fn union_of(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
        ranges.sort_unstable();
        let mut union: Vec<(u64, u64)> = Vec::new();
        for (s, e) in ranges {
            match union.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => union.push((s, e)),
            }
        }
        union
    }

    /// Adding a range to many covers at once, their searches side by side, gives each the
    /// union the obvious way gives: covers of every length from empty to thousands of ranges
    /// in one call (so that lanes run out of steps at different times), ranges that touch a
    /// neighbour exactly, start at 0, fall above the top, repeat, or swallow everything.
    #[test]
    fn covers_searched_side_by_side_get_the_obvious_union() {
        let mut rng = crate::generate::SplitMix64::new(40);
        for case in 0..120 {
            let count = 1 + rng.below(3 * LANES as u64) as usize;
            let mut covers: Vec<Vec<(u64, u64)>> = (0..count)
                .map(|_| {
                    let n = match rng.below(4) {
                        0 => rng.below(3),
                        1 => rng.below(40),
                        _ => rng.below(3000),
                    };
                    let mut at = rng.below(4);
                    let ranges = (0..n)
                        .map(|_| {
                            let range = (at, at + 1 + rng.below(6));
                            at = range.1 + 1 + rng.below(8);
                            range
                        })
                        .collect();
                    union_of(ranges)
                })
                .collect();
            let span = covers
                .iter()
                .filter_map(|c| c.last())
                .map(|r| r.1)
                .max()
                .unwrap_or(0)
                + 20;
            for step in 0..12 {
                let (start, end) = match step % 6 {
                    // Touching ranges exactly: from the end of some range to the start of another.
                    0 => {
                        let c = &covers[rng.below(count as u64) as usize];
                        match (c.first(), c.last()) {
                            (Some(a), Some(b)) if a.1 < b.0 => (a.1, b.0),
                            _ => (0, 1),
                        }
                    }
                    1 => (0, 1 + rng.below(5)),
                    2 => (span + rng.below(9), span + 10),
                    3 => (0, span + 1),
                    _ => {
                        let s = rng.below(span);
                        (
                            s,
                            s + 1 + rng.below(if step % 2 == 0 { 4 } else { span / 3 + 1 }),
                        )
                    }
                };
                let mut expected = covers.clone();
                for c in &mut expected {
                    c.push((start, end));
                    *c = union_of(std::mem::take(c));
                }
                add_to_covers(&mut covers, start, end);
                assert_eq!(covers, expected, "case {case} step {step} [{start}, {end})");
            }
        }
    }

    /// A union filtered into a run straight from the list gives the run that copying the list
    /// and merging it in place gives (`push_merged_run`, the filter of unsorted partials):
    /// the same ranges, run starts and count, behind ranges already collected, for unions
    /// whose gaps are all shorter than the filter, all longer, equal to it, or mixed.
    #[test]
    fn a_union_filtered_straight_into_a_run_is_the_copied_and_merged_run() {
        let mut rng = crate::generate::SplitMix64::new(7);
        for case in 0..400 {
            let mut at = rng.below(3);
            let list: Vec<(u64, u64)> = (0..rng.below(70))
                .map(|_| {
                    let range = (at, at + 1 + rng.below(5));
                    at = range.1 + 1 + rng.below(if case % 3 == 0 { 3 } else { 12 });
                    range
                })
                .collect();
            let before: Vec<(u64, u64)> =
                (0..rng.below(3)).map(|k| (k * 100, k * 100 + 1)).collect();
            for min_gap in [0, 1, 2, 3, 4, 7, 12, 13, 1000] {
                let (mut out, mut runs) = (before.clone(), vec![0]);
                let count = push_run(&mut out, &mut runs, &list, min_gap);
                let (mut expected, mut expected_runs) = (before.clone(), vec![0]);
                let mut expected_count = 0;
                if !list.is_empty() {
                    let start = expected.len();
                    expected.extend_from_slice(&list);
                    expected_count =
                        push_merged_run(&mut expected, &mut expected_runs, start, min_gap);
                }
                let context = format!("case {case}, min_gap {min_gap}: {list:?}");
                assert_eq!(out, expected, "{context}");
                assert_eq!(runs, expected_runs, "{context}");
                assert_eq!(count, expected_count, "{context}");
            }
        }
    }

    /// Random sorted runs, some empty, some of one range: merging them keeps the union, sorts
    /// by offset and leaves one run; a merge never makes the list longer.
    #[test]
    fn merge_runs_keeps_the_union_of_any_runs() {
        let mut rng = crate::generate::SplitMix64::new(11);
        let (mut runs, mut scratch) = (Vec::new(), Vec::new());
        for case in 0..500 {
            let mut ranges: Vec<(u64, u64)> = Vec::new();
            runs.clear();
            for _ in 0..1 + rng.below(9) {
                runs.push(ranges.len());
                let mut at = rng.below(50);
                for _ in 0..rng.below(6) {
                    let len = 1 + rng.below(8);
                    ranges.push((at, at + len));
                    at += rng.below(12);
                }
            }
            let mut expected = Vec::new();
            for &(s, e) in &ranges {
                add_range(&mut expected, s, e);
            }
            let before = ranges.len();
            merge_runs(&mut ranges, &mut runs, &mut scratch, 1);
            assert!(runs.len() <= 1, "case {case}: {runs:?}");
            assert!(ranges.len() <= before, "case {case}");
            assert!(ranges.is_sorted_by_key(|r| r.0), "case {case}: {ranges:?}");
            let mut union = Vec::new();
            for &(s, e) in &ranges {
                add_range(&mut union, s, e);
            }
            assert_eq!(union, expected, "case {case}");
        }
    }

    /// The free intervals of at least `min_gap` bytes between the ranges of a union (from 0).
    fn wide_gaps(union: &[(u64, u64)], min_gap: u64) -> Vec<(u64, u64)> {
        let mut top = 0;
        let mut gaps = Vec::new();
        for &(s, e) in union {
            if s >= top + min_gap {
                gaps.push((top, s));
            }
            top = top.max(e);
        }
        gaps
    }

    /// Whether every range of `inner` lies inside one range of `outer` (in any order). One
    /// range covers `[s, e)` exactly when, among the ranges that start at or before `s`, the
    /// furthest end reaches `e`: a sort and a running maximum instead of a search per range.
    fn covers_each(outer: &[(u64, u64)], inner: &[(u64, u64)]) -> bool {
        let mut sorted = outer.to_vec();
        sorted.sort_unstable();
        let mut reach = Vec::with_capacity(sorted.len());
        let mut furthest = 0;
        for &(_, e) in &sorted {
            furthest = furthest.max(e);
            reach.push(furthest);
        }
        inner.iter().all(|&(s, e)| {
            let starts = sorted.partition_point(|r| r.0 <= s);
            starts > 0 && reach[starts - 1] >= e
        })
    }

    /// The shortcut against the search it replaces, on small random lists.
    #[test]
    fn covers_each_agrees_with_a_search_per_range() {
        let mut rng = crate::generate::SplitMix64::new(5);
        for case in 0..2000 {
            let mut draw = |n: u64| -> Vec<(u64, u64)> {
                (0..rng.below(n))
                    .map(|_| {
                        let s = rng.below(30);
                        (s, s + rng.below(8))
                    })
                    .collect()
            };
            let (outer, inner) = (draw(6), draw(4));
            let searched = inner
                .iter()
                .all(|&(s, e)| outer.iter().any(|&(fs, fe)| fs <= s && e <= fe));
            assert_eq!(
                covers_each(&outer, &inner),
                searched,
                "case {case}: {outer:?} {inner:?}"
            );
        }
    }

    #[test]
    fn queries_report_exactly_the_overlapping_buffers() {
        // Slot ranges of all shapes against every query range, compared with brute force, on
        // index shapes that exercise every path: small and large buckets, cover groups of one
        // ancestor or all of them, and subtree unions at no level, low levels or all levels.
        let mut ranges = Vec::new();
        for lo in 0..200u32 {
            for len in [1u32, 2, 7, 8, 9, 17, 33, 64, 65, 130] {
                ranges.push((lo, lo + len));
            }
        }
        let bytes = |i: usize| (i as u64 * 10 + i as u64 % 3, i as u64 * 10 + 5);
        let union = |ranges: &[(u64, u64)]| {
            let mut u = Vec::new();
            for &(s, e) in ranges {
                add_range(&mut u, s, e);
            }
            u
        };
        let shapes = [
            (BUCKET_SHIFT, GROUP_HEIGHT, (UNION_LOW, union_height(40))),
            (2, 1, (1, 2)),
            (2, 2, (3, 5)),
            (3, 3, (0, 0)),
            (1, 4, (30, 30)),
            (0, 3, (2, 4)),
            (7, 30, (0, 30)),
        ];
        for (shift, group_height, unions) in shapes {
            let mut index = PlacedIndex::default();
            index.reshape(400, shift, group_height, unions);
            for (i, &(lo, hi)) in ranges.iter().enumerate() {
                // Ranges that sometimes touch and sometimes leave gaps.
                let (offset, end) = bytes(i);
                index.insert(lo, hi, offset, end);
            }
            let (mut seen, mut collected) = (Vec::new(), Vec::new());
            for qlo in (0..300u32).step_by(7) {
                for qhi in (qlo + 1..qlo + 200).step_by(5) {
                    let context =
                        format!("shape {shift} {group_height} {unions:?}, [{qlo}, {qhi})");
                    seen.clear();
                    index.for_each_occupied(qlo, qhi, 1, |r| seen.push(r));
                    assert!(seen.is_sorted_by_key(|r| r.0), "{context}: {seen:?}");
                    let expected: Vec<(u64, u64)> = ranges
                        .iter()
                        .enumerate()
                        .filter(|&(_, &(lo, hi))| lo < qhi && qlo < hi)
                        .map(|(i, _)| bytes(i))
                        .collect();
                    let expected = union(&expected);
                    assert_eq!(union(&seen), expected, "{context}");
                    index.collect(qlo, qhi, 1, &mut collected);
                    assert_eq!(
                        collected, expected,
                        "{context}: collect is the union itself"
                    );
                    // Filtered for gaps of `min_gap` bytes: the same free intervals of that
                    // length or more, the same highest byte, and every occupied byte kept.
                    for min_gap in [2, 3, 5, 6, 9, 40] {
                        let mut filtered = Vec::new();
                        index.collect(qlo, qhi, min_gap, &mut filtered);
                        assert_eq!(
                            wide_gaps(&filtered, min_gap),
                            wide_gaps(&expected, min_gap),
                            "{context}, min_gap {min_gap}: {filtered:?}"
                        );
                        assert_eq!(filtered.last().map(|r| r.1), expected.last().map(|r| r.1));
                        assert!(
                            covers_each(&filtered, &expected),
                            "{context}, min_gap {min_gap}: an occupied range left out"
                        );
                        seen.clear();
                        index.for_each_occupied(qlo, qhi, min_gap, |r| seen.push(r));
                        assert_eq!(
                            wide_gaps(&union(&seen), min_gap),
                            wide_gaps(&expected, min_gap),
                            "{context}, min_gap {min_gap}"
                        );
                    }
                }
            }
        }
    }
}
