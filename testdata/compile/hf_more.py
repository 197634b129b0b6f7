#!/usr/bin/env python3
"""More Hugging Face architectures for issue 42 (fourth session): Mistral, Qwen3 (q/k norm)
and Phi (partial rotary) causal LMs with their sdpa and eager attention, a T5 encoder
(relative position bias), Whisper's decoder (cross-attention), ConvNeXt (depthwise 7x7) and
a GroupNorm U-Net with spatial attention; sixth session: a Llama decoder (GQA, rotary) with
a padding mask through sdpa and eager attention, a MobileNetV3-style CNN (depthwise
convolutions, hardswish, squeeze-excite), Swin (window attention, relative position bias,
shifted-window mask), RoBERTa and DistilBERT encoders through sdpa with padding, and a
Gemma 3 text decoder (sliding window on two of three layers) through sdpa with padding. Run
by hand, with harness.py's environment:

    python testdata/compile/hf_more.py export OUT [NAME...]    # OUT/<name>_<exporter>.onnx
    python testdata/compile/hf_more.py measure OUT [NAME...]   # OUT/peaks.csv, as harness.py

The runs of 2026-11-28 are hf_more_peaks.csv: the fourth session's first four rows, then the
fifth session's T5 encoder, Whisper decoder, ConvNeXt and GroupNorm U-Net (the TorchScript
exporter cannot export the Whisper decoder: `aten::diff` at opset 17, in transformers'
masking utilities); then the sixth session's seven rows (2026-11-28).
"""
import contextlib, csv, io, os, sys, warnings, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import transformers
import harness
from transformers import (AutoModelForCausalLM, MistralConfig, Qwen3Config, PhiConfig,
                          T5Config, T5EncoderModel, ConvNextConfig, ConvNextModel,
                          WhisperConfig, WhisperModel, LlamaConfig, SwinConfig, SwinModel,
                          RobertaConfig, RobertaModel, DistilBertConfig, DistilBertModel,
                          Gemma3TextConfig)

torch.manual_seed(0)
ids = lambda b, s: torch.randint(0, 1000, (b, s))
tokens = {0: "batch", 1: "seq"}

class Logits(torch.nn.Module):
    def __init__(s, m):
        super().__init__(); s.m = m
    def forward(s, input_ids, attention_mask):
        return s.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

class T5Enc(torch.nn.Module):
    def __init__(s, m):
        super().__init__(); s.m = m
    def forward(s, input_ids, attention_mask):
        return s.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

class WhisperDec(torch.nn.Module):
    """Whisper's decoder: causal self-attention and cross-attention over encoder states."""
    def __init__(s, m):
        super().__init__(); s.d = m.get_decoder()
    def forward(s, input_ids, encoder_hidden_states):
        return s.d(input_ids=input_ids, encoder_hidden_states=encoder_hidden_states,
                   use_cache=False).last_hidden_state

class ConvNext(torch.nn.Module):
    def __init__(s, m):
        super().__init__(); s.m = m
    def forward(s, pixel_values):
        return s.m(pixel_values=pixel_values).pooler_output

class ResBlock(torch.nn.Module):
    def __init__(s, c):
        super().__init__()
        s.n1 = torch.nn.GroupNorm(32, c); s.c1 = torch.nn.Conv2d(c, c, 3, padding=1)
        s.n2 = torch.nn.GroupNorm(32, c); s.c2 = torch.nn.Conv2d(c, c, 3, padding=1)
    def forward(s, x):
        h = s.c1(torch.nn.functional.silu(s.n1(x)))
        h = s.c2(torch.nn.functional.silu(s.n2(h)))
        return x + h

class AttnBlock(torch.nn.Module):
    """SD-style spatial self-attention: GroupNorm, q/k/v 1x1, sdpa over h*w tokens."""
    def __init__(s, c, heads=4):
        super().__init__()
        s.n = torch.nn.GroupNorm(32, c); s.qkv = torch.nn.Linear(c, 3 * c); s.o = torch.nn.Linear(c, c); s.h = heads
    def forward(s, x):
        b, c, hh, ww = x.shape
        t = s.n(x).flatten(2).transpose(1, 2)
        q, k, v = s.qkv(t).chunk(3, -1)
        sh = lambda z: z.view(b, hh * ww, s.h, c // s.h).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(sh(q), sh(k), sh(v))
        a = a.transpose(1, 2).reshape(b, hh * ww, c)
        return x + s.o(a).transpose(1, 2).reshape(b, c, hh, ww)

class GNUNet(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.inp = torch.nn.Conv2d(4, 64, 3, padding=1)
        s.r1 = ResBlock(64); s.a1 = AttnBlock(64); s.down = torch.nn.Conv2d(64, 128, 3, stride=2, padding=1)
        s.r2 = ResBlock(128); s.a2 = AttnBlock(128)
        s.up = torch.nn.ConvTranspose2d(128, 64, 2, stride=2); s.r3 = ResBlock(64)
        s.out = torch.nn.Conv2d(64, 4, 3, padding=1)
    def forward(s, x):
        h1 = s.a1(s.r1(s.inp(x)))
        h = s.a2(s.r2(s.down(h1)))
        return s.out(s.r3(s.up(h) + h1))

class SE(torch.nn.Module):
    """Squeeze-excite as MobileNetV3 has it: pool, 1x1 reduce, ReLU, 1x1 expand, hardsigmoid."""
    def __init__(s, c, r):
        super().__init__(); s.a = torch.nn.Conv2d(c, r, 1); s.b = torch.nn.Conv2d(r, c, 1)
    def forward(s, x):
        w = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        return x * torch.nn.functional.hardsigmoid(s.b(torch.relu(s.a(w))))

class Bneck(torch.nn.Module):
    """MobileNetV3's inverted residual: 1x1 expand, depthwise k x k, optional SE, 1x1 project
    (batch norms, hardswish or ReLU), residual when shapes agree."""
    def __init__(s, cin, exp, cout, k, se, hs, stride):
        super().__init__()
        act = torch.nn.Hardswish if hs else torch.nn.ReLU
        cbn = lambda i, o, kk, st=1, g=1: [torch.nn.Conv2d(i, o, kk, st, kk // 2, groups=g, bias=False), torch.nn.BatchNorm2d(o)]
        layers = [] if exp == cin else [*cbn(cin, exp, 1), act()]
        layers += [*cbn(exp, exp, k, stride, exp), act()]
        if se: layers.append(SE(exp, max(8, exp // 4)))
        layers += cbn(exp, cout, 1)
        s.f = torch.nn.Sequential(*layers); s.res = stride == 1 and cin == cout
    def forward(s, x):
        y = s.f(x)
        return x + y if s.res else y

class MobileNetV3(torch.nn.Module):
    """A small MobileNetV3 (torchvision's 'small' block table, narrowed): hardswish stem,
    depthwise blocks with squeeze-excite, 1x1 head, pooled features."""
    def __init__(s):
        super().__init__()
        cfg = [(16, 16, 16, 3, True, False, 2), (16, 72, 24, 3, False, False, 2), (24, 88, 24, 3, False, False, 1),
               (24, 96, 40, 5, True, True, 2), (40, 240, 40, 5, True, True, 1), (40, 120, 48, 5, True, True, 1),
               (48, 144, 48, 5, True, True, 1), (48, 288, 96, 5, True, True, 2), (96, 576, 96, 5, True, True, 1)]
        s.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, 2, 1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.Hardswish())
        s.blocks = torch.nn.Sequential(*[Bneck(*c) for c in cfg])
        s.head = torch.nn.Sequential(torch.nn.Conv2d(96, 576, 1, bias=False), torch.nn.BatchNorm2d(576), torch.nn.Hardswish())
    def forward(s, x):
        return torch.nn.functional.adaptive_avg_pool2d(s.head(s.blocks(s.stem(x))), 1).flatten(1)

class Pooled(torch.nn.Module):
    def __init__(s, m):
        super().__init__(); s.m = m
    def forward(s, pixel_values):
        return s.m(pixel_values=pixel_values).last_hidden_state

class Encoder(torch.nn.Module):
    def __init__(s, m):
        super().__init__(); s.m = m
    def forward(s, input_ids, attention_mask):
        return s.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

def padded(b, s, pad=64):
    """Token ids and a padding mask whose last row ends in `pad` padding tokens."""
    m = torch.ones(b, s, dtype=torch.int64)
    m[-1, s - pad:] = 0
    return ids(b, s), m

def lm(config, attn):
    return lambda: Logits(AutoModelForCausalLM.from_config(config, attn_implementation=attn))

lm_in = lambda b, s: (ids(b, s), torch.ones(b, s, dtype=torch.int64))
lm_axes = {"input_ids": tokens, "attention_mask": tokens}
small = dict(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=3,
             num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024)
MODELS = {}
for attn in ("sdpa", "eager"):
    MODELS[f"mistral_{attn}"] = (lm(MistralConfig(**small, sliding_window=None), attn), lambda: lm_in(1, 512),
                                 ["input_ids", "attention_mask"], lm_axes, ["batch=1", "seq=512"])
    MODELS[f"qwen3_{attn}"] = (lm(Qwen3Config(**small, head_dim=32), attn), lambda: lm_in(1, 512),
                               ["input_ids", "attention_mask"], lm_axes, ["batch=1", "seq=512"])
    MODELS[f"phi_{attn}"] = (lm(PhiConfig(vocab_size=1024, hidden_size=256, intermediate_size=1024,
                                          num_hidden_layers=3, num_attention_heads=8,
                                          max_position_embeddings=1024, partial_rotary_factor=0.5), attn),
                             lambda: lm_in(1, 512), ["input_ids", "attention_mask"], lm_axes,
                             ["batch=1", "seq=512"])
MODELS["t5_encoder"] = (lambda: T5Enc(T5EncoderModel(T5Config(vocab_size=1024, d_model=256, d_kv=32, d_ff=1024,
                                                              num_layers=3, num_heads=8))),
                        lambda: lm_in(2, 512), ["input_ids", "attention_mask"], lm_axes, ["batch=2", "seq=512"])
def whisper_dec():
    cfg = WhisperConfig(vocab_size=1024, d_model=384, encoder_layers=1, decoder_layers=2,
                        encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
                        decoder_ffn_dim=1536, num_mel_bins=80, max_source_positions=1500,
                        max_target_positions=448, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        decoder_start_token_id=1)
    cfg._attn_implementation = "sdpa"
    return WhisperDec(WhisperModel(cfg))
MODELS["whisper_decoder"] = (whisper_dec, lambda: (ids(2, 448), torch.randn(2, 1500, 384)),
                             ["input_ids", "encoder_hidden_states"],
                             {"input_ids": tokens, "encoder_hidden_states": {0: "batch"}}, ["batch=2", "seq=448"])
MODELS["convnext"] = (lambda: ConvNext(ConvNextModel(ConvNextConfig(hidden_sizes=[48, 96, 192, 384], depths=[2, 2, 2, 2]))),
                      lambda: (torch.randn(2, 3, 224, 224),), ["pixel_values"], {"pixel_values": {0: "batch"}}, ["batch=2"])
MODELS["gn_unet"] = (GNUNet, lambda: (torch.randn(2, 4, 64, 64),), ["sample"], {"sample": {0: "batch"}}, ["batch=2"])

llama = LlamaConfig(**small, head_dim=32)
for attn in ("sdpa", "eager"):
    MODELS[f"llama_{attn}"] = (lm(llama, attn), lambda: padded(2, 512), ["input_ids", "attention_mask"], lm_axes,
                               ["batch=2", "seq=512"])
gemma3 = Gemma3TextConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=3,
                          num_attention_heads=8, num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=32,
                          max_position_embeddings=1024, sliding_window=128,
                          layer_types=["sliding_attention", "sliding_attention", "full_attention"])
MODELS["gemma3_sdpa"] = (lm(gemma3, "sdpa"), lambda: padded(2, 512), ["input_ids", "attention_mask"], lm_axes,
                         ["batch=2", "seq=512"])
MODELS["mobilenetv3"] = (MobileNetV3, lambda: (torch.randn(2, 3, 224, 224),), ["pixel_values"],
                         {"pixel_values": {0: "batch"}}, ["batch=2"])
def swin():
    cfg = SwinConfig(image_size=224, embed_dim=48, depths=[2, 2, 2], num_heads=[3, 6, 12], window_size=7)
    cfg._attn_implementation = "eager"
    return Pooled(SwinModel(cfg, add_pooling_layer=False))
MODELS["swin"] = (swin, lambda: (torch.randn(2, 3, 224, 224),), ["pixel_values"], {"pixel_values": {0: "batch"}}, ["batch=2"])
def encoder(cls, cfg):
    cfg._attn_implementation = "sdpa"
    return lambda: Encoder(cls(cfg, add_pooling_layer=False) if cls is RobertaModel else cls(cfg))
MODELS["roberta_sdpa"] = (encoder(RobertaModel, RobertaConfig(vocab_size=1024, hidden_size=256, num_hidden_layers=3,
                                                               num_attention_heads=8, intermediate_size=1024,
                                                               max_position_embeddings=1026)),
                          lambda: padded(2, 512), ["input_ids", "attention_mask"], lm_axes, ["batch=2", "seq=512"])
MODELS["distilbert_sdpa"] = (encoder(DistilBertModel, DistilBertConfig(vocab_size=1024, dim=256, n_layers=3, n_heads=8,
                                                                       hidden_dim=1024, max_position_embeddings=512)),
                             lambda: padded(2, 512), ["input_ids", "attention_mask"], lm_axes, ["batch=2", "seq=512"])

def export_one(m, name, mk, names, axes, out):
    for exporter, options in harness.EXPORTERS.items():
        path = os.path.join(out, f"{name}_{exporter}.onnx")
        kw = dict(input_names=names, **options)
        ex = tuple(torch.cat([t, t]) if n in axes and 0 in axes[n] and t.shape[0] == 1 else t for n, t in zip(names, mk()))
        if options["dynamo"]:
            ds = {}; shapes = []
            for nm in names:
                spec = {}
                for a, label in axes.get(nm, {}).items():
                    ds.setdefault(label, torch.export.Dim(label, min=2, max=1024)); spec[a] = ds[label]
                shapes.append(spec)
            kw["dynamic_shapes"] = tuple(shapes); kw["external_data"] = True
        else:
            kw["dynamic_axes"] = axes
        t0 = time.time()
        try:
            with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                torch.onnx.export(m, ex, path, **kw)
            harness.strip(path)
            print(name, exporter, "ok", f"{time.time()-t0:.0f}s", file=sys.stderr, flush=True)
        except Exception as e:
            print(name, exporter, "failed", str(e)[:300], file=sys.stderr, flush=True)

if __name__ == "__main__":
    cmd, out = sys.argv[1], sys.argv[2]
    only = set(sys.argv[3:])
    os.makedirs(out, exist_ok=True)
    peaks = os.path.join(out, "peaks.csv")
    rows = {}
    if os.path.exists(peaks):
        with open(peaks) as f: rows = {r["model"]: r for r in csv.DictReader(f)}
    for name, (make, mk, names, axes, dims) in MODELS.items():
        if only and name not in only: continue
        m = make().eval()
        if cmd == "export":
            export_one(m, name, mk, names, axes, out); continue
        t0 = time.time()
        row = {"model": name, "dims": " ".join(dims), "eager": harness.peak_of(m, mk)}
        import torch._inductor.config as ind
        for key, frz in (("compile", False), ("compile_frozen", True)):
            torch._dynamo.reset(); ind.freezing = frz
            try:
                row[key] = harness.peak_of(torch.compile(m), mk)
            except Exception as e:
                print(name, key, "failed", str(e)[:300], file=sys.stderr, flush=True); row[key] = ""
        ind.freezing = False; torch._dynamo.reset()
        print(row, f"{time.time()-t0:.0f}s", file=sys.stderr, flush=True)
        rows[name] = row
        with open(peaks, "w") as f:
            w = csv.DictWriter(f, ["model", "dims", "eager", "compile", "compile_frozen"], lineterminator="\n")
            w.writeheader(); [w.writerow(r) for r in rows.values()]
