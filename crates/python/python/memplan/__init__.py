"""memplan: plan, place and check the memory of ML graphs, from Python.

memplan answers, before a byte is allocated, how much device memory a model needs, where
every tensor lives in one arena, and the largest batch or context that fits a card. The
work is done by memplan's Rust core with the GIL released.

>>> import memplan
>>> g = memplan.load("model.onnx", dims={"batch": 8})        # memplan JSON or ONNX
>>> p = memplan.plan(g, schedule="memory")
>>> p.total_bytes, p.arena_bytes
>>> print(p.report())                                        # what `memplan plan` prints
>>> p.save("plan.json")                                      # the CLI's plan file, byte for byte
>>> memplan.check(p)                                         # verifier + host pattern check
>>> memplan.estimate("config.json", batch=8, seq=2048, dtype="bf16", training="adamw")
>>> memplan.serving("config.json", budget="80GiB", seq=4096)
>>> memplan.solve(lower, upper, size).offsets                # NumPy in, NumPy out

``memplan.torch.plan(module, *example_inputs)`` plans a PyTorch module (exported to ONNX
in memory). Errors derive from :class:`memplan.Error`: :class:`InputError` (bad input; a
``ValueError``), :class:`OptionError` (an unknown keyword or a wrong type; a ``TypeError``
too), :class:`UnsafePlanError` and :class:`DoesNotFitError`.
"""

from __future__ import annotations

from memplan._errors import DoesNotFitError, Error, InputError, OptionError, UnsafePlanError
from memplan._memplan import (
    Buffer,
    CheckReport,
    Estimate,
    FitResult,
    Graph,
    Plan,
    ServingCapacity,
    __version__,
    check,
    estimate,
    fit,
    load,
    parse_size,
    plan,
    serving,
)
from memplan._solve import Solution, solve

__all__ = [
    "Buffer",
    "CheckReport",
    "DoesNotFitError",
    "Error",
    "Estimate",
    "FitResult",
    "Graph",
    "InputError",
    "OptionError",
    "Plan",
    "ServingCapacity",
    "Solution",
    "UnsafePlanError",
    "__version__",
    "check",
    "estimate",
    "fit",
    "load",
    "parse_size",
    "plan",
    "serving",
    "solve",
]


def __getattr__(name: str):  # noqa: ANN202 - module attribute hook
    # `memplan.torch` imports PyTorch, which takes seconds: only when asked for.
    if name == "torch":
        import importlib

        module = importlib.import_module("memplan.torch")
        globals()["torch"] = module
        return module
    raise AttributeError(f"module 'memplan' has no attribute {name!r}")
