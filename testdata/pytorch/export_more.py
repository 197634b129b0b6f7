#!/usr/bin/env python3
"""More exports of the kinds `export.py` makes, for trying memplan on models its tests did not
see: other decoder families (Phi-3, Gemma, Gemma-2, Mistral with a sliding window, GPT-NeoX,
Falcon, OPT, StarCoder2, OLMo-2, Qwen3), each also with a vocabulary of 1,024 at sequence 512
(`<name>_v1k`, where the layers and not the output layer make the peak); MoEs (Qwen2-MoE with
its shared expert, Qwen3-MoE, an 8-expert Mixtral, and transformers 5's own `batched_mm`
experts); KV-cache decoders (Mistral, and Gemma with one KV head), measured at past 0 and at
past 128 (`<name>_past`); other inputs (ids alone, ids with positions); bf16 and f16 weights;
encoders and encoder-decoders (DistilBERT, RoBERTa, DeBERTa-v2, T5, BART, CLIP text and
vision); vision models (Swin, ConvNeXt, torchvision's MobileNetV3, EfficientNet and DenseNet),
some also with dynamic height and width (`<name>_hw`); and wav2vec2 over raw audio of any
length.

Run by hand (not by CI), with the same packages as `export.py` plus torchvision:

    python testdata/pytorch/export_more.py export [OUT] [NAME...]   # OUT/<name>_<exporter>.onnx
    python testdata/pytorch/export_more.py measure [OUT] [NAME...]  # OUT/eager_peaks.csv
    python testdata/pytorch/export_more.py table OUT MEMPLAN        # arena against eager
    python testdata/pytorch/export_more.py vendor OUT NAME...       # into onnx/, eager_peaks.csv

OUT (a path with a `/`) defaults to /tmp/memplan-exports. Each model is exported as
`export.py` exports its models (dynamo at opsets 18 and 23, TorchScript at 17; batch, seq,
past, height, width and samples symbolic; weights as external data, deleted); an export the
exporter itself cannot make leaves `<name>_<exporter>.failed` with its error. `measure`
measures as `export.py measure` does, at the dims each model lists. `vendor` copies a model's
exports into `onnx/` and its peak into `eager_peaks.csv` (the vendored `gemma_kv`,
`mixtral_bmm`, `qwen2_moe`, `resnet50_hw`, `wav2vec2` and `swin` came this way; the
TorchScript export of `qwen2_moe` was left out for its size).
"""

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import warnings

import onnx
import torch
import transformers
from transformers import AutoModel, AutoModelForCausalLM, DynamicCache

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export as base  # noqa: E402  (the vendored script: helpers and modules)

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, SEQ = 1, 128
torch.manual_seed(0)
ids = lambda b, s: torch.randint(0, 1000, (b, s))
TOKENS = {0: "batch", 1: "seq"}


def causal(config, experts=None, dtype=None, attn="sdpa"):
    extra = {}
    if experts:
        extra["experts_implementation"] = experts
    m = AutoModelForCausalLM.from_config(config, attn_implementation=attn, **extra)
    if dtype is not None:
        m = m.to(dtype)
    return m


class CachedN(torch.nn.Module):
    """`export.Cached` for two layers, with any KV-head count (past keys and values in)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, past_key_0, past_value_0, past_key_1, past_value_1):
        past = (past_key_0, past_value_0, past_key_1, past_value_1)
        cache = DynamicCache()
        for i in range(2):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


class IdsOnly(torch.nn.Module):
    """A causal LM given token ids alone: no padding mask."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


class WithPositions(torch.nn.Module):
    """A causal LM given token ids, padding mask and position ids."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, use_cache=False).logits


class Seq2SeqDecoder(torch.nn.Module):
    """An encoder-decoder's decoder and output layer, given the encoder's states."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids, encoder_hidden_states):
        out = self.model(
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=torch.ones_like(decoder_input_ids),
            encoder_outputs=(encoder_hidden_states,),
            use_cache=False,
        )
        return out.logits


class Tensor0(torch.nn.Module):
    """A module whose output is a tuple or a tensor: the first tensor."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        out = self.model(x)
        if isinstance(out, torch.Tensor):
            return out
        return out[0]


def small(**kw):
    c = dict(vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
    c.update(kw)
    return c


def models(only):
    out = {}
    want = lambda n: not only or n in only

    def lm(name, make, seq=SEQ):
        if not want(name):
            return
        with_mask = lambda b, s: (ids(b, s), torch.ones(b, s, dtype=torch.int64))
        out[name] = (
            lambda: base.Logits(make()), with_mask(2, 16), ["input_ids", "attention_mask"],
            {"input_ids": TOKENS, "attention_mask": TOKENS}, ["logits"],
            lambda: with_mask(BATCH, seq), [f"batch={BATCH}", f"seq={seq}"],
        )

    T = transformers

    def lm2(name, config, kw, **how):
        """A decoder as configured, and `<name>_v1k` with a vocabulary of 1,024 at sequence
        512, where the layers, not the output layer, make the peak."""
        lm(name, lambda: causal(config(**kw), **how))
        small_vocab = dict(kw, vocab_size=1024)
        lm(name + "_v1k", lambda: causal(config(**small_vocab), **how), seq=512)

    lm2("phi3", T.Phi3Config, small(vocab_size=32064, tie_word_embeddings=False,
                                    pad_token_id=0))
    lm("gemma", lambda: causal(T.GemmaConfig(**small(num_key_value_heads=1, head_dim=64))))
    # Gemma-2 soft-caps its attention logits, which scaled_dot_product_attention cannot.
    lm2("gemma2", T.Gemma2Config, small(head_dim=64, sliding_window=64), attn="eager")
    lm2("mistral", T.MistralConfig, small(sliding_window=64, tie_word_embeddings=False))
    lm2("gpt_neox", T.GPTNeoXConfig, dict(
        vocab_size=32000, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=1024, rotary_pct=0.25, tie_word_embeddings=False))
    lm2("falcon", T.FalconConfig, dict(
        vocab_size=32000, hidden_size=256, num_hidden_layers=2, num_attention_heads=4))
    lm2("opt", T.OPTConfig, dict(
        vocab_size=32000, hidden_size=256, ffn_dim=1024, num_hidden_layers=2,
        num_attention_heads=4, word_embed_proj_dim=256, max_position_embeddings=2048))
    lm("starcoder2", lambda: causal(T.Starcoder2Config(**small(
        intermediate_size=1024, sliding_window=64))))
    lm("olmo2", lambda: causal(T.Olmo2Config(**small(tie_word_embeddings=False))))
    lm("qwen3", lambda: causal(T.Qwen3Config(**small(head_dim=64, tie_word_embeddings=True))))
    lm2("qwen2_moe", T.Qwen2MoeConfig, small(
        moe_intermediate_size=128, shared_expert_intermediate_size=256, num_experts=8,
        num_experts_per_tok=2, decoder_sparse_step=1, tie_word_embeddings=False),
        experts="static_loop")
    lm("qwen3_moe", lambda: causal(T.Qwen3MoeConfig(**small(
        head_dim=64, moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2,
        decoder_sparse_step=1, norm_topk_prob=True, tie_word_embeddings=False)),
        experts="static_loop"))
    lm("mixtral8", lambda: causal(T.MixtralConfig(**small(
        hidden_size=128, intermediate_size=256, num_local_experts=8, num_experts_per_tok=2,
        tie_word_embeddings=False)), experts="static_loop"))
    lm2("mixtral_bmm", T.MixtralConfig, small(
        intermediate_size=512, num_local_experts=4, num_experts_per_tok=2,
        tie_word_embeddings=False), experts="batched_mm")
    lm("llama_bf16", lambda: causal(base.llama_config(tie_word_embeddings=True),
                                    dtype=torch.bfloat16))
    lm("qwen2_f16", lambda: causal(T.Qwen2Config(**small(tie_word_embeddings=True)),
                                   dtype=torch.float16))

    # Other inputs than ids and mask: ids alone (the causal mask made in the graph, or
    # `is_causal`), and ids, mask and positions (as optimum's exports take them).
    if want("llama_ids"):
        out["llama_ids"] = (
            lambda: IdsOnly(causal(base.llama_config())), (ids(2, 16),), ["input_ids"],
            {"input_ids": TOKENS}, ["logits"], lambda: (ids(BATCH, SEQ),),
            [f"batch={BATCH}", f"seq={SEQ}"],
        )
    if want("qwen2_pos"):
        three = lambda b, s: (ids(b, s), torch.ones(b, s, dtype=torch.int64),
                              torch.arange(s).expand(b, s).contiguous())
        out["qwen2_pos"] = (
            lambda: WithPositions(causal(T.Qwen2Config(**small(tie_word_embeddings=True)))),
            three(2, 16), ["input_ids", "attention_mask", "position_ids"],
            {n: TOKENS for n in ["input_ids", "attention_mask", "position_ids"]}, ["logits"],
            lambda: three(BATCH, SEQ), [f"batch={BATCH}", f"seq={SEQ}"],
        )

    # KV-cache decoders: Mistral (4 KV heads) and Gemma (1 KV head, tied).
    def kv(name, make, kv_heads, head_dim):
        if not want(name):
            return
        past = lambda b, p: tuple(torch.randn(b, kv_heads, p, head_dim) for _ in range(4))
        names = ["input_ids"] + [f"past_{k}_{i}" for i in range(2) for k in ("key", "value")]
        axes = {"input_ids": TOKENS}
        for n in names[1:]:
            axes[n] = {0: "batch", 2: "past"}
        outs = ["logits"] + [f"present_{k}_{i}" for i in range(2) for k in ("key", "value")]
        out[name] = (
            lambda: CachedN(make()), (ids(2, 3),) + past(2, 5), names, axes, outs,
            lambda: (ids(BATCH, SEQ),) + past(BATCH, 0),
            [f"batch={BATCH}", f"seq={SEQ}", "past=0"],
        )
        out[name + "_past"] = (
            None, None, None, None, None,
            lambda: (ids(BATCH, 1),) + past(BATCH, SEQ),
            [f"batch={BATCH}", "seq=1", f"past={SEQ}"],
        )

    kv("mistral_kv", lambda: causal(T.MistralConfig(**small(
        num_key_value_heads=4, tie_word_embeddings=False))), 4, 64)
    kv("gemma_kv", lambda: causal(T.GemmaConfig(**small(num_key_value_heads=1, head_dim=64))),
       1, 64)

    # Encoders over token ids.
    def enc(name, make, key="input_ids", mask=False):
        if not want(name):
            return
        if mask:
            args = lambda b, s: (ids(b, s), torch.ones(b, s, dtype=torch.int64))
            names = ["input_ids", "attention_mask"]

            class M(torch.nn.Module):
                def __init__(self, m):
                    super().__init__()
                    self.model = m

                def forward(self, input_ids, attention_mask):
                    return self.model(input_ids=input_ids,
                                      attention_mask=attention_mask).last_hidden_state

            mk = lambda: M(make())
        else:
            args = lambda b, s: (ids(b, s),)
            names = ["input_ids"]
            mk = lambda: base.Encoder(make(), key)
        out[name] = (
            mk, args(2, 16), names, {n: TOKENS for n in names}, ["last_hidden_state"],
            lambda: args(BATCH, SEQ), [f"batch={BATCH}", f"seq={SEQ}"],
        )

    bertish = dict(vocab_size=30522, hidden_size=256, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=1024, max_position_embeddings=512)
    enc("distilbert", lambda: AutoModel.from_config(T.DistilBertConfig(
        vocab_size=30522, dim=256, n_layers=2, n_heads=4, hidden_dim=1024),
        attn_implementation="sdpa"), mask=True)
    enc("roberta", lambda: AutoModel.from_config(T.RobertaConfig(**bertish),
                                                 attn_implementation="sdpa",
                                                 add_pooling_layer=False), mask=True)
    enc("deberta_v2", lambda: AutoModel.from_config(T.DebertaV2Config(**bertish)), mask=True)
    enc("clip_text", lambda: T.CLIPTextModel(T.CLIPTextConfig(
        vocab_size=49408, hidden_size=256, intermediate_size=1024, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=512)))
    t5cfg = lambda: T.T5Config(vocab_size=32128, d_model=256, d_kv=64, d_ff=1024,
                               num_layers=2, num_decoder_layers=2, num_heads=4)
    enc("t5_encoder", lambda: T.T5EncoderModel(t5cfg()))
    bartcfg = lambda: T.BartConfig(vocab_size=32000, d_model=256, encoder_layers=2,
                                   decoder_layers=2, encoder_attention_heads=4,
                                   decoder_attention_heads=4, encoder_ffn_dim=1024,
                                   decoder_ffn_dim=1024, max_position_embeddings=1024)
    enc("bart_encoder", lambda: T.BartModel(bartcfg()).get_encoder())

    def dec(name, make, width):
        if not want(name):
            return
        states = lambda b: torch.randn(b, 64, width)
        out[name] = (
            lambda: Seq2SeqDecoder(make()), (ids(2, 16), states(2)),
            ["decoder_input_ids", "encoder_hidden_states"],
            {"decoder_input_ids": TOKENS, "encoder_hidden_states": {0: "batch", 1: "src"}},
            ["logits"], lambda: (ids(BATCH, SEQ), torch.randn(BATCH, SEQ, width)),
            [f"batch={BATCH}", f"seq={SEQ}", f"src={SEQ}"],
        )

    dec("t5_decoder", lambda: T.T5ForConditionalGeneration(t5cfg()), 256)
    dec("bart_decoder", lambda: T.BartForConditionalGeneration(bartcfg()), 256)

    # Vision.
    def vision(name, make, size=224):
        if not want(name):
            return
        pixels = lambda b: torch.randn(b, 3, size, size)
        out[name] = (
            lambda: Tensor0(make()), (pixels(2),), ["pixel_values"],
            {"pixel_values": {0: "batch"}}, ["output"], lambda: (pixels(BATCH),),
            [f"batch={BATCH}"],
        )

    class HF(torch.nn.Module):
        def __init__(self, m, logits=False):
            super().__init__()
            self.m = m
            self.logits = logits

        def forward(self, pixel_values):
            o = self.m(pixel_values=pixel_values)
            return o.logits if self.logits else o.last_hidden_state

    vision("clip_vision", lambda: HF(AutoModel.from_config(T.CLIPVisionConfig(
        hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4,
        image_size=224, patch_size=16), attn_implementation="sdpa")))
    # Two stages of two blocks (a window and a shifted one): the TorchScript exporter writes
    # each window padding as F.pad with pads computed from the shape.
    vision("swin", lambda: HF(T.SwinForImageClassification(T.SwinConfig(
        embed_dim=48, depths=[2, 2], num_heads=[3, 6])), logits=True))
    vision("convnext", lambda: HF(T.ConvNextForImageClassification(T.ConvNextConfig(
        hidden_sizes=[48, 96, 192, 384], depths=[2, 2, 4, 2])), logits=True))
    import torchvision
    vision("mobilenet_v3", lambda: torchvision.models.mobilenet_v3_small())
    vision("efficientnet", lambda: torchvision.models.efficientnet_b0())
    vision("densenet", lambda: torchvision.models.densenet121())

    # Dynamic height and width (as detection and segmentation exports have them): strided
    # windows over unknown dims. Measured at 224 x 224 and at 320 x 256.
    def vision_hw(name, make):
        if not want(name):
            return
        pixels = lambda b, h, w: torch.randn(b, 3, h, w)
        out[name] = (
            lambda: Tensor0(make()), (pixels(2, 224, 192),), ["pixel_values"],
            {"pixel_values": {0: "batch", 2: "height", 3: "width"}}, ["output"],
            lambda: (pixels(BATCH, 320, 256),),
            [f"batch={BATCH}", "height=320", "width=256"],
        )

    vision_hw("resnet50_hw", lambda: HF(transformers.ResNetForImageClassification(
        T.ResNetConfig(embedding_size=32, hidden_sizes=[64, 128, 256, 512],
                       depths=[3, 4, 6, 3], layer_type="bottleneck")), logits=True))
    vision_hw("mobilenet_v3_hw", lambda: torchvision.models.mobilenet_v3_small())
    vision_hw("efficientnet_hw", lambda: torchvision.models.efficientnet_b0())
    vision_hw("convnext_hw", lambda: HF(T.ConvNextForImageClassification(T.ConvNextConfig(
        hidden_sizes=[48, 96, 192, 384], depths=[2, 2, 4, 2])), logits=True))
    vision_hw("swin_hw", lambda: HF(T.SwinForImageClassification(T.SwinConfig(
        embed_dim=48, depths=[2, 2, 2, 2], num_heads=[3, 6, 12, 24])), logits=True))

    # Audio of any length: wav2vec2's convolutional feature encoder over raw samples.
    if want("wav2vec2"):
        samples = lambda b, n: torch.randn(b, n)
        out["wav2vec2"] = (
            lambda: base.Encoder(AutoModel.from_config(T.Wav2Vec2Config(
                hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=1024, conv_dim=(128,) * 7, num_conv_pos_embeddings=32,
                num_conv_pos_embedding_groups=4), attn_implementation="sdpa"), "input_values"),
            (samples(2, 16000),), ["input_values"], {"input_values": {0: "batch", 1: "samples"}},
            ["last_hidden_state"], lambda: (samples(BATCH, 32000),),
            [f"batch={BATCH}", "samples=32000"],
        )
    return out


def externalize(path):
    model = onnx.load(path)
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    d = os.path.dirname(path)
    data = os.path.basename(path) + ".data"
    for f in os.listdir(d):
        if f.endswith(".data"):
            os.remove(os.path.join(d, f))
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data, size_threshold=1024)
    os.remove(os.path.join(d, data))


# The smallest value of each dim the exporter may assume (a past may be empty; images and
# audio must cover the strided windows).
MIN_DIM = {"past": 0, "height": 32, "width": 32, "samples": 1024}


def dynamic_shapes(inputs, axes):
    """`export.dynamic_shapes`, with each dim's own least value."""
    dims = {}
    shapes = []
    for name in inputs:
        spec = {}
        for axis, label in axes.get(name, {}).items():
            if label not in dims:
                dims[label] = torch.export.Dim(label, min=MIN_DIM.get(label, 1), max=65536)
            spec[axis] = dims[label]
        shapes.append(spec)
    return tuple(shapes)


def export(out_dir, only):
    os.makedirs(out_dir, exist_ok=True)
    for name, (make, example, inputs, axes, outputs, _, _) in models(only).items():
        if make is None:
            continue
        try:
            module = make().eval()
        except Exception as e:  # noqa: BLE001
            print(f"  {name} not built: {type(e).__name__}: {str(e)[:500]}", file=sys.stderr)
            continue
        for exporter, options in base.EXPORTERS.items():
            path = os.path.join(out_dir, f"{name}_{exporter}.onnx")
            if os.path.exists(path):
                continue
            print(f"exporting {name} with {exporter}", file=sys.stderr, flush=True)
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
            except Exception as e:  # noqa: BLE001
                print(f"  failed: {type(e).__name__}: {str(e)[:2000]}", file=sys.stderr)
                if os.path.exists(path):
                    os.remove(path)
                with open(os.path.join(out_dir, f"{name}_{exporter}.failed"), "w") as f:
                    f.write(f"{type(e).__name__}: {e}\n")


def measure(out_dir, only):
    path = os.path.join(out_dir, "eager_peaks.csv")
    rows = {}
    if os.path.exists(path):
        with open(path) as f:
            rows = {r["model"]: (r["model"], r["dims"], int(r["eager_peak_bytes"]))
                    for r in csv.DictReader(f)}
    module = None
    for name, (make, _, _, _, _, make_inputs, dims) in models(only).items():
        try:
            if make is not None:
                module = make().eval()
            peak = base.eager_peak(module, make_inputs)
        except Exception as e:  # noqa: BLE001
            print(f"  {name} not measured: {type(e).__name__}: {str(e)[:500]}", file=sys.stderr)
            continue
        print(f"{name}: {peak} bytes", file=sys.stderr, flush=True)
        rows[name] = (name, " ".join(dims), peak)
        with open(path, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["model", "dims", "eager_peak_bytes"])
            w.writerows(sorted(rows.values()))


def table(out_dir, memplan):
    with open(os.path.join(out_dir, "eager_peaks.csv")) as f:
        peaks = {r["model"]: r for r in csv.DictReader(f)}
    print("| model | exporter | dims | arena | no-fold | flash | eager | arena/eager |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in peaks.items():
        base_name = name[: -len("_past")] if name.endswith("_past") else name
        for exporter in base.EXPORTERS:
            path = os.path.join(out_dir, f"{base_name}_{exporter}.onnx")
            if not os.path.exists(path):
                print(f"| {name} | {exporter} | | not exported | | | | |")
                continue
            arena, error = base.plan_arena(memplan, path, row["dims"])
            if error:
                print(f"| {name} | {exporter} | {row['dims']} | fails: {error} | | | | |")
                continue
            unfolded, _ = base.plan_arena(memplan, path, row["dims"], ["--no-fold-weights"])
            flash, _ = base.plan_arena(memplan, path, row["dims"], ["--attention", "flash"])
            eager = int(row["eager_peak_bytes"])
            same = lambda v: "same" if v == arena else (base.mib(v) if v is not None else "fails")
            print(f"| {name} | {exporter} | {row['dims']} | {base.mib(arena)} | {same(unfolded)} "
                  f"| {same(flash)} | {base.mib(eager)} | {arena / eager:.3f} |")


def vendor(out_dir, names):
    with open(os.path.join(out_dir, "eager_peaks.csv")) as f:
        peaks = {r["model"]: r for r in csv.DictReader(f)}
    for name in names:
        for exporter in base.EXPORTERS:
            src = os.path.join(out_dir, f"{name}_{exporter}.onnx")
            if os.path.exists(src):
                shutil.copy(src, os.path.join(base.OUT, os.path.basename(src)))
    with open(base.PEAKS) as f:
        rows = list(csv.reader(f))
    have = {r[0] for r in rows[1:]}
    for name in names:
        if name not in have:
            r = peaks[name]
            rows.append([name, r["dims"], r["eager_peak_bytes"]])
    with open(base.PEAKS, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "export"
    args = sys.argv[2:]
    out_dir = args.pop(0) if args and os.sep in args[0] else "/tmp/memplan-exports"
    if cmd == "export":
        export(out_dir, set(args))
    elif cmd == "measure":
        measure(out_dir, set(args))
    elif cmd == "table":
        table(out_dir, args[0])
    elif cmd == "vendor":
        vendor(out_dir, args)
    else:
        sys.exit(f"unknown command {cmd}: export, measure, table or vendor")
