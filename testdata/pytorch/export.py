#!/usr/bin/env python3
"""Exports small Hugging Face-style models with `torch.onnx.export`, and measures PyTorch's
eager activation peak, for memplan's tests and docs/MEASUREMENTS.md.

Run by hand (not by CI), from any directory, in a virtual environment of your own:

    python3 -m venv /tmp/export-venv
    /tmp/export-venv/bin/pip install torch transformers onnx onnxscript
    /tmp/export-venv/bin/python testdata/pytorch/export.py export      # writes onnx/*.onnx
    /tmp/export-venv/bin/python testdata/pytorch/export.py measure     # eager_peaks.csv
    /tmp/export-venv/bin/python testdata/pytorch/export.py table target/release/memplan

Every model is built with `from_config` from a small config written below (random weights, no
download), in f32, in eval mode. Each is exported three ways: the dynamo exporter at opset 18
(`<model>_dynamo18.onnx`) and at opset 23 (`<model>_dynamo23.onnx`, where scaled dot-product
attention becomes ONNX's fused `Attention`), and the TorchScript exporter (`dynamo=False`,
`<model>_torchscript.onnx`), with batch (and sequence, and past length) as symbolic dims.
Weights are saved as external data (every tensor of 1 KiB or more) and the data files are
deleted: memplan reads shapes and small constants only, and the graphs stay small. Shape
constants are below the threshold, so they stay in the file.

`measure` runs each model eagerly under `torch.profiler.profile(profile_memory=True)` at the
batch and sequence of MEASURE_AT and records the peak of the running sum of CPU allocation
events: the inputs are made inside the profiled region, the weights before it, so the peak is
the activations alone (inputs and outputs included, as in memplan's arena). `table` plans each
dynamo export with the memplan binary given, at the same batch and sequence, and prints the
markdown table of docs/MEASUREMENTS.md.

Versions used for the vendored files: torch 2.15.0, transformers 5.24.0, onnx 1.23.2,
onnxscript 0.7.2 (CPU, Linux x86-64).
"""

import contextlib
import csv
import io
import json
import os
import subprocess
import sys
import warnings

import onnx
import torch
import transformers
from transformers.integrations.moe import ExpertsInterface
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    BertConfig,
    DynamicCache,
    GPT2Config,
    LlamaConfig,
    MixtralConfig,
    Qwen2Config,
    ResNetConfig,
    ViTConfig,
    WhisperConfig,
    WhisperForConditionalGeneration,
)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "onnx")
PEAKS = os.path.join(HERE, "eager_peaks.csv")

# The batch and sequence the table compares at (the sequence is the past length's new tokens
# for the cached decoder, which is measured at past 0: a prefill).
BATCH, SEQ = 1, 128

torch.manual_seed(0)


def llama_config(**kw):
    c = dict(
        vocab_size=32000,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    )
    c.update(kw)
    return LlamaConfig(**c)


def static_loop_experts(self, hidden_states, top_k_index, top_k_weights):
    """Mixtral's experts as transformers 4 ran them and most Mixtral ONNX exports have them:
    a loop over every expert (so the exporters unroll it), each taking the tokens routed to
    it (`torch.where`: a count only the data decides)."""
    final = torch.zeros_like(hidden_states)
    mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts)
    mask = mask.permute(2, 1, 0)
    for e in range(self.num_experts):
        top_k_pos, token_idx = torch.where(mask[e])
        current = hidden_states[token_idx]
        gate, up = torch.nn.functional.linear(current, self.gate_up_proj[e]).chunk(2, dim=-1)
        h = torch.nn.functional.linear(self.act_fn(gate) * up, self.down_proj[e])
        h = h * top_k_weights[token_idx, top_k_pos, None]
        final.index_add_(0, token_idx, h.to(final.dtype))
    return final


ExpertsInterface.register("static_loop", static_loop_experts)


def causal(config):
    extra = {}
    if isinstance(config, MixtralConfig):
        extra["experts_implementation"] = "static_loop"
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", **extra)


class Logits(torch.nn.Module):
    """A causal LM returning only its logits (no cache), given token ids and their padding
    mask (as optimum's decoder exports take them)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).logits


class Cached(torch.nn.Module):
    """A causal LM with its KV cache as plain tensors: past keys and values in, the logits
    and the present keys and values out (what optimum's decoder-with-past exports do)."""

    def __init__(self, model, layers):
        super().__init__()
        self.model = model
        self.layers = layers

    def forward(self, input_ids, past_key_0, past_value_0, past_key_1, past_value_1):
        # Two layers, named one by one: the dynamo exporter matches dynamic shapes to named
        # arguments, not to `*args`.
        past = (past_key_0, past_value_0, past_key_1, past_value_1)
        cache = DynamicCache()
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


class Encoder(torch.nn.Module):
    """An encoder returning its last hidden state."""

    def __init__(self, model, key):
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, x):
        return self.model(**{self.key: x}).last_hidden_state


class WhisperDecoder(torch.nn.Module):
    """Whisper's decoder and its tied output projection, given the encoder's states."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids, encoder_hidden_states):
        # An all-ones padding mask made in the graph: without one, transformers looks for
        # packed sequences with `torch.diff`, which the TorchScript exporter cannot export.
        out = self.model(
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=torch.ones_like(decoder_input_ids),
            encoder_outputs=(encoder_hidden_states,),
            use_cache=False,
        )
        return out.logits


class Classifier(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).logits


def whisper_config():
    return WhisperConfig(
        vocab_size=51865,
        d_model=384,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=6,
        decoder_attention_heads=6,
        encoder_ffn_dim=1536,
        decoder_ffn_dim=1536,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=448,
        tie_word_embeddings=True,
    )


def models():
    """name -> (module, example inputs at export, input names, dynamic axes per input,
    output names, inputs at the measured batch and sequence, memplan --dim flags)."""
    out = {}
    ids = lambda b, s: torch.randint(0, 1000, (b, s))
    tokens = {0: "batch", 1: "seq"}

    def lm(name, config):
        m = Logits(causal(config))
        with_mask = lambda b, s: (ids(b, s), torch.ones(b, s, dtype=torch.int64))
        out[name] = (
            m,
            with_mask(2, 16),
            ["input_ids", "attention_mask"],
            {"input_ids": tokens, "attention_mask": tokens},
            ["logits"],
            lambda: with_mask(BATCH, SEQ),
            [f"batch={BATCH}", f"seq={SEQ}"],
        )

    lm("llama", llama_config())
    lm("qwen2", Qwen2Config(
        vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    ))
    lm("gpt2", GPT2Config(
        vocab_size=50257, n_positions=1024, n_embd=256, n_layer=2, n_head=4,
        tie_word_embeddings=True,
    ))
    lm("mixtral", MixtralConfig(
        vocab_size=32000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
        num_experts_per_tok=2, tie_word_embeddings=False,
    ))

    # Llama with its KV cache: 2 layers of past keys and values [batch, 2, past, 64].
    cfg = llama_config()
    layers, kv_heads, head_dim = 2, 2, 64
    past = lambda b, p: tuple(torch.randn(b, kv_heads, p, head_dim) for _ in range(2 * layers))
    names = ["input_ids"] + [f"past_{k}_{i}" for i in range(layers) for k in ("key", "value")]
    assert layers == 2, "Cached.forward names two layers' past keys and values"
    axes = {"input_ids": tokens}
    for n in names[1:]:
        axes[n] = {0: "batch", 2: "past"}
    out["llama_kv"] = (
        Cached(causal(cfg), layers),
        (ids(2, 3),) + past(2, 5),
        names,
        axes,
        ["logits"] + [f"present_{k}_{i}" for i in range(layers) for k in ("key", "value")],
        lambda: (ids(BATCH, SEQ),) + past(BATCH, 0),
        [f"batch={BATCH}", f"seq={SEQ}", "past=0"],
    )

    bert = AutoModel.from_config(BertConfig(
        vocab_size=30522, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=1024, max_position_embeddings=512,
    ), attn_implementation="sdpa", add_pooling_layer=False)
    out["bert"] = (
        Encoder(bert, "input_ids"), (ids(2, 16),), ["input_ids"], {"input_ids": tokens},
        ["last_hidden_state"], lambda: (ids(BATCH, SEQ),), [f"batch={BATCH}", f"seq={SEQ}"],
    )

    image = {0: "batch"}
    pixels = lambda b: torch.randn(b, 3, 224, 224)
    vit = AutoModel.from_config(ViTConfig(
        hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024,
        image_size=224, patch_size=16,
    ), attn_implementation="sdpa", add_pooling_layer=False)
    out["vit"] = (
        Encoder(vit, "pixel_values"), (pixels(2),), ["pixel_values"], {"pixel_values": image},
        ["last_hidden_state"], lambda: (pixels(BATCH),), [f"batch={BATCH}"],
    )

    resnet = transformers.ResNetForImageClassification(ResNetConfig(
        embedding_size=32, hidden_sizes=[64, 128, 256, 512], depths=[3, 4, 6, 3],
        layer_type="bottleneck", num_labels=1000,
    ))
    out["resnet50"] = (
        Classifier(resnet), (pixels(2),), ["pixel_values"], {"pixel_values": image},
        ["logits"], lambda: (pixels(BATCH),), [f"batch={BATCH}"],
    )

    whisper = WhisperForConditionalGeneration(whisper_config())
    whisper.config._attn_implementation = "sdpa"
    features = lambda b: torch.randn(b, 80, 3000)
    out["whisper_encoder"] = (
        Encoder(whisper.get_encoder(), "input_features"), (features(2),), ["input_features"],
        {"input_features": {0: "batch"}}, ["last_hidden_state"], lambda: (features(BATCH),),
        [f"batch={BATCH}"],
    )
    enc = lambda b: torch.randn(b, 1500, 384)
    out["whisper_decoder"] = (
        WhisperDecoder(whisper), (ids(2, 16), enc(2)),
        ["decoder_input_ids", "encoder_hidden_states"],
        {"decoder_input_ids": tokens, "encoder_hidden_states": {0: "batch"}}, ["logits"],
        lambda: (ids(BATCH, SEQ), enc(BATCH)), [f"batch={BATCH}", f"seq={SEQ}"],
    )
    for m in out.values():
        m[0].eval()
    return out


EXPORTERS = {
    "dynamo18": dict(dynamo=True, opset_version=18),
    "dynamo23": dict(dynamo=True, opset_version=23),
    "torchscript": dict(dynamo=False, opset_version=17),
}


def externalize(path):
    """Moves every tensor of 1 KiB or more to an external data file, then deletes that file:
    the vendored graph keeps shapes and small constants only."""
    model = onnx.load(path)
    # Node metadata (the exporter's stack traces and original names) is most of the file's
    # bytes and nothing memplan reads.
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    for f in os.listdir(OUT):
        if f.endswith(".data"):
            os.remove(os.path.join(OUT, f))
    data = os.path.basename(path) + ".data"
    onnx.save_model(
        model, path, save_as_external_data=True, all_tensors_to_one_file=True,
        location=data, size_threshold=1024,
    )
    os.remove(os.path.join(OUT, data))


def dynamic_shapes(inputs, axes):
    """The dynamo exporter's dynamic shapes from the TorchScript exporter's dynamic axes."""
    dims = {}
    shapes = []
    for name in inputs:
        spec = {}
        for axis, label in axes.get(name, {}).items():
            if label not in dims:
                # A past length may be 0 (the prefill); the exporter still needs an example
                # of 2 or more to keep it symbolic.
                dims[label] = torch.export.Dim(label, min=0 if label == "past" else 1, max=4096)
            spec[axis] = dims[label]
        shapes.append(spec)
    return tuple(shapes)


def export(only):
    os.makedirs(OUT, exist_ok=True)
    for name, (module, example, inputs, axes, outputs, _, _) in models().items():
        for exporter, options in EXPORTERS.items():
            if only and f"{name}_{exporter}" not in only and name not in only:
                continue
            path = os.path.join(OUT, f"{name}_{exporter}.onnx")
            print(f"exporting {name} with {exporter}", file=sys.stderr)
            kwargs = dict(input_names=inputs, output_names=outputs, **options)
            if options["dynamo"]:
                kwargs["dynamic_shapes"] = dynamic_shapes(inputs, axes)
                kwargs["external_data"] = True
            else:
                kwargs["dynamic_axes"] = axes
            try:
                with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(
                    io.StringIO()
                ):
                    warnings.simplefilter("ignore")
                    torch.onnx.export(module, example, path, **kwargs)
                externalize(path)
            except Exception as e:  # noqa: BLE001 - report and go on with the others
                print(f"  failed: {type(e).__name__}: {str(e)[:3000]}", file=sys.stderr)
                if os.path.exists(path):
                    os.remove(path)


def eager_peak(module, make_inputs):
    """The peak of the running sum of CPU allocation events of one forward pass."""
    with torch.no_grad():
        module(*make_inputs())  # warm up lazy state
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
        ) as prof:
            module(*make_inputs())
    # Kineto's raw events: one `[memory]` event per allocation (bytes > 0) and free (< 0).
    events = [
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    ]
    events.sort(key=lambda e: e[0])
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def measure(only):
    # Rows of models this script does not make (export_more.py's) are kept, in their place.
    rows = {}
    if os.path.exists(PEAKS):
        with open(PEAKS) as f:
            rows = {r["model"]: (r["model"], r["dims"], r["eager_peak_bytes"])
                    for r in csv.DictReader(f)}
    for name, (module, _, _, _, _, make_inputs, dims) in models().items():
        if only and name not in only:
            continue
        peak = eager_peak(module, make_inputs)
        print(f"{name}: {peak} bytes", file=sys.stderr)
        rows[name] = (name, " ".join(dims), peak)
    with open(PEAKS, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["model", "dims", "eager_peak_bytes"])
        w.writerows(rows.values())


def mib(b):
    return f"{b / 2**20:.2f}"


def plan_arena(memplan, path, dims, extra=()):
    """memplan's arena for one export, or the first words of its error."""
    args = [memplan, "plan", path, "--format", "json", "-q", "--bound", *extra]
    for d in dims.split():
        args += ["--dim", d]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        return None, run.stderr.strip()[:80]
    return json.loads(run.stdout)["arena_bytes"], None


def table(memplan):
    """The markdown table of docs/MEASUREMENTS.md: memplan's arena (as planned by default,
    with `--no-fold-weights`, with `--attention flash`) against PyTorch's eager peak."""
    with open(PEAKS) as f:
        peaks = {r["model"]: r for r in csv.DictReader(f)}
    print(
        "| model | exporter | memplan arena | `--no-fold-weights` | `--attention flash` "
        "| eager peak | arena / eager |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, row in peaks.items():
        for exporter in EXPORTERS:
            path = os.path.join(OUT, f"{name}_{exporter}.onnx")
            if not os.path.exists(path):
                continue
            arena, error = plan_arena(memplan, path, row["dims"])
            if error:
                print(f"| {name} | {exporter} | fails: {error} | | | | |")
                continue
            unfolded, _ = plan_arena(memplan, path, row["dims"], ["--no-fold-weights"])
            flash, _ = plan_arena(memplan, path, row["dims"], ["--attention", "flash"])
            eager = int(row["eager_peak_bytes"])
            same = lambda v: "same" if v == arena else (mib(v) if v is not None else "fails")
            print(
                f"| {name} | {exporter} | {mib(arena)} | {same(unfolded)} | {same(flash)} "
                f"| {mib(eager)} | {arena / eager:.3f} |"
            )


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "export"
    if cmd == "export":
        export(set(sys.argv[2:]))
    elif cmd == "measure":
        measure(set(sys.argv[2:]))
    elif cmd == "table":
        table(sys.argv[2])
    else:
        sys.exit(f"unknown command {cmd}: export, measure or table MEMPLAN")
