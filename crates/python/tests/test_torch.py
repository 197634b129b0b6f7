"""memplan.torch: PyTorch modules planned from an in-memory export (an MLP, a CNN and a
two-layer transformer, inference and a training step), each plan verified and checked on
a host arena, with the module path of the buffers the exporter names. Skipped where
PyTorch (with onnxscript, which its exporter needs) is not installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

import memplan  # noqa: E402
import memplan.torch  # noqa: E402


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 128)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Cnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.head(torch.flatten(self.pool(x), 1))


class Block(torch.nn.Module):
    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.norm2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        a = torch.softmax(scores, dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class Transformer(torch.nn.Module):
    def __init__(self, vocab: int = 100, d: int = 32) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList([Block(d), Block(d)])
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


MODELS = [
    ("mlp", Mlp, lambda: (torch.randn(16, 64),)),
    ("cnn", Cnn, lambda: (torch.randn(4, 3, 16, 16),)),
    ("transformer", Transformer, lambda: (torch.randint(0, 100, (2, 12)),)),
]


@pytest.mark.parametrize("training", [None, "adamw"])
@pytest.mark.parametrize("name, make, inputs", MODELS, ids=[m[0] for m in MODELS])
def test_a_module_plans_verified_and_checked(tmp_path, monkeypatch, name, make, inputs, training) -> None:
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    module = make()
    module.train(False)
    p = memplan.torch.plan(module, *inputs(), training=training)
    assert p.verified and p.graph_name.split(".")[0] == type(module).__name__
    assert p.total_bytes >= p.arena_bytes + p.weight_bytes > 0
    params = sum(t.numel() * t.element_size() for t in module.parameters())
    # The weights (inference) or the persistent region (training: parameters, gradients
    # and AdamW's two moments) hold at least the parameters' bytes.
    assert p.weight_bytes >= params * (4 if training else 1)
    if training:
        assert p.training["optimizer"] == "adamw"
        # A gradient for (nearly) every parameter: the planner trains the float weights of
        # rank 1 or more it finds; a few small ones (normalisation affines, as exported) may
        # come out as constants.
        assert p.training["gradient_bytes"] >= 0.95 * params
    assert memplan.check(p).ok
    # The exporter's module scopes name the buffers they made.
    modules = {b.module for b in p.buffers if b.module}
    assert modules, "no buffer names its module"
    # Every path named is a real submodule's.
    real = {n for n, _ in module.named_modules()}
    assert modules <= real, modules - real
    if name == "transformer":
        assert any(m.startswith("layers.1") for m in modules), modules
    # No file left behind, and the module's own mode is kept.
    assert os.listdir(tmp_path) == []
    assert module.training is False


def test_dynamic_shapes_become_dims(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    batch = torch.export.Dim("batch", min=1, max=1024)
    p8 = memplan.torch.plan(Mlp(), torch.randn(4, 64), dynamic_shapes=({0: batch},), dims={"batch": 8})
    p16 = memplan.torch.plan(Mlp(), torch.randn(4, 64), dynamic_shapes=({0: batch},), dims={"batch": 16})
    assert p16.arena_bytes > p8.arena_bytes


def test_not_a_module_is_an_input_error() -> None:
    with pytest.raises(memplan.InputError, match="torch.nn.Module"):
        memplan.torch.plan(lambda x: x, torch.randn(2))
