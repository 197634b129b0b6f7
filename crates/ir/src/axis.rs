//! Axis numbering: ONNX axes count from the end when negative (`-1` is the last dim).
//!
//! Every op rule that reads an `axis` attribute or input normalises it here, so that the
//! range check (`-rank <= axis < rank`) and its overflow behaviour are stated once; and the
//! shape of statistics kept over the trailing axes (normalisation's mean and inverse standard
//! deviation) is built here for the importer and the training derivation alike.

use crate::{Expr, Shape};

/// `axis` of a tensor of `rank` dims as an index, a negative axis counting from the end;
/// `None` when it is outside `-rank..rank`.
///
/// ```
/// use memplan_ir::axis_index;
/// assert_eq!(axis_index(-1, 3), Some(2));
/// assert_eq!(axis_index(1, 3), Some(1));
/// assert_eq!(axis_index(3, 3), None);
/// assert_eq!(axis_index(-4, 3), None);
/// assert_eq!(axis_index(i64::MIN, 3), None);
/// ```
pub fn axis_index(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis.checked_add(r)? } else { axis };
    usize::try_from(a).ok().filter(|&a| a < rank)
}

/// `shape` with every dim from `axis` on set to 1: the shape of statistics reduced over the
/// trailing axes and kept (LayerNormalization's mean and inverse standard deviation).
///
/// ```
/// use memplan_ir::{Expr, Shape, ones_from};
/// let s: Shape = [2, 3, 4].into_iter().map(Expr::constant).collect();
/// let kept: Vec<_> = ones_from(&s, 1).iter().filter_map(Expr::as_constant).collect();
/// assert_eq!(kept, [2, 1, 1]);
/// ```
pub fn ones_from(shape: &Shape, axis: usize) -> Shape {
    shape
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if i < axis {
                d.clone()
            } else {
                Expr::constant(1)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::axis_index;

    #[test]
    fn every_axis_of_a_small_rank_maps_once() {
        for rank in 0..6usize {
            let r = rank as i64;
            let mut seen = vec![0; rank];
            for axis in -r - 2..r + 2 {
                match axis_index(axis, rank) {
                    Some(a) => {
                        assert!((-r..r).contains(&axis), "{axis} of rank {rank}");
                        assert_eq!(a as i64, if axis < 0 { axis + r } else { axis });
                        seen[a] += 1;
                    }
                    None => assert!(!(-r..r).contains(&axis), "{axis} of rank {rank}"),
                }
            }
            assert!(seen.iter().all(|&n| n == 2), "rank {rank}: {seen:?}");
        }
        assert_eq!(axis_index(i64::MAX, usize::MAX), None);
        assert_eq!(axis_index(i64::MIN, usize::MAX), None);
    }
}
