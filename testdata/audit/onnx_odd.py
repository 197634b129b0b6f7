"""ONNX models with odd and overflowing attributes and constants: memplan must plan them
or refuse them with exit 2, never panic."""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from harness import MEMPLAN, WORK  # noqa: E402

OUT = os.path.join(WORK, "onnx")
os.makedirs(OUT, exist_ok=True)

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(name, nodes, inputs, outputs, inits=(), opset=18, value_info=()):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def c64(name, vals):
    return numpy_helper.from_array(np.array(vals, dtype=np.int64), name)


def cases():
    X = vi("x", F, [2, 3, 4])
    Y = vi("y", F, None)
    out = []
    big = 2**62
    out.append(("split_num_outputs_huge", model("m", [helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=big)], [X], [vi("a", F, None), vi("b", F, None)])))
    out.append(("split_num_outputs_neg", model("m", [helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=-1)], [X], [vi("a", F, None), vi("b", F, None)])))
    out.append(("split_sizes_short", model("m", [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1)], [X], [vi("a", F, None), vi("b", F, None)], [c64("s", [1, 1])])))
    out.append(("split_sizes_huge", model("m", [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1)], [X], [vi("a", F, None), vi("b", F, None)], [c64("s", [2**62, 2**62])])))
    out.append(("split_sizes_neg", model("m", [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1)], [X], [vi("a", F, None), vi("b", F, None)], [c64("s", [-1, 4])])))
    out.append(("slice_axis_huge", model("m", [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], [X], [Y], [c64("s", [0]), c64("e", [1]), c64("a", [2**63 - 1])])))
    out.append(("slice_axis_repeat", model("m", [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], [X], [Y], [c64("s", [0, 1]), c64("e", [1, 2]), c64("a", [0, 0])])))
    out.append(("slice_step_zero", model("m", [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], [X], [Y], [c64("s", [0]), c64("e", [1]), c64("a", [0]), c64("st", [0])])))
    out.append(("slice_step_min", model("m", [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], [X], [Y], [c64("s", [-1]), c64("e", [-2**63]), c64("a", [0]), c64("st", [-2**63])])))
    out.append(("concat_axis_min", model("m", [helper.make_node("Concat", ["x", "x"], ["y"], axis=-2**63)], [X], [Y])))
    out.append(("concat_axis_max", model("m", [helper.make_node("Concat", ["x", "x"], ["y"], axis=2**63 - 1)], [X], [Y])))
    out.append(("maxpool_kernel0", model("m", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[0])], [X], [Y])))
    out.append(("maxpool_stride0", model("m", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2], strides=[0])], [X], [Y])))
    out.append(("maxpool_dil_huge", model("m", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2], dilations=[2**62])], [X], [Y])))
    out.append(("conv_group0", model("m", [helper.make_node("Conv", ["x", "w"], ["y"], group=0)], [X], [Y], [numpy_helper.from_array(np.zeros((3, 3, 1), np.float32), "w")])))
    out.append(("conv_pads_neg", model("m", [helper.make_node("Conv", ["x", "w"], ["y"], pads=[-5, -5])], [X], [Y], [numpy_helper.from_array(np.zeros((3, 3, 1), np.float32), "w")])))
    out.append(("einsum_huge", model("m", [helper.make_node("Einsum", ["x"], ["y"], equation="ijk->ijkijkijkijkijkijkijkijk")], [X], [Y])))
    out.append(("einsum_bad", model("m", [helper.make_node("Einsum", ["x"], ["y"], equation="i->j")], [X], [Y])))
    out.append(("groupnorm_0", model("m", [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=0)], [X], [Y], [numpy_helper.from_array(np.ones(3, np.float32), "s"), numpy_helper.from_array(np.ones(3, np.float32), "b")])))
    out.append(("reshape_huge", model("m", [helper.make_node("Reshape", ["x", "s"], ["y"])], [X], [Y], [c64("s", [2**62, 2**62])])))
    out.append(("reshape_two_minus1", model("m", [helper.make_node("Reshape", ["x", "s"], ["y"])], [X], [Y], [c64("s", [-1, -1])])))
    out.append(("reshape_bad_count", model("m", [helper.make_node("Reshape", ["x", "s"], ["y"])], [X], [Y], [c64("s", [5, 5])])))
    out.append(("tile_huge", model("m", [helper.make_node("Tile", ["x", "r"], ["y"])], [X], [Y], [c64("r", [2**40, 2**40, 2**40])])))
    out.append(("tile_neg", model("m", [helper.make_node("Tile", ["x", "r"], ["y"])], [X], [Y], [c64("r", [-1, 1, 1])])))
    out.append(("expand_huge", model("m", [helper.make_node("Expand", ["x", "s"], ["y"])], [X], [Y], [c64("s", [2**62, 2, 3, 4])])))
    out.append(("cos_huge", model("m", [helper.make_node("ConstantOfShape", ["s"], ["y"])], [], [Y], [c64("s", [2**62, 2**62])])))
    out.append(("cos_neg", model("m", [helper.make_node("ConstantOfShape", ["s"], ["y"])], [], [Y], [c64("s", [-3])])))
    out.append(("range_huge", model("m", [helper.make_node("Range", ["a", "b", "d"], ["y"])], [], [vi("y", I64, None)], [c64("a", 0), c64("b", 2**62), c64("d", 1)])))
    out.append(("range_step0", model("m", [helper.make_node("Range", ["a", "b", "d"], ["y"])], [], [vi("y", I64, None)], [c64("a", 0), c64("b", 5), c64("d", 0)])))
    out.append(("range_minmax", model("m", [helper.make_node("Range", ["a", "b", "d"], ["y"])], [], [vi("y", I64, None)], [c64("a", -2**63), c64("b", 2**63 - 1), c64("d", 1)])))
    out.append(("onehot_huge", model("m", [helper.make_node("OneHot", ["i", "d", "v"], ["y"])], [vi("i", I64, [4])], [Y], [c64("d", [2**62]), numpy_helper.from_array(np.array([0, 1], np.float32), "v")])))
    out.append(("pad_huge", model("m", [helper.make_node("Pad", ["x", "p"], ["y"])], [X], [Y], [c64("p", [2**62, 0, 0, 2**62, 0, 0])])))
    out.append(("pad_neg", model("m", [helper.make_node("Pad", ["x", "p"], ["y"])], [X], [Y], [c64("p", [-5, 0, 0, 0, 0, 0])])))
    out.append(("topk_huge", model("m", [helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=-1)], [X], [Y, vi("i", I64, None)], [c64("k", [2**62])])))
    out.append(("topk_axis_bad", model("m", [helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=9)], [X], [Y, vi("i", I64, None)], [c64("k", [1])])))
    out.append(("gather_axis_bad", model("m", [helper.make_node("Gather", ["x", "i"], ["y"], axis=7)], [X], [Y], [c64("i", [0])])))
    out.append(("gather_index_out", model("m", [helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], [X], [Y], [c64("i", [5])])))
    out.append(("transpose_perm_bad", model("m", [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 0, 1])], [X], [Y])))
    out.append(("transpose_perm_huge", model("m", [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 1, 2**40])], [X], [Y])))
    out.append(("squeeze_bad_axis", model("m", [helper.make_node("Squeeze", ["x", "a"], ["y"])], [X], [Y], [c64("a", [0])])))
    out.append(("unsqueeze_huge", model("m", [helper.make_node("Unsqueeze", ["x", "a"], ["y"])], [X], [Y], [c64("a", [2**40])])))
    out.append(("resize_scales_huge", model("m", [helper.make_node("Resize", ["x", "", "sc"], ["y"])], [X], [Y], [numpy_helper.from_array(np.array([1e30, 1, 1], np.float32), "sc")])))
    out.append(("resize_scales_nan", model("m", [helper.make_node("Resize", ["x", "", "sc"], ["y"])], [X], [Y], [numpy_helper.from_array(np.array([np.nan, 1, 1], np.float32), "sc")])))
    out.append(("resize_scales_neg", model("m", [helper.make_node("Resize", ["x", "", "sc"], ["y"])], [X], [Y], [numpy_helper.from_array(np.array([-1, 1, 1], np.float32), "sc")])))
    out.append(("depthtospace_0", model("m", [helper.make_node("DepthToSpace", ["x4"], ["y"], blocksize=0)], [vi("x4", F, [1, 4, 2, 2])], [Y])))
    out.append(("spacetodepth_huge", model("m", [helper.make_node("SpaceToDepth", ["x4"], ["y"], blocksize=2**40)], [vi("x4", F, [1, 4, 2, 2])], [Y])))
    out.append(("dim_huge_input", model("m", [helper.make_node("Relu", ["xh"], ["y"])], [vi("xh", F, [2**62, 4])], [Y])))
    out.append(("dim_neg_input", model("m", [helper.make_node("Relu", ["xh"], ["y"])], [vi("xh", F, [-4, 4])], [Y])))
    out.append(("int4_odd", model("m", [helper.make_node("Identity", ["xi"], ["y"])], [vi("xi", TensorProto.INT4, [3, 3])], [vi("y", TensorProto.INT4, None)], opset=21)))
    out.append(("f8_concat", model("m", [helper.make_node("Concat", ["xf", "xf"], ["y"], axis=1)], [vi("xf", TensorProto.FLOAT8E4M3FN, [3, 5])], [vi("y", TensorProto.FLOAT8E4M3FN, None)], opset=21)))
    out.append(("complex_add", model("m", [helper.make_node("Add", ["xc", "xc"], ["y"])], [vi("xc", TensorProto.COMPLEX64, [3])], [vi("y", TensorProto.COMPLEX64, None)])))
    out.append(("string_identity", model("m", [helper.make_node("Identity", ["xs"], ["y"])], [vi("xs", TensorProto.STRING, [3])], [vi("y", TensorProto.STRING, None)])))
    out.append(("bool_not", model("m", [helper.make_node("Not", ["xb"], ["y"])], [vi("xb", TensorProto.BOOL, [0, 3])], [vi("y", TensorProto.BOOL, None)])))
    out.append(("cumsum_axis_bad", model("m", [helper.make_node("CumSum", ["x", "a"], ["y"])], [X], [Y], [c64("a", 7)])))
    out.append(("bn_train_9", model("m", [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv", "sm", "sv"])], [X], [Y, vi("rm", F, None), vi("rv", F, None), vi("sm", F, None), vi("sv", F, None)], [numpy_helper.from_array(np.ones(3, np.float32), n) for n in "sbmv"], opset=9)))
    out.append(("lstm_hidden0", model("m", [helper.make_node("LSTM", ["xs3", "W", "R"], ["y"], hidden_size=0)], [vi("xs3", F, [2, 1, 4])], [Y], [numpy_helper.from_array(np.zeros((1, 0, 4), np.float32), "W"), numpy_helper.from_array(np.zeros((1, 0, 0), np.float32), "R")])))
    out.append(("nms_huge", model("m", [helper.make_node("NonMaxSuppression", ["bx", "sc", "mo"], ["y"])], [vi("bx", F, [1, 4, 4]), vi("sc", F, [1, 1, 4])], [vi("y", I64, None)], [c64("mo", [2**62])])))
    return out


if __name__ == "__main__":
    from collections import Counter
    c = Counter()
    for name, m in cases():
        p = os.path.join(OUT, name + ".onnx")
        onnx.save(m, p)
        for cmd in (["plan", p, "-q"], ["inspect", p, "-q"], ["check", p, "-q"], ["plan", p, "-q", "--bound"]):
            r = subprocess.run([MEMPLAN] + cmd, capture_output=True, text=True, timeout=60)
            c[(cmd[0], r.returncode)] += 1
            if r.returncode not in (0, 1, 2) or "panicked" in r.stderr:
                print(f"PANIC {name} {cmd[0]}: rc {r.returncode}: {r.stderr[-400:]}")
            elif cmd[0] == "plan" and cmd[-1] == "-q":
                print(f"{name}: rc {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:200]}")
    print(dict(c))
