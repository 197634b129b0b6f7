"""memplan.load, memplan.plan, Plan, memplan.check: what they return, the errors they raise,
and equality with the `memplan` command (the same plan file bytes, report and pictures)."""

from __future__ import annotations

import ast
import json
import threading
import time
from pathlib import Path

import pytest

import memplan
from conftest import CONFIGS, JSON_GRAPHS, ONNX_GRAPHS, REPO, TESTDATA

SQUEEZENET_JSON = JSON_GRAPHS / "light_squeezenet_b1.json"
SQUEEZENET_ONNX = ONNX_GRAPHS / "light_squeezenet_b1.onnx"
GPT2_SYMBOLIC = TESTDATA / "pytorch" / "onnx" / "gpt2_dynamo18.onnx"
MLP_FORWARD = TESTDATA / "training" / "mlp" / "forward.onnx"


# ---------------------------------------------------------------- load and Graph


def test_load_tells_json_and_onnx_apart_by_content(tmp_path: Path) -> None:
    from_json = memplan.load(SQUEEZENET_JSON)
    from_onnx = memplan.load(str(SQUEEZENET_ONNX))
    assert from_json.num_nodes == from_onnx.num_nodes == 66
    # ONNX bytes under a misleading name, and bytes in memory, load the same.
    renamed = tmp_path / "model.bin"
    renamed.write_bytes(SQUEEZENET_ONNX.read_bytes())
    assert memplan.load(renamed).num_tensors == from_onnx.num_tensors
    assert memplan.load(SQUEEZENET_ONNX.read_bytes()).num_tensors == from_onnx.num_tensors
    assert memplan.load(bytearray(SQUEEZENET_JSON.read_bytes())).name == from_json.name


def test_load_takes_an_onnx_model_proto() -> None:
    onnx = pytest.importorskip("onnx")
    proto = onnx.load(str(SQUEEZENET_ONNX))
    assert memplan.load(proto).num_nodes == 66


def test_a_graph_has_symbols_sizes_and_a_summary(cli) -> None:
    g = memplan.load(GPT2_SYMBOLIC)
    assert g.symbols == ["batch", "seq"]
    sizes = g.sizes
    assert isinstance(sizes["weight"], int) and sizes["weight"] > 0
    assert "batch" in sizes["activation"] and "seq" in sizes["activation"]
    bound = memplan.load(GPT2_SYMBOLIC, dims={"batch": 2, "seq": 16})
    assert bound.dims == {"batch": 2, "seq": 16}
    assert isinstance(bound.sizes["activation"], int)
    assert bound.inspect(top=5) == cli.text(
        "inspect", str(GPT2_SYMBOLIC), "--dim", "batch=2", "--dim", "seq=16", "--top", "5"
    )
    assert bound.inspect_dict() == json.loads(
        cli.text("inspect", str(GPT2_SYMBOLIC), "--dim", "batch=2", "--dim", "seq=16", "--format", "json")
    )
    assert "memplan.Graph" in repr(g)


def test_the_default_graph_is_the_embedded_densenet() -> None:
    assert memplan.load().name == "light_densenet121_b1"


@pytest.mark.parametrize(
    "source, message",
    [
        (b"{ not json", "loading the bytes given"),
        (b"\x08\x07garbage that is not a model", "importing the bytes given as ONNX"),
        (str(CONFIGS / "gpt2.json"), "Hugging Face model config"),
        ("/nonexistent/model.onnx", "reading /nonexistent/model.onnx"),
    ],
)
def test_bad_graphs_raise_input_errors(source, message) -> None:
    with pytest.raises(memplan.InputError) as e:
        memplan.load(source)
    assert message in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, memplan.Error)


def test_load_refuses_unknown_symbols_and_wrong_types() -> None:
    with pytest.raises(memplan.InputError, match="symbolic dimensions"):
        memplan.load(SQUEEZENET_JSON, dims={"batch": 8})
    with pytest.raises(memplan.InputError, match="not a non-negative integer"):
        memplan.load(GPT2_SYMBOLIC, dims={"batch": -1})
    with pytest.raises(memplan.OptionError):
        memplan.load(GPT2_SYMBOLIC, dims={"batch": "eight"})
    with pytest.raises(memplan.OptionError):
        memplan.load(42)
    with pytest.raises(TypeError):
        memplan.load(3.5)


# ---------------------------------------------------------------- plan and Plan

CASES = [
    (SQUEEZENET_JSON, {}, []),
    (SQUEEZENET_ONNX, {"schedule": "memory", "align": 64}, ["--schedule", "memory", "--align", "64"]),
    (
        GPT2_SYMBOLIC,
        {"dims": {"batch": 2, "seq": 32}, "inplace": False, "strategy": "greedy-size"},
        ["--dim", "batch=2", "--dim", "seq=32", "--no-inplace", "--strategy", "greedy-size"],
    ),
    (
        GPT2_SYMBOLIC,
        {"dims": {"batch": 1, "seq": 8}, "caller_inputs": True, "opaque": ["Softmax"], "attention": "flash"},
        ["--dim", "batch=1", "--dim", "seq=8", "--caller-inputs", "--opaque", "Softmax", "--attention", "flash"],
    ),
    (MLP_FORWARD, {"training": "adamw", "dims": {"batch": 32}}, ["--training", "adamw", "--dim", "batch=32"]),
    (
        MLP_FORWARD,
        {"training": "sgd", "checkpoint": "none", "fused_optimizer": True, "loss": "mse", "dims": {"batch": 8}},
        ["--training", "sgd", "--checkpoint", "none", "--fused-optimizer", "--loss", "mse", "--dim", "batch=8"],
    ),
]


@pytest.mark.parametrize("graph, options, flags", CASES)
def test_the_plan_file_report_and_pictures_are_the_cli_s(cli, tmp_path, graph, options, flags) -> None:
    p = memplan.plan(graph, **options)
    args = ["plan", str(graph), *flags]
    assert p.to_json().encode() == cli.run(*args, "--format", "json")
    assert p.report() == cli.text(*args)
    assert p.report(top=3) == cli.text(*args, "--top", "3")
    svg, html = tmp_path / "cli.svg", tmp_path / "cli.html"
    cli.run(*args, "--svg", str(svg), "--html", str(html), "-o", str(tmp_path / "report.txt"))
    assert p.svg() == svg.read_text()
    assert p.html() == html.read_text()
    p.save(tmp_path / "plan.json")
    assert (tmp_path / "plan.json").read_bytes() == p.to_json().encode()
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")], "a temporary file was left"


def test_a_graph_object_plans_as_its_source() -> None:
    g = memplan.load(GPT2_SYMBOLIC, dims={"batch": 2})
    a = memplan.plan(g, dims={"seq": 16})
    b = memplan.plan(GPT2_SYMBOLIC, dims={"batch": 2, "seq": 16})
    assert a.to_json() == b.to_json()
    with pytest.raises(memplan.InputError, match="given twice"):
        memplan.plan(g, dims={"batch": 3, "seq": 16})


def test_a_plan_s_figures_and_buffers_agree_with_its_file() -> None:
    p = memplan.plan(SQUEEZENET_JSON)
    doc = p.as_dict()
    assert p.total_bytes == doc["total_bytes"]
    assert p.arena_bytes == doc["arena_bytes"] >= p.lower_bound_bytes == doc["lower_bound_bytes"]
    assert p.weight_bytes == doc["weight_bytes"]
    assert p.total_bytes == p.arena_bytes + p.weight_bytes
    assert p.verified and p.training is None and p.graph_name == "light_squeezenet_b1"
    buffers = p.buffers
    assert len(buffers) == len(doc["buffers"])
    assert len(p.schedule) == p.steps == 66
    for b in buffers:
        assert 0 <= b.offset and b.offset + b.bytes <= p.arena_bytes
        assert 0 <= b.first <= b.last < p.steps
        assert (b.alias is None) == (b.parent is None)
    # Two buffers that are not aliases of each other and live at a common step never overlap.
    storages = [b for b in buffers if b.alias is None]
    for i, a in enumerate(storages):
        for c in storages[i + 1 :]:
            if a.first <= c.last and c.first <= a.last and a.bytes and c.bytes:
                assert a.offset + a.bytes <= c.offset or c.offset + c.bytes <= a.offset, (a, c)
    html = p._repr_html_()
    assert html.startswith("<iframe srcdoc=") and "&lt;" not in html[:50]


def test_a_training_plan_carries_its_figures() -> None:
    # Gradients in a region of their own (without `accumulate` they are transient, in the arena).
    p = memplan.plan(MLP_FORWARD, training="adamw", accumulate=True, dims={"batch": 32})
    t = p.training
    assert t["optimizer"] == "adamw" and t["parameters"] > 0
    assert t["gradient_bytes"] > 0 and t["optimizer_state_bytes"] == 2 * t["gradient_bytes"]
    assert p.as_dict()["training"] == t
    assert "training step: AdamW" in p.report() or "training step:" in p.report()


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"shedule": "memory"}, memplan.OptionError, "did you mean `schedule`"),
        ({"colour": "red"}, memplan.OptionError, "no option `colour`"),
        ({"align": [256]}, memplan.OptionError, "option `align`"),
        ({"inplace": "no"}, memplan.OptionError, "option `inplace` takes True or False"),
        ({"align": 100}, memplan.InputError, "not a power of two"),
        ({"align": -256}, memplan.InputError, "cannot be negative"),
        ({"budget": -1, "training": "adamw", "checkpoint": "auto"}, memplan.InputError, "cannot be negative"),
        ({"budget": "24G", "training": "adamw", "checkpoint": "auto"}, memplan.InputError, "ambiguous"),
        ({"schedule": "fastest"}, memplan.InputError, "not one of given, memory"),
        ({"strategy": "best"}, memplan.InputError, "greedy-size"),
        ({"training": "lion"}, memplan.InputError, "option `training`"),
        ({"checkpoint": "auto"}, memplan.InputError, "go with --training"),
        ({"opaque": ["softmax"]}, memplan.InputError, "did you mean `Softmax`"),
        ({"dims": {"batch": 1}}, memplan.InputError, "no symbolic dimensions"),
    ],
)
def test_bad_options_raise_the_right_error(options, error, message) -> None:
    with pytest.raises(error) as e:
        memplan.plan(SQUEEZENET_JSON, **options)
    assert message in str(e.value)


def test_unknown_options_are_type_errors_as_in_python() -> None:
    with pytest.raises(TypeError):
        memplan.plan(SQUEEZENET_JSON, colour="red")


def test_an_unbound_symbol_names_what_to_pass() -> None:
    with pytest.raises(memplan.InputError, match="symbolic dims with no value: batch, seq"):
        memplan.plan(GPT2_SYMBOLIC)


def test_a_budget_nothing_fits_is_does_not_fit() -> None:
    with pytest.raises(memplan.DoesNotFitError, match="planning the training step"):
        memplan.plan(MLP_FORWARD, training="adamw", checkpoint="auto", budget=1024, dims={"batch": 32})


def test_notes_are_kept_not_printed(capfd) -> None:
    p = memplan.plan(SQUEEZENET_JSON, opaque=["NoSuchOp"])
    assert any("NoSuchOp" in n for n in p.notes)
    assert capfd.readouterr().err == ""


def test_planning_releases_the_gil() -> None:
    graph = memplan.load(JSON_GRAPHS / "light_densenet121_b1.json")
    done = threading.Event()
    ticks = 0

    def work() -> None:
        memplan.plan(graph, schedule="memory")
        done.set()

    t = threading.Thread(target=work)
    t.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    # With the GIL held for the whole plan the loop would run once or twice.
    assert ticks > 20


# ---------------------------------------------------------------- check


def test_check_runs_the_verifier_and_the_pattern_check(cli, tmp_path) -> None:
    p = memplan.plan(SQUEEZENET_JSON)
    report = memplan.check(p)
    assert report.ok and report and report.executed
    assert report.as_dict()["ok"] is True
    assert "ok: no live tensor was clobbered" in report.report()
    # A plan file, checked against its graph, as `memplan check --plan` does.
    p.save(tmp_path / "plan.json")
    from_file = memplan.check(SQUEEZENET_JSON, tmp_path / "plan.json", sample=65536)
    cli_json = json.loads(
        cli.text("check", str(SQUEEZENET_JSON), "--plan", str(tmp_path / "plan.json"), "--format", "json", "--sample", "65536")
    )
    assert from_file.as_dict()["arena_bytes"] == cli_json["arena_bytes"] == p.arena_bytes
    assert from_file.as_dict()["writes"] == cli_json["writes"]


def test_check_finds_an_unsafe_plan(tmp_path) -> None:
    p = memplan.plan(SQUEEZENET_JSON)
    doc = p.as_dict()
    # Put every buffer at offset 0: live tensors now share bytes.
    for b in doc["buffers"]:
        b["offset"] = 0
    bad = json.dumps(doc).encode()
    with pytest.raises(memplan.UnsafePlanError) as e:
        memplan.check(memplan.load(SQUEEZENET_JSON), bad)
    assert "UNSAFE" in str(e.value)
    assert e.value.report is not None and not e.value.report.ok
    assert e.value.report.as_dict()["verifier_problems"]


def test_check_refuses_bad_arguments(tmp_path) -> None:
    p = memplan.plan(SQUEEZENET_JSON)
    with pytest.raises(memplan.OptionError, match="no option `sampel`"):
        memplan.check(p, sampel=4096)
    with pytest.raises(memplan.OptionError, match="needs its graph"):
        memplan.check(None, tmp_path / "nothing.json")
    (tmp_path / "broken.json").write_text("{ broken")
    with pytest.raises(memplan.InputError):
        memplan.check(SQUEEZENET_JSON, tmp_path / "broken.json")
    with pytest.raises(memplan.InputError, match="not `light_squeezenet_b1`"):
        memplan.check(memplan.load(SQUEEZENET_JSON), memplan.plan(JSON_GRAPHS / "light_bvlc_alexnet_b1.json"))


# ---------------------------------------------------------------- the API's surface


def _stub_keywords(name: str) -> list:
    tree = ast.parse((REPO / "crates" / "python" / "python" / "memplan" / "_memplan.pyi").read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return [a.arg for a in node.args.kwonlyargs]
    raise AssertionError(f"no stub for {name}")


@pytest.mark.parametrize("function, group", [("plan", "plan"), ("check", "check"), ("estimate", "workload")])
def test_the_stubs_list_every_keyword(function, group) -> None:
    keywords = [k for k, _ in memplan._memplan.keywords()[group]]
    assert sorted(k for k in _stub_keywords(function) if k != "dims" or group == "plan") == sorted(keywords)


def test_every_planning_flag_of_the_cli_has_a_keyword(cli) -> None:
    mirrored = {flag for _, flag in memplan._memplan.keywords()["plan"]}
    # Flags about where output goes, not how to plan (`--emit-graph` writes the step graph
    # beside the plan file; a Python plan's JSON embeds it).
    output = {"--format", "--output", "--top", "--svg", "--html", "--verify", "--quiet", "--help",
              "--emit-graph"}
    missing = [f for f in cli.help_flags("plan") if f not in mirrored and f not in output]
    assert not missing, f"`memplan plan` flags without a Python keyword: {missing}"
    check_flags = {flag for _, flag in memplan._memplan.keywords()["check"]} | mirrored
    missing = [f for f in cli.help_flags("check") if f not in check_flags and f not in output | {"--plan"}]
    assert not missing, f"`memplan check` flags without a Python keyword: {missing}"
    workload = {flag for _, flag in memplan._memplan.keywords()["workload"]}
    # The model comes as a config (a path, a dict, a transformers object), not as flags.
    model = {"--config", "--arch", "--layers", "--hidden", "--heads", "--kv-heads", "--head-dim",
             "--intermediate", "--vocab", "--positions", "--tied", "--untied", "--experts",
             "--experts-per-token", "--shared-experts", "--moe-intermediate"}
    missing = [f for f in cli.help_flags("estimate") if f not in workload | model | output]
    assert not missing, f"`memplan estimate` flags without a Python keyword: {missing}"
    serving = {flag for _, flag in memplan._memplan.keywords()["serving"]}
    # fit's own arguments (symbol, budget, min, max, count_caller_io; serving is a function).
    fit = {"--symbol", "--budget", "--min", "--max", "--count-caller-io", "--serving", "--device"}
    missing = [f for f in cli.help_flags("fit") if f not in mirrored | workload | model | serving | fit | output]
    assert not missing, f"`memplan fit` flags without a Python keyword: {missing}"


def test_import_stays_light() -> None:
    import subprocess
    import sys

    code = "import sys, time; t = time.perf_counter(); import memplan; print(time.perf_counter() - t, 'numpy' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1:] == ["False", "False"], "importing memplan must not import numpy or torch"
    assert float(out[0]) < 1.0
