"""memplan.estimate, memplan.fit, memplan.serving and memplan.solve: the same figures as the
`memplan` command, configs as paths, dicts or `transformers` objects, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memplan
from conftest import CONFIGS, JSON_GRAPHS, TESTDATA

LLAMA = CONFIGS / "llama-3-8b.json"
GPT2 = CONFIGS / "gpt2.json"
MIXTRAL = CONFIGS / "mixtral-8x7b.json"


class FakeConfig:
    """What a `transformers` config offers memplan: `to_dict()`."""

    def __init__(self, path: Path) -> None:
        self._d = json.loads(path.read_text())

    def to_dict(self) -> dict:
        return dict(self._d)


ESTIMATES = [
    (LLAMA, {}, []),
    (LLAMA, {"batch": 8, "seq": 2048, "dtype": "bf16"}, ["--batch", "8", "--seq", "2048", "--dtype", "bf16"]),
    (
        LLAMA,
        {"training": "adamw", "checkpointing": True, "dtype": "bf16", "batch": 4},
        ["--training", "adamw", "--checkpointing", "--dtype", "bf16", "--batch", "4"],
    ),
    (LLAMA, {"weight_dtype": "int4", "kv_dtype": "fp8", "flash": True}, ["--weight-dtype", "int4", "--kv-dtype", "fp8", "--flash"]),
    (
        MIXTRAL,
        {"training": "adamw", "dp": 8, "zero": 3, "tp": 2, "master_weights": False, "dtype": "bf16"},
        ["--training", "adamw", "--dp", "8", "--zero", "3", "--tp", "2", "--no-master-weights", "--dtype", "bf16"],
    ),
    (GPT2, {"logits": "all", "seq": 512}, ["--logits", "all", "--seq", "512"]),
]


@pytest.mark.parametrize("config, workload, flags", ESTIMATES)
def test_estimates_are_the_cli_s(cli, config, workload, flags) -> None:
    args = ["estimate", "--config", str(config), *flags]
    want = json.loads(cli.text(*args, "--format", "json"))
    for given in (config, str(config), json.loads(config.read_text()), FakeConfig(config)):
        e = memplan.estimate(given, **workload)
        assert e.as_dict() == want
    assert e.report() == cli.text(*args)
    assert e.total_bytes == want["total_bytes"] and e.parameters == want["parameters"]
    assert e.per_device == want["per_device"]


def test_a_transformers_config_object(cli) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**json.loads(LLAMA.read_text()))
    e = memplan.estimate(config, batch=2, seq=1024)
    want = json.loads(cli.text("estimate", "--config", str(LLAMA), "--batch", "2", "--seq", "1024", "--format", "json"))
    assert e.parameters == want["parameters"]
    assert e.weights_bytes == want["weights_bytes"]


@pytest.mark.parametrize(
    "workload, error, message",
    [
        ({"batchsize": 8}, memplan.OptionError, "did you mean `batch`"),
        ({"batch": -8}, memplan.InputError, "must not be negative"),
        ({"batch": "8"}, memplan.OptionError, "takes an integer"),
        ({"dtype": "f33"}, memplan.InputError, "option `dtype`"),
        ({"zero": 4}, memplan.InputError, "ZeRO stage"),
        ({"checkpointing": "full"}, memplan.InputError, "need --training"),
    ],
)
def test_bad_workloads(workload, error, message) -> None:
    with pytest.raises(error) as e:
        memplan.estimate(LLAMA, **workload)
    assert message in str(e.value)


def test_bad_configs(tmp_path) -> None:
    with pytest.raises(memplan.InputError, match="reading"):
        memplan.estimate(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"model_type": "no-such-architecture", "hidden_size": 8}')
    with pytest.raises(memplan.InputError):
        memplan.estimate(tmp_path / "bad.json")
    with pytest.raises(memplan.OptionError, match="to_dict"):
        memplan.estimate(42)


def test_config_fits_are_the_cli_s(cli) -> None:
    f = memplan.fit(LLAMA, symbol="batch", budget="80GiB", seq=4096, dtype="bf16")
    want = json.loads(cli.text("fit", "--config", str(LLAMA), "--symbol", "batch", "--budget", "80GiB", "--seq", "4096", "--dtype", "bf16", "--format", "json"))
    assert f.as_dict() == want and f.value == want["value"] > 0
    assert f.report() == cli.text("fit", "--config", str(LLAMA), "--symbol", "batch", "--budget", "80GiB", "--seq", "4096", "--dtype", "bf16")
    s = memplan.fit(LLAMA, symbol="seq", budget=80 * 2**30, batch=1)
    assert s.symbol == "seq" and s.value and s.next is None or s.next["fits"] is False


def test_graph_fits_are_the_cli_s(cli) -> None:
    graph = TESTDATA / "pytorch" / "onnx" / "gpt2_dynamo18.onnx"
    f = memplan.fit(graph, symbol="batch", budget="1GiB", dims={"seq": 128})
    want = json.loads(cli.text("fit", str(graph), "--symbol", "batch", "--budget", "1GiB", "--dim", "seq=128", "--format", "json"))
    assert f.as_dict() == want
    assert f.plan is not None and f.plan.total_bytes == f.total_bytes <= f.budget_bytes
    assert memplan.check(f.plan).ok


def test_a_training_fit_is_the_cli_s(cli) -> None:
    graph = TESTDATA / "training" / "mlp" / "forward.onnx"
    sym = memplan.load(graph).symbols
    if not sym:
        pytest.skip("the MLP has no symbolic batch")
    f = memplan.fit(graph, symbol=sym[0], budget="16MiB", training="adamw", max=4096)
    want = json.loads(cli.text("fit", str(graph), "--symbol", sym[0], "--budget", "16MiB", "--training", "adamw", "--max", "4096", "--format", "json"))
    assert f.as_dict() == want


def test_nothing_fits_raises_with_the_result() -> None:
    with pytest.raises(memplan.DoesNotFitError) as e:
        memplan.fit(LLAMA, symbol="batch", budget="1GiB")
    assert e.value.result.value is None
    assert e.value.result.total_bytes > 2**30
    with pytest.raises(memplan.InputError, match="must be positive"):
        memplan.fit(LLAMA, symbol="batch", budget=0)
    with pytest.raises(memplan.InputError, match="cannot be negative"):
        memplan.fit(LLAMA, symbol="batch", budget="-1GiB")
    with pytest.raises(memplan.InputError, match="batch or seq"):
        memplan.fit(LLAMA, symbol="layers", budget="80GiB")


def test_serving_is_the_cli_s(cli) -> None:
    c = memplan.serving(LLAMA, budget="80GiB", seq=4096)
    args = ["fit", "--config", str(LLAMA), "--serving", "--budget", "80GiB", "--seq", "4096"]
    assert c.as_dict() == json.loads(cli.text(*args, "--format", "json"))
    assert c.report() == cli.text(*args)
    assert c.fits and c.kv_tokens > 0 and c.max_concurrent_seqs > 0
    tp = memplan.serving(CONFIGS / "llama-3.1-70b.json", budget="80GiB", tp=4, seq=8192, gpu_util=0.85, max_seqs=64)
    args = ["fit", "--config", str(CONFIGS / "llama-3.1-70b.json"), "--serving", "--budget", "80GiB", "--tp", "4", "--seq", "8192", "--gpu-util", "0.85", "--max-seqs", "64", "--format", "json"]
    assert tp.as_dict() == json.loads(cli.text(*args))
    with pytest.raises(memplan.DoesNotFitError) as e:
        memplan.serving(LLAMA, budget="8GiB")
    assert e.value.result.fits is False
    with pytest.raises(memplan.InputError, match="gpu_util"):
        memplan.serving(LLAMA, budget="80GiB", gpu_util=1.5)


# ---------------------------------------------------------------- solve


def _instance(n: int, seed: int = 7):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(seed)
    lower = rng.integers(0, 1000, n)
    upper = lower + rng.integers(1, 200, n)
    size = rng.integers(1, 1 << 16, n)
    return lower, upper, size


def test_solve_takes_numpy_and_gives_numpy(cli, tmp_path) -> None:
    np = pytest.importorskip("numpy")
    lower, upper, size = _instance(2000)
    # A node budget and a clock far above what it needs: the budget, not the clock, ends the
    # search, so the answer depends only on the input (debug builds on a slow CI machine ran
    # past the default 10 s safety net, and the two answers differed).
    s = memplan.solve(lower, upper, size, time_limit=3600.0, node_limit=20_000)
    assert isinstance(s.offsets, np.ndarray) and s.offsets.dtype == np.uint64 and len(s.offsets) == 2000
    assert s.arena_bytes >= s.lower_bound_bytes > 0
    # Independent check: buffers live at a common step never share bytes.
    ends = s.offsets + size
    assert int(ends.max()) <= s.arena_bytes
    for i in range(0, 2000, 37):
        live = (lower < upper[i]) & (lower[i] < upper)
        live[i] = False
        clash = live & (s.offsets < ends[i]) & (s.offsets[i] < ends)
        assert not clash.any()
    # The CLI on the same instance gives the same offsets.
    csv = tmp_path / "p.csv"
    csv.write_text("id,lower,upper,size\n" + "".join(f"{i},{lower[i]},{upper[i]},{size[i]}\n" for i in range(2000)))
    rows = cli.text("solve", str(csv), "--time-limit", "3600", "--node-limit", "20000").splitlines()[1:]
    assert [int(r.split(",")[-1]) for r in rows] == s.offsets.tolist()


def test_solve_takes_sequences_and_alignment() -> None:
    s = memplan.solve([0, 1, 2], [2, 3, 4], [4, 4, 4])
    assert list(s.offsets) == [0, 4, 0] and s.arena_bytes == 8 and s.proven_optimal
    a = memplan.solve([0, 0], [1, 1], [3, 3], alignment=[1, 16])
    assert a.offsets[1] % 16 == 0


def test_solve_refuses_bad_input() -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(memplan.InputError, match=r"`size`\[1\] is -4"):
        memplan.solve([0, 1], [2, 3], [4, -4])
    with pytest.raises(memplan.InputError, match="one value per buffer"):
        memplan.solve([0, 1], [2, 3], [4])
    with pytest.raises(memplan.InputError, match="one-dimensional"):
        memplan.solve(np.zeros((2, 2), dtype=int), [2, 3], [4, 4])
    with pytest.raises(memplan.OptionError, match="integers"):
        memplan.solve(np.array([0.5, 1.0]), [2, 3], [4, 4])
    with pytest.raises(memplan.OptionError):
        memplan.solve("012", [2, 3, 4], [4, 4, 4])
    with pytest.raises(memplan.InputError):
        memplan.solve([3], [1], [4])
    with pytest.raises(memplan.InputError, match="strategy"):
        memplan.solve([0], [1], [4], strategy="best")
    with pytest.raises(memplan.DoesNotFitError, match="capacity"):
        memplan.solve([0, 0], [1, 1], [8, 8], capacity=12)
    assert memplan.solve([0, 0], [1, 1], [8, 8], capacity=16).arena_bytes == 16


def test_parse_size() -> None:
    assert memplan.parse_size("24GiB") == 24 << 30
    assert memplan.parse_size("24GB") == 24 * 10**9
    assert memplan.parse_size(4096) == 4096
    with pytest.raises(memplan.InputError, match="ambiguous"):
        memplan.parse_size("24G")
    with pytest.raises(memplan.InputError, match="negative"):
        memplan.parse_size(-1)
