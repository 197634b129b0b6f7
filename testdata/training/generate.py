#!/usr/bin/env python3
"""Regenerates the vendored ONNX Runtime training graphs (run by hand, never by CI).

    python3 -m venv /tmp/ort-venv && /tmp/ort-venv/bin/pip install onnxruntime-training onnx
    /tmp/ort-venv/bin/python testdata/training/generate.py

For each model below it writes, under `testdata/training/<model>/`:

- `forward.onnx`: the forward model memplan derives a training step from (weights stripped:
  every initializer keeps its name, dtype and dims, and no data);
- `training_model.onnx`: ONNX Runtime's training graph for it (forward, loss, gradient graph
  and gradient accumulation), as `onnxruntime.training.artifacts.generate_artifacts` makes it
  with `CrossEntropyLoss`, all parameters trained;
- `optimizer_model.onnx`: ONNX Runtime's optimizer graph (AdamW; `mlp` also has
  `optimizer_sgd.onnx`).

The models: `mlp` (three Gemm layers, symbolic `batch`), `cnn` (a ResNet-style CNN with
BatchNormalization, residual blocks, max and average pooling, symbolic `batch`),
`transformer` (a 2-layer pre-LN transformer encoder over token ids, fused QKV projection
split three ways, symbolic `batch`, 128 positions), `decomposed` (an MLP whose GELU and
layer normalisation are written out op by op, with a Dropout, which ONNX Runtime fuses
before building the gradient; symbolic `batch`), `vit_b16` (ViT-B/16 at batch 1, the
corpus graph `testdata/graphs/onnx/vit_base_patch16_224_b1.onnx`), `gelu_tanh` (an MLP
with GELU's tanh approximation spelled twice: as Hugging Face's GPT-2 writes it, which ONNX
Runtime fuses into FastGelu, and as PyTorch's exporter writes `gelu(approximate="tanh")`,
which it leaves alone), and two models exported by PyTorch (`--export-torch`, below):
`cnn_dense` (a CNN through `torch.onnx.export(dynamo=True)`: BatchNormalization, depthwise
and grouped convolutions, max and average pooling, residual adds, a DenseNet-style block of
Concats, adaptive average pooling) and `lm_tied` (a 1-layer pre-LN causal transformer
language model through the TorchScript exporter: token embedding tied to the output layer,
a causal mask, GELU, Dropout, logits `[batch, vocab, seq]`). Parameters are zeros while
generating (memplan reads shapes only) and stripped afterwards; ONNX Runtime's training
graphs carry no initializer data of their own besides small constants.

The PyTorch models are exported in a separate step, in an environment with torch (which
`onnxruntime-training`'s environment need not have); the forward models it writes are then
read by the ordinary run like the vendored ones (a stripped `forward.onnx` is filled with
zeros again):

    python3 testdata/training/generate.py --export-torch   # needs torch and onnxscript
    /tmp/ort-venv/bin/python testdata/training/generate.py cnn_dense lm_tied

Two traps, both handled here: `onnxruntime.training`'s `__init__` imports torch, so the
package is bypassed and only `onnxruntime.training.artifacts` is loaded; and
`generate_artifacts` needs its output folder to exist and every LayerNormalization node to
declare its outputs 1 and 2 (mean and inverse standard deviation), which the corpus ViT does
not, so they are added to the copy given to it (the vendored `forward.onnx` keeps the
corpus's single output). Models are written with IR version 8 (onnxruntime-training 1.19
reads at most 10).
"""

import os
import sys
import types

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def load_artifacts():
    """`onnxruntime.training.artifacts`, without the package's `__init__` (it imports torch)."""
    import onnxruntime

    training = os.path.join(os.path.dirname(onnxruntime.__file__), "training")
    pkg = types.ModuleType("onnxruntime.training")
    pkg.__path__ = [training]
    sys.modules["onnxruntime.training"] = pkg
    import onnxruntime.training.artifacts as artifacts

    return artifacts


HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OPSET = 17


def param(name, shape):
    return nh.from_array(np.zeros(shape, np.float32), name)


def model(nodes, name, inputs, outputs, inits, opset=OPSET):
    g = h.make_graph(nodes, name, inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="memplan")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def mlp():
    nodes, inits = [], []
    dims = [784, 512, 256, 10]
    x = "input"
    for i in range(3):
        w, b = f"fc{i}.weight", f"fc{i}.bias"
        inits += [param(w, [dims[i + 1], dims[i]]), param(b, [dims[i + 1]])]
        y = "logits" if i == 2 else f"fc{i}"
        nodes.append(h.make_node("Gemm", [x, w, b], [y], name=f"fc{i}", transB=1))
        x = y
        if i < 2:
            nodes.append(h.make_node("Relu", [x], [f"relu{i}"], name=f"relu{i}"))
            x = f"relu{i}"
    return model(
        nodes,
        "mlp",
        [h.make_tensor_value_info("input", T.FLOAT, ["batch", 784])],
        [h.make_tensor_value_info("logits", T.FLOAT, ["batch", 10])],
        inits,
    )


def cnn():
    nodes, inits = [], []

    def conv_bn(x, cin, cout, k, stride, name, relu=True):
        w = f"{name}.conv.weight"
        inits.append(param(w, [cout, cin, k, k]))
        pad = k // 2
        nodes.append(h.make_node("Conv", [x, w], [f"{name}.conv"], name=f"{name}.conv",
                                 kernel_shape=[k, k], strides=[stride, stride],
                                 pads=[pad] * 4))
        bn = [f"{name}.bn.{p}" for p in ("weight", "bias", "running_mean", "running_var")]
        inits.extend(param(p, [cout]) for p in bn)
        nodes.append(h.make_node("BatchNormalization", [f"{name}.conv"] + bn, [f"{name}.bn"],
                                 name=f"{name}.bn", epsilon=1e-5, momentum=0.9))
        if not relu:
            return f"{name}.bn"
        nodes.append(h.make_node("Relu", [f"{name}.bn"], [f"{name}.relu"], name=f"{name}.relu"))
        return f"{name}.relu"

    def block(x, cin, cout, stride, name):
        y = conv_bn(x, cin, cout, 3, stride, f"{name}.a")
        y = conv_bn(y, cout, cout, 3, 1, f"{name}.b", relu=False)
        skip = x if stride == 1 and cin == cout else conv_bn(x, cin, cout, 1, stride,
                                                             f"{name}.down", relu=False)
        nodes.append(h.make_node("Add", [y, skip], [f"{name}.add"], name=f"{name}.add"))
        nodes.append(h.make_node("Relu", [f"{name}.add"], [f"{name}.out"], name=f"{name}.out"))
        return f"{name}.out"

    x = conv_bn("input", 3, 32, 3, 1, "stem")
    nodes.append(h.make_node("MaxPool", [x], ["pool"], name="pool", kernel_shape=[2, 2],
                             strides=[2, 2]))
    x = block("pool", 32, 32, 1, "layer1")
    x = block(x, 32, 64, 2, "layer2")
    x = block(x, 64, 128, 2, "layer3")
    nodes.append(h.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(h.make_node("Flatten", ["gap"], ["flat"], name="flat", axis=1))
    inits += [param("fc.weight", [10, 128]), param("fc.bias", [10])]
    nodes.append(h.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc",
                             transB=1))
    return model(
        nodes,
        "cnn",
        [h.make_tensor_value_info("input", T.FLOAT, ["batch", 3, 32, 32])],
        [h.make_tensor_value_info("logits", T.FLOAT, ["batch", 10])],
        inits,
    )


def transformer():
    d, heads, ff, seq, vocab, classes, layers = 256, 4, 1024, 128, 1000, 10, 2
    dh = d // heads
    nodes, inits = [], []

    def const(name, values):
        inits.append(nh.from_array(np.array(values, np.int64), name))
        return name

    inits.append(param("embed.weight", [vocab, d]))
    inits.append(param("pos.weight", [1, seq, d]))
    nodes.append(h.make_node("Gather", ["embed.weight", "tokens"], ["emb"], name="embed"))
    nodes.append(h.make_node("Add", ["emb", "pos.weight"], ["x0"], name="pos"))
    heads_shape = const("heads_shape", [0, seq, heads, dh])
    flat_shape = const("flat_shape", [0, seq, d])
    split = const("qkv_split", [d, d, d])
    inits.append(nh.from_array(np.array(1.0 / np.sqrt(dh), np.float32), "scale"))
    x = "x0"
    for i in range(layers):
        p = f"layer{i}"

        def ln(x, name):
            inits.extend([param(f"{name}.weight", [d]), param(f"{name}.bias", [d])])
            nodes.append(h.make_node("LayerNormalization", [x, f"{name}.weight", f"{name}.bias"],
                                     [name], name=name, axis=-1, epsilon=1e-5))
            return name

        def linear(x, din, dout, name):
            inits.extend([param(f"{name}.weight", [din, dout]), param(f"{name}.bias", [dout])])
            nodes.append(h.make_node("MatMul", [x, f"{name}.weight"], [f"{name}.mm"],
                                     name=f"{name}.mm"))
            nodes.append(h.make_node("Add", [f"{name}.mm", f"{name}.bias"], [name], name=name))
            return name

        a = ln(x, f"{p}.ln1")
        qkv = linear(a, d, 3 * d, f"{p}.qkv")
        nodes.append(h.make_node("Split", [qkv, split], [f"{p}.q", f"{p}.k", f"{p}.v"],
                                 name=f"{p}.split", axis=-1))
        hs = {}
        for t, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            nodes.append(h.make_node("Reshape", [f"{p}.{t}", heads_shape], [f"{p}.{t}.r"],
                                     name=f"{p}.{t}.r"))
            nodes.append(h.make_node("Transpose", [f"{p}.{t}.r"], [f"{p}.{t}.t"],
                                     name=f"{p}.{t}.t", perm=perm))
            hs[t] = f"{p}.{t}.t"
        nodes.append(h.make_node("MatMul", [hs["q"], hs["k"]], [f"{p}.scores"],
                                 name=f"{p}.scores"))
        nodes.append(h.make_node("Mul", [f"{p}.scores", "scale"], [f"{p}.scaled"],
                                 name=f"{p}.scaled"))
        nodes.append(h.make_node("Softmax", [f"{p}.scaled"], [f"{p}.probs"], name=f"{p}.probs",
                                 axis=-1))
        nodes.append(h.make_node("MatMul", [f"{p}.probs", hs["v"]], [f"{p}.ctx"],
                                 name=f"{p}.ctx"))
        nodes.append(h.make_node("Transpose", [f"{p}.ctx"], [f"{p}.ctx.t"], name=f"{p}.ctx.t",
                                 perm=[0, 2, 1, 3]))
        nodes.append(h.make_node("Reshape", [f"{p}.ctx.t", flat_shape], [f"{p}.ctx.r"],
                                 name=f"{p}.ctx.r"))
        o = linear(f"{p}.ctx.r", d, d, f"{p}.out")
        nodes.append(h.make_node("Add", [x, o], [f"{p}.res1"], name=f"{p}.res1"))
        b = ln(f"{p}.res1", f"{p}.ln2")
        f1 = linear(b, d, ff, f"{p}.fc1")
        nodes.append(h.make_node("Tanh", [f1], [f"{p}.act"], name=f"{p}.act"))
        f2 = linear(f"{p}.act", ff, d, f"{p}.fc2")
        nodes.append(h.make_node("Add", [f"{p}.res1", f2], [f"{p}.res2"], name=f"{p}.res2"))
        x = f"{p}.res2"
    inits.extend([param("ln_f.weight", [d]), param("ln_f.bias", [d])])
    nodes.append(h.make_node("LayerNormalization", [x, "ln_f.weight", "ln_f.bias"], ["ln_f"],
                             name="ln_f", axis=-1, epsilon=1e-5))
    nodes.append(h.make_node("ReduceMean", ["ln_f"], ["pooled"], name="pooled", axes=[1],
                             keepdims=0))
    inits.extend([param("head.weight", [classes, d]), param("head.bias", [classes])])
    nodes.append(h.make_node("Gemm", ["pooled", "head.weight", "head.bias"], ["logits"],
                             name="head", transB=1))
    return model(
        nodes,
        "transformer",
        [h.make_tensor_value_info("tokens", T.INT64, ["batch", seq])],
        [h.make_tensor_value_info("logits", T.FLOAT, ["batch", classes])],
        inits,
        opset=OPSET,
    )


def decomposed():
    """An MLP whose GELU (`x * 0.5 * (1 + erf(x / sqrt 2))`) and layer normalisation
    (`(x - mean) / sqrt(var + eps) * g + b`) are written out op by op, as older exporters
    write them, with a Dropout between: ONNX Runtime fuses them before it builds the
    gradient graph."""
    scalars = {"sqrt2": 1.4142135, "one": 1.0, "half": 0.5, "ratio": 0.1, "two": 2.0,
               "eps": 1e-5}
    inits = [param("w1", [64, 128]), param("b1", [128]), param("w2", [128, 10]),
             param("g", [128]), param("beta", [128])]
    inits += [nh.from_array(np.array(v, np.float32), k) for k, v in scalars.items()]
    inits.append(nh.from_array(np.array(True), "train"))
    mk = h.make_node
    nodes = [
        mk("MatMul", ["input", "w1"], ["mm"], name="fc1.mm"),
        mk("Add", ["mm", "b1"], ["h"], name="fc1"),
        mk("Div", ["h", "sqrt2"], ["hd"], name="gelu.div"),
        mk("Erf", ["hd"], ["he"], name="gelu.erf"),
        mk("Add", ["he", "one"], ["h1"], name="gelu.add"),
        mk("Mul", ["h", "h1"], ["hm"], name="gelu.mul"),
        mk("Mul", ["hm", "half"], ["gelu"], name="gelu"),
        mk("Dropout", ["gelu", "ratio", "train"], ["drop", "mask"], name="drop"),
        mk("ReduceMean", ["drop"], ["mu"], name="ln.mean", axes=[-1]),
        mk("Sub", ["drop", "mu"], ["c"], name="ln.sub"),
        mk("Pow", ["c", "two"], ["c2"], name="ln.pow"),
        mk("ReduceMean", ["c2"], ["var"], name="ln.var", axes=[-1]),
        mk("Add", ["var", "eps"], ["ve"], name="ln.eps"),
        mk("Sqrt", ["ve"], ["sd"], name="ln.sqrt"),
        mk("Div", ["c", "sd"], ["n"], name="ln.div"),
        mk("Mul", ["n", "g"], ["ng"], name="ln.scale"),
        mk("Add", ["ng", "beta"], ["ln"], name="ln"),
        mk("MatMul", ["ln", "w2"], ["logits"], name="fc2"),
    ]
    return model(
        nodes,
        "decomposed",
        [h.make_tensor_value_info("input", T.FLOAT, ["batch", 64])],
        [h.make_tensor_value_info("logits", T.FLOAT, ["batch", 10])],
        inits,
    )


def gelu_tanh():
    """x -> Gemm -> GELU (tanh, GPT-2's spelling) -> Gemm -> GELU (tanh, PyTorch's spelling)
    -> Gemm. GPT-2 (`NewGELUActivation`): `(x * 0.5) * (1 + tanh((x + 0.044715 * x^3) *
    sqrt(2 / pi)))` with `Pow(x, 3)`; PyTorch's exporter: `x * x * x` and the half last."""
    consts = {"half": 0.5, "three": 3.0, "k1": 0.044715, "k2": 0.7978845608, "one": 1.0}
    inits = [param("w1", [64, 96]), param("b1", [96]), param("w2", [96, 80]),
             param("b2", [80]), param("w3", [80, 10])]
    inits += [nh.from_array(np.array(v, np.float32), k) for k, v in consts.items()]
    mk = h.make_node
    nodes = [
        mk("MatMul", ["input", "w1"], ["mm1"], name="fc1.mm"),
        mk("Add", ["mm1", "b1"], ["h1"], name="fc1"),
        mk("Mul", ["h1", "half"], ["g1.half"], name="g1.half"),
        mk("Pow", ["h1", "three"], ["g1.cube"], name="g1.cube"),
        mk("Mul", ["g1.cube", "k1"], ["g1.k1"], name="g1.k1"),
        mk("Add", ["h1", "g1.k1"], ["g1.inner"], name="g1.inner"),
        mk("Mul", ["g1.inner", "k2"], ["g1.k2"], name="g1.k2"),
        mk("Tanh", ["g1.k2"], ["g1.tanh"], name="g1.tanh"),
        mk("Add", ["g1.tanh", "one"], ["g1.one"], name="g1.one"),
        mk("Mul", ["g1.half", "g1.one"], ["gelu1"], name="gelu1"),
        mk("MatMul", ["gelu1", "w2"], ["mm2"], name="fc2.mm"),
        mk("Add", ["mm2", "b2"], ["h2"], name="fc2"),
        mk("Mul", ["h2", "h2"], ["g2.sq"], name="g2.sq"),
        mk("Mul", ["h2", "g2.sq"], ["g2.cube"], name="g2.cube"),
        mk("Mul", ["k1", "g2.cube"], ["g2.k1"], name="g2.k1"),
        mk("Add", ["h2", "g2.k1"], ["g2.inner"], name="g2.inner"),
        mk("Mul", ["k2", "g2.inner"], ["g2.k2"], name="g2.k2"),
        mk("Tanh", ["g2.k2"], ["g2.tanh"], name="g2.tanh"),
        mk("Add", ["one", "g2.tanh"], ["g2.one"], name="g2.one"),
        mk("Mul", ["h2", "g2.one"], ["g2.x"], name="g2.x"),
        mk("Mul", ["half", "g2.x"], ["gelu2"], name="gelu2"),
        mk("MatMul", ["gelu2", "w3"], ["logits"], name="fc3"),
    ]
    return model(
        nodes,
        "gelu_tanh",
        [h.make_tensor_value_info("input", T.FLOAT, ["batch", 64])],
        [h.make_tensor_value_info("logits", T.FLOAT, ["batch", 10])],
        inits,
    )


def exported(name):
    """A forward model `--export-torch` wrote (stripped ones get zeros again)."""
    m = onnx.load(os.path.join(HERE, name, "forward.onnx"))
    for init in m.graph.initializer:
        if init.data_type == T.FLOAT and not init.raw_data and not init.float_data:
            n = int(np.prod(init.dims)) if len(init.dims) else 1
            init.raw_data = np.zeros(n, np.float32).tobytes()
    m.ir_version = 8
    return m


def export_torch():
    """Exports `cnn_dense` (dynamo, opset 18) and `lm_tied` (TorchScript, opset 17) with
    torch into their folders (`forward.onnx`, weights included until the ordinary run strips
    them)."""
    import math

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)

    class CnnDense(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
            self.bn0 = nn.BatchNorm2d(16)
            self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            self.pw = nn.Conv2d(16, 32, 1)
            self.gconv = nn.Conv2d(32, 32, 3, padding=1, groups=4)
            self.bn2 = nn.BatchNorm2d(32)
            self.d1 = nn.Conv2d(32, 8, 3, padding=1)
            self.bnd1 = nn.BatchNorm2d(40)
            self.d2 = nn.Conv2d(40, 8, 3, padding=1)
            self.trans = nn.Conv2d(48, 32, 1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = F.relu(self.bn0(self.stem(x)))
            x = F.max_pool2d(x, 2)
            x = x + F.relu(self.bn1(self.dw(x)))
            x = self.pw(x)
            x = F.relu(self.bn2(self.gconv(x))) + x
            x = F.avg_pool2d(x, 2)
            c1 = torch.cat([x, F.relu(self.d1(x))], 1)
            c2 = torch.cat([c1, F.relu(self.d2(F.relu(self.bnd1(c1))))], 1)
            x = self.trans(c2)
            return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))

    class LmTied(nn.Module):
        def __init__(self, vocab=500, d=64, heads=2, seq=50):
            super().__init__()
            self.h, self.dh = heads, d // heads
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.zeros(1, seq, d))
            self.ln1 = nn.LayerNorm(d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)
            self.drop = nn.Dropout(0.1)
            self.ln_f = nn.LayerNorm(d)

        def forward(self, tokens):
            x = self.emb(tokens) + self.pos
            b, s, d = x.shape
            a = self.ln1(x)
            q, k, v = (p(a).view(b, s, self.h, self.dh).transpose(1, 2)
                       for p in (self.q, self.k, self.v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(self.dh)
            att = F.softmax(att.masked_fill(~self.mask[:s, :s], float("-inf")), dim=-1)
            x = x + self.o((att @ v).transpose(1, 2).reshape(b, s, d))
            x = x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))
            logits = self.ln_f(x) @ self.emb.weight.t()
            return logits.transpose(1, 2)

    out = os.path.join(HERE, "cnn_dense")
    os.makedirs(out, exist_ok=True)
    m = CnnDense().eval()
    prog = torch.onnx.export(m, (torch.randn(4, 3, 32, 32),), dynamo=True,
                             input_names=["input"], output_names=["logits"],
                             dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=1024)},),
                             opset_version=18, external_data=False)
    prog.save(os.path.join(out, "forward.onnx"))
    out = os.path.join(HERE, "lm_tied")
    os.makedirs(out, exist_ok=True)
    m = LmTied().eval()
    torch.onnx.export(m, (torch.randint(0, 500, (4, 50)),), os.path.join(out, "forward.onnx"),
                      input_names=["tokens"], output_names=["logits"],
                      dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.PRESERVE, dynamo=False)
    print("cnn_dense lm_tied exported")


def vit():
    m = onnx.load(os.path.join(REPO, "testdata/graphs/onnx/vit_base_patch16_224_b1.onnx"))
    m.graph.name = "vit_b16"
    for init in m.graph.initializer:
        if len(init.raw_data) == 0 and init.data_type == T.FLOAT and not init.float_data:
            n = int(np.prod(init.dims)) if len(init.dims) else 1
            init.raw_data = np.zeros(n, np.float32).tobytes()
    m.ir_version = 8
    return m


def ln_outputs(m):
    """A copy of `m` whose LayerNormalization nodes declare outputs 1 and 2."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    for i, node in enumerate(m2.graph.node):
        if node.op_type == "LayerNormalization":
            while len(node.output) < 3:
                node.output.append(f"{node.output[0]}_ln_stat{len(node.output)}_{i}")
    return m2


def trainable(m):
    """Float initializers of rank >= 1, but not an attention mask (ViT's additive mask,
    `[1, 1, 197, 197]`) nor BatchNormalization's running statistics."""
    stats = set()
    for node in m.graph.node:
        if node.op_type == "BatchNormalization":
            stats.update(node.input[3:5])
    return [
        i.name
        for i in m.graph.initializer
        if i.data_type == T.FLOAT and len(i.dims) >= 1 and i.name not in stats
        and list(i.dims) != [1, 1, 197, 197]
    ]


def stripped(m):
    """`m` with initializer data removed (dims and dtype kept); small int constants stay."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    for init in m2.graph.initializer:
        if init.data_type == T.INT64 and int(np.prod(init.dims or [1])) <= 64:
            continue
        init.ClearField("raw_data")
        init.ClearField("float_data")
        init.ClearField("int64_data")
        init.ClearField("int32_data")
    return m2


def strip_file(path):
    m = onnx.load(path)
    onnx.save(stripped(m), path)


def main():
    if sys.argv[1:] == ["--export-torch"]:
        export_torch()
        return
    artifacts = load_artifacts()
    models = {"mlp": mlp, "cnn": cnn, "transformer": transformer, "decomposed": decomposed,
              "vit_b16": vit, "gelu_tanh": gelu_tanh, "cnn_dense": lambda: exported("cnn_dense"),
              "lm_tied": lambda: exported("lm_tied")}
    only = sys.argv[1:]
    for name, make in models.items():
        if only and name not in only:
            continue
        m = make()
        out = os.path.join(HERE, name)
        os.makedirs(out, exist_ok=True)
        onnx.save(stripped(m), os.path.join(out, "forward.onnx"))
        artifacts.generate_artifacts(
            ln_outputs(m),
            requires_grad=trainable(m),
            loss=artifacts.LossType.CrossEntropyLoss,
            optimizer=artifacts.OptimType.AdamW,
            artifact_directory=out,
        )
        for f in ("eval_model.onnx", "checkpoint"):
            p = os.path.join(out, f)
            if os.path.exists(p):
                os.remove(p)
        strip_file(os.path.join(out, "training_model.onnx"))
        if name == "mlp":
            tmp = os.path.join(out, "sgd")
            os.makedirs(tmp, exist_ok=True)
            artifacts.generate_artifacts(
                m,
                requires_grad=trainable(m),
                loss=artifacts.LossType.CrossEntropyLoss,
                optimizer=artifacts.OptimType.SGD,
                artifact_directory=tmp,
            )
            os.replace(os.path.join(tmp, "optimizer_model.onnx"),
                       os.path.join(out, "optimizer_sgd.onnx"))
            for f in os.listdir(tmp):
                os.remove(os.path.join(tmp, f))
            os.rmdir(tmp)
        print(name, "done")


if __name__ == "__main__":
    main()
