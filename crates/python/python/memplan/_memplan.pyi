"""Type stubs of memplan's compiled module (re-exported by ``memplan``).

Keyword options follow the ``memplan`` command's flags: ``--no-X`` flags are the keyword
``X`` set to ``False`` (``inplace=False`` for ``--no-inplace``), ``--dim NAME=V`` is
``dims={"NAME": V}``, sizes are ints or strings such as ``"24GiB"``. ``keywords()`` lists
every keyword beside its flag.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__version__: str

Size = Union[int, str]
PathLike = Union[str, "os.PathLike[str]"]
Source = Union[PathLike, bytes, bytearray, Any]
Dims = Mapping[str, int]
Names = Union[str, Sequence[str]]

class Graph:
    """A computation graph read from memplan JSON or ONNX, with values for some symbols."""

    @property
    def name(self) -> str: ...
    @property
    def symbols(self) -> List[str]: ...
    @property
    def dims(self) -> Dict[str, int]: ...
    @property
    def num_nodes(self) -> int: ...
    @property
    def num_tensors(self) -> int: ...
    @property
    def sizes(self) -> Dict[str, Union[int, str]]: ...
    def inspect(self, top: int = 10) -> str: ...
    def inspect_dict(self, top: int = 10) -> Dict[str, Any]: ...
    def to_json(self) -> str: ...

class Buffer:
    """One planned buffer: a tensor's place and lifetime (steps ``first``..=``last``)."""

    tensor: str
    tensor_id: int
    offset: int
    bytes: int
    first: int
    last: int
    alias: Optional[str]
    parent: Optional[str]
    kind: str
    dtype: str
    shape: str
    op: str
    node: Optional[str]
    module: Optional[str]

class Plan:
    """A plan: every buffer's place in one arena and the device memory it needs."""

    @property
    def graph_name(self) -> str: ...
    @property
    def graph(self) -> Graph: ...
    @property
    def total_bytes(self) -> int: ...
    @property
    def arena_bytes(self) -> int: ...
    @property
    def lower_bound_bytes(self) -> int: ...
    @property
    def weight_bytes(self) -> int: ...
    @property
    def naive_bytes(self) -> int: ...
    @property
    def caller_input_bytes(self) -> int: ...
    @property
    def caller_output_bytes(self) -> int: ...
    @property
    def steps(self) -> int: ...
    @property
    def schedule(self) -> List[str]: ...
    @property
    def buffers(self) -> List[Buffer]: ...
    @property
    def training(self) -> Optional[Dict[str, Any]]: ...
    @property
    def verified(self) -> bool: ...
    @property
    def notes(self) -> List[str]: ...
    def report(self, top: int = 10) -> str: ...
    def to_json(self) -> str: ...
    def as_dict(self) -> Dict[str, Any]: ...
    def save(self, path: PathLike) -> None: ...
    def svg(self) -> str: ...
    def html(self) -> str: ...
    def _repr_html_(self) -> str: ...
    def _set_modules(self, modules: Mapping[str, str]) -> bool: ...

class CheckReport:
    """What ``check`` found."""

    @property
    def ok(self) -> bool: ...
    @property
    def executed(self) -> bool: ...
    def report(self) -> str: ...
    def as_dict(self) -> Dict[str, Any]: ...
    def __bool__(self) -> bool: ...

class Estimate:
    """A transformer's memory, as ``memplan estimate`` reports it."""

    @property
    def parameters(self) -> Optional[int]: ...
    @property
    def active_parameters(self) -> Optional[int]: ...
    @property
    def weights_bytes(self) -> Optional[int]: ...
    @property
    def kv_cache_bytes(self) -> Optional[int]: ...
    @property
    def activation_bytes(self) -> Optional[int]: ...
    @property
    def gradients_bytes(self) -> Optional[int]: ...
    @property
    def optimizer_bytes(self) -> Optional[int]: ...
    @property
    def total_bytes(self) -> Optional[int]: ...
    @property
    def kv_bytes_per_token(self) -> Optional[int]: ...
    @property
    def devices(self) -> Optional[int]: ...
    @property
    def batch(self) -> Optional[int]: ...
    @property
    def seq(self) -> Optional[int]: ...
    @property
    def per_device(self) -> Dict[str, int]: ...
    @property
    def notes(self) -> List[str]: ...
    def as_dict(self) -> Dict[str, Any]: ...
    def report(self) -> str: ...

class FitResult:
    """The largest value of a symbol that fits a budget."""

    @property
    def symbol(self) -> str: ...
    @property
    def value(self) -> Optional[int]: ...
    @property
    def budget_bytes(self) -> Optional[int]: ...
    @property
    def total_bytes(self) -> Optional[int]: ...
    @property
    def breakdown(self) -> Any: ...
    @property
    def next(self) -> Optional[Dict[str, Any]]: ...
    @property
    def plan(self) -> Optional[Plan]: ...
    @property
    def notes(self) -> List[str]: ...
    def as_dict(self) -> Dict[str, Any]: ...
    def report(self) -> str: ...

class ServingCapacity:
    """A serving engine's KV cache on each device."""

    @property
    def fits(self) -> bool: ...
    @property
    def kv_tokens(self) -> Optional[int]: ...
    @property
    def kv_blocks(self) -> Optional[int]: ...
    @property
    def max_concurrent_seqs(self) -> Optional[int]: ...
    @property
    def kv_bytes_per_token(self) -> Optional[int]: ...
    @property
    def weights_bytes(self) -> Optional[int]: ...
    @property
    def activation_bytes(self) -> Optional[int]: ...
    @property
    def reserve_bytes(self) -> Optional[int]: ...
    @property
    def kv_cache_bytes(self) -> Optional[int]: ...
    @property
    def total_bytes(self) -> Optional[int]: ...
    @property
    def usable_bytes(self) -> Optional[int]: ...
    @property
    def devices(self) -> Optional[int]: ...
    @property
    def notes(self) -> List[str]: ...
    def as_dict(self) -> Dict[str, Any]: ...
    def report(self) -> str: ...

def load(source: Optional[Source] = None, dims: Optional[Dims] = None) -> Graph: ...
def plan(
    source: Union[Graph, Source, None] = None,
    *,
    dims: Optional[Dims] = None,
    schedule: Optional[str] = None,
    strategy: Optional[str] = None,
    inplace: Optional[bool] = None,
    views: Optional[bool] = None,
    concat_elision: Optional[bool] = None,
    fold_weights: Optional[bool] = None,
    attention: Optional[str] = None,
    fuse: Optional[Names] = None,
    opaque: Optional[Names] = None,
    align: Optional[Size] = None,
    caller_inputs: Optional[bool] = None,
    caller_outputs: Optional[bool] = None,
    bound: Optional[bool] = None,
    persistent: Optional[Names] = None,
    parameters: Optional[PathLike] = None,
    verify: Optional[bool] = None,
    training: Optional[str] = None,
    loss: Optional[str] = None,
    fused_optimizer: Optional[bool] = None,
    accumulate: Optional[bool] = None,
    optimizer_kernel: Optional[str] = None,
    checkpoint: Optional[Names] = None,
    training_unknown: Optional[str] = None,
    frozen: Optional[Names] = None,
    budget: Optional[Size] = None,
    master_weights: Optional[bool] = None,
) -> Plan: ...
def check(
    graph: Union[Graph, Plan, Source, None] = None,
    plan: Union[Plan, Source, None] = None,
    *,
    half_weights: Optional[str] = None,
    sample: Optional[int] = None,
    threads: Optional[int] = None,
    max_report: Optional[int] = None,
    check_weights: Optional[bool] = None,
    strict: Optional[bool] = None,
) -> CheckReport: ...
def estimate(
    config: Union[PathLike, Mapping[str, Any], Any],
    *,
    batch: Optional[int] = None,
    seq: Optional[int] = None,
    dtype: Optional[str] = None,
    weight_dtype: Optional[str] = None,
    group_size: Optional[int] = None,
    quantize_embeddings: Optional[bool] = None,
    kv_dtype: Optional[str] = None,
    logits: Optional[str] = None,
    training: Optional[str] = None,
    checkpointing: Union[str, bool, None] = None,
    tp: Optional[int] = None,
    pp: Optional[int] = None,
    ep: Optional[int] = None,
    dp: Optional[int] = None,
    zero: Optional[int] = None,
    sequence_parallel: Optional[bool] = None,
    master_weights: Optional[bool] = None,
    flash: Optional[bool] = None,
    runtime: Optional[str] = None,
    attention: Optional[str] = None,
    precision: Optional[str] = None,
    optimizer_kernel: Optional[str] = None,
    plan_step: Optional[bool] = None,
) -> Estimate: ...
def fit(
    source: Union[Graph, Source, Mapping[str, Any], Any],
    *,
    symbol: str,
    budget: Size,
    min: int = 1,
    max: Optional[int] = None,
    count_caller_io: bool = False,
    **options: Any,
) -> FitResult: ...
def serving(
    config: Union[PathLike, Mapping[str, Any], Any],
    *,
    budget: Size,
    gpu_util: Union[float, str, None] = None,
    max_batched_tokens: Optional[int] = None,
    max_seqs: Optional[int] = None,
    block_size: Optional[int] = None,
    reserve: Optional[Size] = None,
    **workload: Any,
) -> ServingCapacity: ...
def solve_buffers(
    lower: bytes,
    upper: bytes,
    size: bytes,
    alignment: Optional[bytes] = None,
    *,
    capacity: Optional[int] = None,
    strategy: str = "auto",
    minimize: bool = False,
    time_limit: Optional[float] = None,
    node_limit: Optional[int] = None,
    gap: float = 0.0,
    threads: int = 0,
) -> Tuple[bytes, int, int, bool, str]: ...
def parse_size(value: Size) -> int: ...
def keywords() -> Dict[str, List[Tuple[str, str]]]: ...
