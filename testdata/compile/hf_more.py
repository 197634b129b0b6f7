#!/usr/bin/env python3
"""More Hugging Face architectures for issue 42 (fourth session): Mistral, Qwen3 (q/k norm)
and Phi (partial rotary) causal LMs with their sdpa and eager attention, a T5 encoder
(relative position bias), Whisper's decoder (cross-attention), ConvNeXt (depthwise 7x7) and
a GroupNorm U-Net with spatial attention. Run by hand, with harness.py's environment:

    python testdata/compile/hf_more.py export OUT [NAME...]    # OUT/<name>_<exporter>.onnx
    python testdata/compile/hf_more.py measure OUT [NAME...]   # OUT/peaks.csv, as harness.py

The runs of 2026-11-28 are hf_more_peaks.csv: the fourth session's first four rows, then the
fifth session's T5 encoder, Whisper decoder, ConvNeXt and GroupNorm U-Net (the TorchScript
exporter cannot export the Whisper decoder: `aten::diff` at opset 17, in transformers'
masking utilities).
"""
import contextlib, csv, io, os, sys, warnings, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import transformers
import harness
from transformers import (AutoModelForCausalLM, MistralConfig, Qwen3Config, PhiConfig,
                          T5Config, T5EncoderModel, ConvNextConfig, ConvNextModel,
                          WhisperConfig, WhisperModel)

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
