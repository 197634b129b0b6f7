"""``memplan.torch``: plan a PyTorch module without leaving the notebook.

:func:`plan` exports the module with PyTorch's ONNX exporter (``torch.onnx.export(...,
dynamo=True)``) in memory, no file left behind, and plans the exported graph; each planned
buffer names the module that made it (``plan.buffers[i].module``, e.g. ``"layers.0.attn"``)
wherever the exporter records it. PyTorch (with ``onnx`` and ``onnxscript``, which its
exporter needs) is needed only here.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, Mapping, Optional, Sequence

from memplan import _memplan
from memplan._errors import InputError

__all__ = ["export", "plan", "module_paths"]


def module_paths(model_proto: Any) -> Dict[str, str]:
    """The module path of each node of an exported ``onnx.ModelProto``, by node name, from
    the scopes PyTorch's exporter records (``pkg.torch.onnx.name_scopes``); nodes without
    them are left out."""
    out: Dict[str, str] = {}
    for node in model_proto.graph.node:
        for prop in node.metadata_props:
            if prop.key != "pkg.torch.onnx.name_scopes":
                continue
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                continue
            if not isinstance(scopes, (list, tuple)):
                continue
            # The first scope is the root module (''), the last the op itself.
            parts = [str(s) for s in scopes[1:-1] if s]
            path = ""
            for part in parts:
                # Scopes may repeat their parent's prefix ('layers', 'layers.0').
                if path and (part == path or part.startswith(path + ".")):
                    path = part
                else:
                    path = f"{path}.{part}" if path else part
            out[node.name] = path
    return out


def export(
    module: Any,
    *example_inputs: Any,
    example_kwargs: Optional[Mapping[str, Any]] = None,
    dynamic_shapes: Any = None,
    opset: Optional[int] = None,
    training: bool = False,
) -> Any:
    """Exports ``module`` called on ``example_inputs`` to an ``onnx.ModelProto`` in memory,
    in training mode when ``training`` (dropout and batch norm as a training step runs
    them) and in eval mode otherwise; the module's own mode is restored afterwards."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise InputError(f"memplan.torch takes a torch.nn.Module, not {type(module).__name__}")
    was_training = module.training
    module.train(training)
    try:
        program = torch.onnx.export(
            module,
            tuple(example_inputs),
            kwargs=dict(example_kwargs) if example_kwargs else None,
            dynamic_shapes=dynamic_shapes,
            opset_version=opset,
            dynamo=True,
            verbose=False,
        )
    except Exception as e:  # the exporter raises many kinds
        raise InputError(f"PyTorch's ONNX exporter could not export {type(module).__name__}: {e}") from e
    finally:
        module.train(was_training)
    return program.model_proto


def plan(
    module: Any,
    *example_inputs: Any,
    training: Optional[str] = None,
    dynamic_shapes: Any = None,
    example_kwargs: Optional[Mapping[str, Any]] = None,
    opset: Optional[int] = None,
    name: Optional[str] = None,
    **plan_options: Any,
) -> "_memplan.Plan":
    """Plans the memory of ``module`` called on ``example_inputs``: exported to ONNX in
    memory, then :func:`memplan.plan` with ``plan_options`` (``dims``, ``schedule``,
    ``checkpoint``, ``budget``, ...). With ``training`` (``"sgd"``, ``"momentum"``,
    ``"adam"``, ``"adamw"``) it plans a training step: forward, loss, backward and the
    optimizer's update. ``dynamic_shapes`` is the exporter's (symbolic dims then take values
    from ``dims``); the graph is named ``name`` (default: the module's class name).

    >>> import torch, memplan.torch
    >>> mlp = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    >>> p = memplan.torch.plan(mlp, torch.randn(32, 784), training="adamw")
    >>> p.total_bytes, p.buffers[0].module
    """
    proto = export(
        module,
        *example_inputs,
        example_kwargs=example_kwargs,
        dynamic_shapes=dynamic_shapes,
        opset=opset,
        training=training is not None,
    )
    proto.graph.name = name or type(module).__name__
    paths = module_paths(proto)
    result = _memplan.plan(proto.SerializeToString(), training=training, **plan_options)
    result._set_modules(paths)
    return result
