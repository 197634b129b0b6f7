//! A segment tree over an order's memory profile: range add, point read and write, the
//! maximum with how many positions reach it, and the first or last position at or above a
//! threshold. Local improvement keeps one value per step in it (the bytes during that step)
//! and tries moves as a few range adds, undone if the move does not pay.
//!
//! Values are `i128`, so adding and subtracting byte counts never overflows.

/// The tree; positions `0..len`.
#[derive(Clone, Debug)]
pub(crate) struct Profile {
    len: usize,
    max: Vec<i128>,
    count: Vec<u32>,
    lazy: Vec<i128>,
}

/// Far below any value, for a position taken out of the maximum.
pub(crate) const ABSENT: i128 = i128::MIN / 4;

impl Profile {
    /// A tree holding `values`.
    pub fn new(values: &[i128]) -> Profile {
        let len = values.len().max(1);
        let mut p = Profile {
            len,
            max: vec![ABSENT; 4 * len],
            count: vec![0; 4 * len],
            lazy: vec![0; 4 * len],
        };
        p.build(1, 0, len - 1, values);
        p
    }

    fn build(&mut self, node: usize, lo: usize, hi: usize, values: &[i128]) {
        if lo == hi {
            self.max[node] = values.get(lo).copied().unwrap_or(ABSENT);
            self.count[node] = 1;
            return;
        }
        let mid = (lo + hi) / 2;
        self.build(2 * node, lo, mid, values);
        self.build(2 * node + 1, mid + 1, hi, values);
        self.pull(node);
    }

    fn pull(&mut self, node: usize) {
        let (a, b) = (self.max[2 * node], self.max[2 * node + 1]);
        self.max[node] = a.max(b);
        self.count[node] = match a.cmp(&b) {
            std::cmp::Ordering::Greater => self.count[2 * node],
            std::cmp::Ordering::Less => self.count[2 * node + 1],
            std::cmp::Ordering::Equal => self.count[2 * node] + self.count[2 * node + 1],
        };
    }

    fn apply(&mut self, node: usize, v: i128) {
        self.max[node] += v;
        self.lazy[node] += v;
    }

    fn push(&mut self, node: usize) {
        let v = self.lazy[node];
        if v != 0 {
            self.apply(2 * node, v);
            self.apply(2 * node + 1, v);
            self.lazy[node] = 0;
        }
    }

    /// The largest value and how many positions hold it.
    pub fn max(&self) -> (i128, u32) {
        (self.max[1], self.count[1])
    }

    /// Adds `v` to positions `l..=r` (nothing when `l > r`).
    pub fn add(&mut self, l: usize, r: usize, v: i128) {
        if l <= r && r < self.len && v != 0 {
            self.add_rec(1, 0, self.len - 1, l, r, v);
        }
    }

    fn add_rec(&mut self, node: usize, lo: usize, hi: usize, l: usize, r: usize, v: i128) {
        if r < lo || hi < l {
            return;
        }
        if l <= lo && hi <= r {
            self.apply(node, v);
            return;
        }
        self.push(node);
        let mid = (lo + hi) / 2;
        self.add_rec(2 * node, lo, mid, l, r, v);
        self.add_rec(2 * node + 1, mid + 1, hi, l, r, v);
        self.pull(node);
    }

    /// The value at position `i`.
    pub fn get(&mut self, i: usize) -> i128 {
        let (mut node, mut lo, mut hi) = (1, 0, self.len - 1);
        while lo < hi {
            self.push(node);
            let mid = (lo + hi) / 2;
            if i <= mid {
                node *= 2;
                hi = mid;
            } else {
                node = 2 * node + 1;
                lo = mid + 1;
            }
        }
        self.max[node]
    }

    /// The values at positions `l..=r`.
    pub fn values(&mut self, l: usize, r: usize) -> Vec<i128> {
        let mut out = Vec::with_capacity(r.saturating_sub(l) + 1);
        if l <= r && r < self.len {
            self.values_rec(1, 0, self.len - 1, l, r, &mut out);
        }
        out
    }

    fn values_rec(
        &mut self,
        node: usize,
        lo: usize,
        hi: usize,
        l: usize,
        r: usize,
        out: &mut Vec<i128>,
    ) {
        if r < lo || hi < l {
            return;
        }
        if lo == hi {
            out.push(self.max[node]);
            return;
        }
        self.push(node);
        let mid = (lo + hi) / 2;
        self.values_rec(2 * node, lo, mid, l, r, out);
        self.values_rec(2 * node + 1, mid + 1, hi, l, r, out);
    }

    /// Writes `values` at positions `l..l + values.len()`.
    pub fn assign(&mut self, l: usize, values: &[i128]) {
        if values.is_empty() || l + values.len() > self.len {
            return;
        }
        let r = l + values.len() - 1;
        self.assign_rec(1, 0, self.len - 1, l, r, values);
    }

    fn assign_rec(
        &mut self,
        node: usize,
        lo: usize,
        hi: usize,
        l: usize,
        r: usize,
        values: &[i128],
    ) {
        if r < lo || hi < l {
            return;
        }
        if lo == hi {
            self.max[node] = values.get(lo - l).copied().unwrap_or(ABSENT);
            self.count[node] = 1;
            self.lazy[node] = 0;
            return;
        }
        self.push(node);
        let mid = (lo + hi) / 2;
        self.assign_rec(2 * node, lo, mid, l, r, values);
        self.assign_rec(2 * node + 1, mid + 1, hi, l, r, values);
        self.pull(node);
    }

    /// The largest value in `l..=r` (`ABSENT` when empty).
    pub fn range_max(&mut self, l: usize, r: usize) -> i128 {
        if l > r || r >= self.len {
            return ABSENT;
        }
        self.range_max_rec(1, 0, self.len - 1, l, r)
    }

    fn range_max_rec(&mut self, node: usize, lo: usize, hi: usize, l: usize, r: usize) -> i128 {
        if r < lo || hi < l {
            return ABSENT;
        }
        if l <= lo && hi <= r {
            return self.max[node];
        }
        self.push(node);
        let mid = (lo + hi) / 2;
        self.range_max_rec(2 * node, lo, mid, l, r)
            .max(self.range_max_rec(2 * node + 1, mid + 1, hi, l, r))
    }

    /// The first (`last == false`) or last position in `l..=r` whose value is at least
    /// `at_least`.
    pub fn find(&mut self, l: usize, r: usize, at_least: i128, last: bool) -> Option<usize> {
        if l > r || r >= self.len {
            return None;
        }
        self.find_rec(1, 0, self.len - 1, l, r, at_least, last)
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "a recursive helper over the tree's node"
    )]
    fn find_rec(
        &mut self,
        node: usize,
        lo: usize,
        hi: usize,
        l: usize,
        r: usize,
        at_least: i128,
        last: bool,
    ) -> Option<usize> {
        if r < lo || hi < l || self.max[node] < at_least {
            return None;
        }
        if lo == hi {
            return Some(lo);
        }
        self.push(node);
        let mid = (lo + hi) / 2;
        let left = |p: &mut Profile| p.find_rec(2 * node, lo, mid, l, r, at_least, last);
        let right = |p: &mut Profile| p.find_rec(2 * node + 1, mid + 1, hi, l, r, at_least, last);
        if last {
            right(self).or_else(|| left(self))
        } else {
            left(self).or_else(|| right(self))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation against a plain vector, on a deterministic stream of operations.
    #[test]
    fn agrees_with_a_plain_vector() {
        let mut x: u64 = 12345;
        let mut rnd = |n: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % n.max(1)
        };
        for len in [1usize, 2, 3, 7, 33] {
            let mut plain: Vec<i128> = (0..len).map(|_| rnd(20) as i128).collect();
            let mut tree = Profile::new(&plain);
            for _ in 0..400 {
                let a = rnd(len as u64) as usize;
                let b = rnd(len as u64) as usize;
                let (l, r) = (a.min(b), a.max(b));
                match rnd(5) {
                    0 => {
                        let v = rnd(11) as i128 - 5;
                        tree.add(l, r, v);
                        for p in &mut plain[l..=r] {
                            *p += v;
                        }
                    }
                    1 => {
                        let vals: Vec<i128> = (l..=r).map(|_| rnd(30) as i128).collect();
                        tree.assign(l, &vals);
                        plain[l..=r].copy_from_slice(&vals);
                    }
                    2 => assert_eq!(tree.values(l, r), plain[l..=r].to_vec()),
                    3 => {
                        let t = rnd(25) as i128;
                        let first = (l..=r).find(|&i| plain[i] >= t);
                        let lastp = (l..=r).rev().find(|&i| plain[i] >= t);
                        assert_eq!(tree.find(l, r, t, false), first);
                        assert_eq!(tree.find(l, r, t, true), lastp);
                    }
                    _ => {
                        assert_eq!(tree.range_max(l, r), *plain[l..=r].iter().max().unwrap());
                        assert_eq!(tree.get(a), plain[a]);
                    }
                }
                let m = *plain.iter().max().unwrap();
                let c = plain.iter().filter(|&&v| v == m).count() as u32;
                assert_eq!(tree.max(), (m, c));
            }
        }
    }
}
