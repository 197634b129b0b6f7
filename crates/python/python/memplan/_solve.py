"""``memplan.solve``: a packing problem from NumPy arrays (or sequences) to offsets.

The columns cross into Rust as one ``int64`` byte string each and the offsets come back as
one ``uint64`` byte string: no Python object per buffer, so a million buffers cost what the
packing costs. NumPy is optional: without it the offsets are an ``array.array('Q')``.
"""

from __future__ import annotations

import array
import sys
from typing import Any, Optional, Sequence, Tuple, Union

from memplan import _memplan
from memplan._errors import InputError, OptionError

_INT64_MAX = 2**63 - 1


class Solution:
    """A packing: ``offsets`` (one per buffer, in the order given), the arena it needs,
    the lower bound no packing can beat, whether the arena is proven optimal, and the
    strategy that found it."""

    __slots__ = ("offsets", "arena_bytes", "lower_bound_bytes", "proven_optimal", "produced_by")

    def __init__(
        self,
        offsets: Any,
        arena_bytes: int,
        lower_bound_bytes: int,
        proven_optimal: bool,
        produced_by: str,
    ) -> None:
        self.offsets = offsets
        self.arena_bytes = arena_bytes
        self.lower_bound_bytes = lower_bound_bytes
        self.proven_optimal = proven_optimal
        self.produced_by = produced_by

    def __repr__(self) -> str:
        return (
            f"<memplan.Solution: {len(self.offsets)} buffers in {self.arena_bytes} bytes "
            f"(lower bound {self.lower_bound_bytes}{', optimal' if self.proven_optimal else ''}), "
            f"by {self.produced_by}>"
        )


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _column(values: Any, name: str) -> Tuple[bytes, int]:
    """``values`` as little-endian int64 bytes and their count."""
    np = _numpy()
    if np is not None and not isinstance(values, (bytes, str)):
        try:
            a = np.asarray(values)
        except (TypeError, ValueError) as e:
            raise OptionError(f"`{name}` must be a sequence of integers: {e}") from None
        if a.ndim != 1:
            raise InputError(f"`{name}` must be one-dimensional, not of shape {a.shape}")
        if a.size == 0:
            return b"", 0
        if a.dtype == bool or not np.issubdtype(a.dtype, np.integer):
            raise OptionError(f"`{name}` must hold integers, not {a.dtype}")
        if a.dtype.kind == "u" and int(a.max()) > _INT64_MAX:
            raise InputError(f"`{name}` holds {int(a.max())}, past 2^63 - 1")
        return np.ascontiguousarray(a, dtype="<i8").tobytes(), int(a.size)
    if isinstance(values, (bytes, str)) or not hasattr(values, "__iter__"):
        raise OptionError(f"`{name}` must be a sequence of integers, not {type(values).__name__}")
    items = list(values)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in items):
        raise OptionError(f"`{name}` must hold integers")
    try:
        column = array.array("q", items)
    except OverflowError:
        raise InputError(f"`{name}` holds a value past 2^63 - 1") from None
    if sys.byteorder != "little":
        column.byteswap()
    return column.tobytes(), len(column)


def _size(value: Union[int, str, None], name: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise OptionError(f"`{name}` takes a size such as \"1MiB\" or bytes, not {type(value).__name__}")
    return _memplan.parse_size(value)


def solve(
    lower: Union[Sequence[int], Any],
    upper: Union[Sequence[int], Any],
    size: Union[Sequence[int], Any],
    *,
    alignment: Union[Sequence[int], Any, None] = None,
    capacity: Union[int, str, None] = None,
    strategy: str = "auto",
    minimize: bool = False,
    time_limit: Optional[float] = None,
    node_limit: Optional[int] = None,
    gap: float = 0.0,
    threads: Optional[int] = None,
) -> Solution:
    """Places buffers in one arena: buffer ``i`` lives over the half-open steps
    ``[lower[i], upper[i])`` and needs ``size[i]`` bytes (aligned to ``alignment[i]``).

    Returns a :class:`Solution` whose ``offsets`` is a NumPy ``uint64`` array (an
    ``array.array('Q')`` without NumPy), checked by the independent verifier. The options
    are ``memplan solve``'s: ``capacity`` (``"1MiB"`` or bytes; raises
    :class:`DoesNotFitError` when nothing found fits), ``strategy``, ``minimize``,
    ``time_limit`` (seconds), ``node_limit``, ``gap`` (a fraction of the lower bound) and
    ``threads``.

    >>> import numpy as np, memplan
    >>> s = memplan.solve(np.array([0, 1, 2]), np.array([2, 3, 4]), np.array([4, 4, 4]))
    >>> s.offsets.tolist(), s.arena_bytes
    ([0, 4, 0], 8)
    """
    columns = [_column(lower, "lower"), _column(upper, "upper"), _column(size, "size")]
    align = _column(alignment, "alignment")[0] if alignment is not None else None
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 0):
        raise OptionError("`threads` takes a non-negative integer")
    offsets, arena, bound, optimal, by = _memplan.solve_buffers(
        columns[0][0],
        columns[1][0],
        columns[2][0],
        align,
        capacity=_size(capacity, "capacity"),
        strategy=strategy,
        minimize=minimize,
        time_limit=time_limit,
        node_limit=node_limit,
        gap=gap,
        threads=threads or 0,
    )
    np = _numpy()
    if np is not None:
        out: Any = np.frombuffer(offsets, dtype="<u8")
    else:
        out = array.array("Q")
        out.frombytes(offsets)
        if sys.byteorder != "little":
            out.byteswap()
    return Solution(out, arena, bound, optimal, by)
