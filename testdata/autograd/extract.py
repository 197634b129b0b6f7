"""Writes derivatives.yaml: the entries of PyTorch's tools/autograd/derivatives.yaml that
crates/planner/tests/backward_rules.rs compares memplan's backward rules with, verbatim, in
the file's order. Run with the Python that has torch installed (torchgen ships the file):

    python3 extract.py

Hand-run, never a test or CI dependency.
"""

import pathlib

import torch
import torchgen

# The ATen functions the test maps ONNX ops to (the part of `- name:` before `(`).
FUNCTIONS = """
abs acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh exp log sqrt reciprocal
erf sigmoid relu leaky_relu leaky_relu_ elu elu_ gelu silu mish hardswish hardsigmoid
softplus hardshrink softshrink threshold threshold_ clamp clamp.Tensor hardtanh _softmax
_log_softmax mul.Tensor div.Tensor pow.Tensor_Tensor add.Tensor sub.Tensor neg where.self
maximum minimum mm addmm convolution native_layer_norm native_batch_norm native_group_norm
_fused_rms_norm native_dropout max_pool2d_with_indices avg_pool2d sum.dim_IntList mean.dim
amax amin prod.dim_int norm.ScalarOpt_dim logsumexp gather topk scatter.src scatter_add
_prelu_kernel cat split.Tensor expand permute view slice.Tensor constant_pad_nd repeat
cumsum upsample_nearest2d tril triu floor ceil round sign _to_copy pixel_shuffle
pixel_unshuffle index.Tensor index_select nll_loss_forward
""".split()


def main() -> None:
    source = pathlib.Path(torchgen.__file__).parent / "packaged/autograd/derivatives.yaml"
    lines = source.read_text().splitlines()
    entries = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("- name: "):
            j = i + 1
            while j < len(lines) and lines[j].strip() and not lines[j].startswith("- name: "):
                j += 1
            name = line[len("- name: ") :].split("(", 1)[0]
            if name in FUNCTIONS:
                entries.append((i + 1, lines[i:j]))
            i = j
        else:
            i += 1
    found = {e[1][0][len("- name: ") :].split("(", 1)[0] for e in entries}
    missing = sorted(set(FUNCTIONS) - found)
    if missing:
        raise SystemExit(f"not in {source}: {missing}")
    out = [
        "# Entries of PyTorch's tools/autograd/derivatives.yaml, verbatim (each preceded by its",
        f"# line in the original), from torch {torch.__version__} (git {torch.version.git_version}),",
        "# torchgen/packaged/autograd/derivatives.yaml. BSD-3-Clause: see LICENSE-pytorch.",
        "# Written by extract.py; read by crates/planner/tests/backward_rules.rs.",
    ]
    for line_no, block in entries:
        out.append("")
        out.append(f"# line {line_no}")
        out.extend(block)
    pathlib.Path(__file__).with_name("derivatives.yaml").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
