"""A third set of JAX programs (the issue 27 hardening): architectures and settings the first
two sets do not have. GQA and LLaMA-style decoders (RMSNorm, SwiGLU, rotary embeddings), an
encoder-decoder with cross-attention, ViT with patch embedding, MLP-Mixer, bottleneck ResNets
with batch norm, DenseNets with transitions, MobileNet-style depthwise convolutions, U-Nets
with additive and nested (U-Net++) skips, RNNs unrolled in Python (no scan), an unrolled
denoising loop, gradient accumulation over unrolled micro-batches, mixture-of-experts MLPs;
optimizers SGD, momentum and Adam; f32, bf16, f16 and mixed precision (f32 norms and
softmax, low-precision matmuls); with and without jax.checkpoint. Nothing here is tuned to
a result: sizes spread node counts from about 50 to over 10,000.
"""
import jax
import jax.numpy as jnp
from jax import lax

from models import (S, F32, tree_sds, sgd, adam, layernorm, conv, pool2, up2, make_tfm_fwd)

BF16, F16 = jnp.bfloat16, jnp.float16


def momentum(params, grads, vel, lr=1e-2, mu=0.9):
    vel = jax.tree_util.tree_map(lambda v, g: mu * v + g, vel, grads)
    return jax.tree_util.tree_map(lambda p, v: p - lr * v, params, vel), vel


def step_fn(loss, params, xs, opt):
    """A training step over `params` with inputs `xs` (a tuple): sgd, momentum or adam."""
    if opt == "sgd":
        def step(params, *xs):
            l, g = jax.value_and_grad(loss)(params, *xs)
            return sgd(params, g), l
        return step, (params,) + xs
    if opt == "momentum":
        def step(params, vel, *xs):
            l, g = jax.value_and_grad(loss)(params, *xs)
            p, v = momentum(params, g, vel)
            return p, v, l
        return step, (params, params) + xs

    def step(params, state, *xs):
        l, g = jax.value_and_grad(loss)(params, *xs)
        p, s = adam(params, g, state)
        return p, s, l
    return step, (params, (params, params)) + xs


def cast(tree, dtype):
    return jax.tree_util.tree_map(lambda a: a.astype(dtype), tree)


# ----------------------------------------------------------------------------- decoders
def rmsnorm(g, x, eps=1e-6):
    xf = x.astype(F32)
    y = xf * lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps)
    return (y * g.astype(F32)).astype(x.dtype)


def rope(x):
    B, H, T, Dh = x.shape
    half = Dh // 2
    freq = 1.0 / (10000 ** (jnp.arange(half, dtype=F32) / half))
    ang = jnp.arange(T, dtype=F32)[:, None] * freq[None, :]
    c, s = jnp.cos(ang).astype(x.dtype), jnp.sin(ang).astype(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def gqa_attention(p, x, H, KV, causal, use_rope, f32_softmax):
    B, T, D = x.shape
    Dh = D // H
    q = (x @ p["wq"]).reshape(B, T, H, Dh).transpose(0, 2, 1, 3)
    k = (x @ p["wk"]).reshape(B, T, KV, Dh).transpose(0, 2, 1, 3)
    v = (x @ p["wv"]).reshape(B, T, KV, Dh).transpose(0, 2, 1, 3)
    if use_rope:
        q, k = rope(q), rope(k)
    rep = H // KV
    k = jnp.repeat(k, rep, axis=1)
    v = jnp.repeat(v, rep, axis=1)
    s = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(Dh).astype(x.dtype)
    if causal:
        mask = jnp.tril(jnp.ones((T, T), bool))
        s = jnp.where(mask, s, jnp.asarray(-1e4, s.dtype))
    if f32_softmax:
        a = jax.nn.softmax(s.astype(F32), axis=-1).astype(x.dtype)
    else:
        a = jax.nn.softmax(s, axis=-1)
    o = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    return o @ p["wo"]


def llama_params(L, D, H, KV, F, V=None):
    Dh = D // H
    layers = [{"n1": (D,), "wq": (D, D), "wk": (D, KV * Dh), "wv": (D, KV * Dh),
               "wo": (D, D), "n2": (D,), "wg": (D, F), "wu": (D, F), "wd": (F, D)}
              for _ in range(L)]
    p = {"layers": layers, "nf": (D,)}
    if V:
        p["emb"] = (V, D)
        p["head"] = (D, V)
    return p


def llama_layer(p, x, H, KV, causal=True, use_rope=True, f32_softmax=True):
    x = x + gqa_attention(p, rmsnorm(p["n1"], x), H, KV, causal, use_rope, f32_softmax)
    h = rmsnorm(p["n2"], x)
    return x + (jax.nn.silu(h @ p["wg"]) * (h @ p["wu"])) @ p["wd"]


def make_llama_fwd(B, T, D, H, KV, L, dtype=F32):
    def build():
        def f(params, x):
            for p in params["layers"]:
                x = llama_layer(p, x, H, KV)
            return rmsnorm(params["nf"], x)
        return f, (tree_sds(llama_params(L, D, H, KV, 8 * D // 3 // 64 * 64), dtype),
                   S((B, T, D), dtype))
    return build


def make_llama_train(V, B, T, D, H, KV, L, compute=F32, opt="adam", remat=False):
    def build():
        lay = lambda p, x: llama_layer(p, x, H, KV)
        lay = jax.checkpoint(lay) if remat else lay

        def loss(params, tokens, targets):
            cp = cast(params, compute)
            x = cp["emb"][tokens]
            for p in cp["layers"]:
                x = lay(p, x)
            logits = (rmsnorm(cp["nf"], x) @ cp["head"]).astype(F32)
            lp = jax.nn.log_softmax(logits)
            return -jnp.mean(jnp.take_along_axis(lp, targets[..., None], axis=-1))
        params = tree_sds(llama_params(L, D, H, KV, 8 * D // 3 // 64 * 64, V))
        return step_fn(loss, params, (S((B, T), jnp.int32), S((B, T), jnp.int32)), opt)
    return build


def make_gqa_train(B, T, D, H, KV, L, compute=F32, opt="sgd"):
    """A pre-LN encoder with grouped-query attention, GELU MLP, MSE loss."""
    def build():
        def layer(p, x):
            x = x + gqa_attention(p, layernorm(p["ln1"], x), H, KV, False, False, False)
            h = jax.nn.gelu(layernorm(p["ln2"], x) @ p["w1"])
            return x + h @ p["w2"]

        def loss(params, x, y):
            cp = cast(params, compute)
            h = x.astype(compute)
            for p in cp:
                h = layer(p, h)
            return jnp.mean((h.astype(F32) - y) ** 2)
        Dh = D // H
        params = tree_sds([{"ln1": {"g": (D,), "b": (D,)}, "wq": (D, D), "wk": (D, KV * Dh),
                            "wv": (D, KV * Dh), "wo": (D, D),
                            "ln2": {"g": (D,), "b": (D,)}, "w1": (D, 4 * D), "w2": (4 * D, D)}
                           for _ in range(L)])
        return step_fn(loss, params, (S((B, T, D), F32), S((B, T, D), F32)), opt)
    return build


# ----------------------------------------------------------------------------- encoder-decoder
def mha(p, xq, xkv, H, causal):
    B, T, D = xq.shape
    Tk = xkv.shape[1]
    q = (xq @ p["wq"]).reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
    k = (xkv @ p["wk"]).reshape(B, Tk, H, D // H).transpose(0, 2, 1, 3)
    v = (xkv @ p["wv"]).reshape(B, Tk, H, D // H).transpose(0, 2, 1, 3)
    s = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(D // H).astype(xq.dtype)
    if causal:
        s = jnp.where(jnp.tril(jnp.ones((T, Tk), bool)), s, jnp.asarray(-1e4, s.dtype))
    a = jax.nn.softmax(s, axis=-1)
    return (a @ v).transpose(0, 2, 1, 3).reshape(B, T, D) @ p["wo"]


def make_encdec_train(B, Ts, Tt, D, H, Le, Ld, compute=F32, opt="adam"):
    def build():
        att = lambda: {"wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D)}
        ln = lambda: {"g": (D,), "b": (D,)}
        params = tree_sds({
            "enc": [{"ln1": ln(), "a": att(), "ln2": ln(), "w1": (D, 4 * D), "w2": (4 * D, D)}
                    for _ in range(Le)],
            "dec": [{"ln1": ln(), "a": att(), "lnx": ln(), "x": att(), "ln2": ln(),
                     "w1": (D, 4 * D), "w2": (4 * D, D)} for _ in range(Ld)]})

        def loss(params, src, tgt):
            cp = cast(params, compute)
            m = src.astype(compute)
            for p in cp["enc"]:
                m = m + mha(p["a"], layernorm(p["ln1"], m), layernorm(p["ln1"], m), H, False)
                m = m + jax.nn.relu(layernorm(p["ln2"], m) @ p["w1"]) @ p["w2"]
            y = tgt.astype(compute)
            for p in cp["dec"]:
                h = layernorm(p["ln1"], y)
                y = y + mha(p["a"], h, h, H, True)
                y = y + mha(p["x"], layernorm(p["lnx"], y), m, H, False)
                y = y + jax.nn.relu(layernorm(p["ln2"], y) @ p["w1"]) @ p["w2"]
            return jnp.mean((y.astype(F32) - tgt) ** 2)
        return step_fn(loss, params, (S((B, Ts, D), F32), S((B, Tt, D), F32)), opt)
    return build


# ----------------------------------------------------------------------------- ViT, Mixer
def make_vit_train(B, HW, P, D, H, L, classes, compute=F32, opt="momentum"):
    def build():
        N = (HW // P) ** 2
        params = tree_sds({
            "patch": (P * P * 3, D), "pos": (N, D),
            "layers": [{"ln1": {"g": (D,), "b": (D,)}, "wqkv": (D, 3 * D), "wo": (D, D),
                        "ln2": {"g": (D,), "b": (D,)}, "w1": (D, 4 * D), "b1": (4 * D,),
                        "w2": (4 * D, D), "b2": (D,)} for _ in range(L)],
            "lnf": {"g": (D,), "b": (D,)}, "head": (D, classes)})

        def loss(params, img, y):
            cp = cast(params, compute)
            x = img.astype(compute).reshape(B, HW // P, P, HW // P, P, 3)
            x = x.transpose(0, 1, 3, 2, 4, 5).reshape(B, N, P * P * 3)
            x = x @ cp["patch"] + cp["pos"]
            from models import attention
            for p in cp["layers"]:
                x = x + attention(p, layernorm(p["ln1"], x), H)
                x = x + jax.nn.gelu(layernorm(p["ln2"], x) @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
            logits = (jnp.mean(layernorm(cp["lnf"], x), 1) @ cp["head"]).astype(F32)
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, -1))
        return step_fn(loss, params, (S((B, HW, HW, 3), F32), S((B, classes), F32)), opt)
    return build


def mixer_params(L, N, C, DS, DC, P, classes):
    return {"patch": (P * P * 3, C),
            "layers": [{"ln1": {"g": (C,), "b": (C,)}, "t1": (N, DS), "t2": (DS, N),
                        "ln2": {"g": (C,), "b": (C,)}, "c1": (C, DC), "c2": (DC, C)}
                       for _ in range(L)],
            "head": (C, classes)}


def mixer_apply(p, img, P):
    B, HW = img.shape[0], img.shape[1]
    N = (HW // P) ** 2
    x = img.reshape(B, HW // P, P, HW // P, P, 3).transpose(0, 1, 3, 2, 4, 5)
    x = x.reshape(B, N, P * P * 3) @ p["patch"]
    for l in p["layers"]:
        y = layernorm(l["ln1"], x).transpose(0, 2, 1)
        x = x + (jax.nn.gelu(y @ l["t1"]) @ l["t2"]).transpose(0, 2, 1)
        x = x + jax.nn.gelu(layernorm(l["ln2"], x) @ l["c1"]) @ l["c2"]
    return jnp.mean(x, 1) @ p["head"]


def make_mixer_fwd(B, HW, P, C, L, dtype=F32):
    def build():
        N = (HW // P) ** 2
        return (lambda p, x: mixer_apply(p, x, P)), (
            tree_sds(mixer_params(L, N, C, C // 2, 4 * C, P, 1000), dtype),
            S((B, HW, HW, 3), dtype))
    return build


def make_mixer_train(B, HW, P, C, L, compute=F32, opt="adam"):
    def build():
        N = (HW // P) ** 2

        def loss(p, x, y):
            logits = mixer_apply(cast(p, compute), x.astype(compute), P).astype(F32)
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, -1))
        return step_fn(loss, tree_sds(mixer_params(L, N, C, C // 2, 4 * C, P, 100)),
                       (S((B, HW, HW, 3), F32), S((B, 100), F32)), opt)
    return build


# ----------------------------------------------------------------------------- CNNs
def batchnorm(p, x, eps=1e-5):
    m = jnp.mean(x, (0, 1, 2))
    v = jnp.mean((x - m) ** 2, (0, 1, 2))
    return (x - m) * lax.rsqrt(v + eps) * p["g"] + p["b"]


def conv_s(x, w, stride=1, groups=1):
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=groups)


def resnet_params(stages, width, expansion=4, classes=100):
    p = {"stem": {"w": (7, 7, 3, width), "bn": {"g": (width,), "b": (width,)}}, "stages": [],
         "fc": None}
    cin = width
    for i, n in enumerate(stages):
        mid = width * 2 ** i
        cout = mid * expansion
        blocks = []
        for j in range(n):
            b = {"w1": (1, 1, cin, mid), "bn1": {"g": (mid,), "b": (mid,)},
                 "w2": (3, 3, mid, mid), "bn2": {"g": (mid,), "b": (mid,)},
                 "w3": (1, 1, mid, cout), "bn3": {"g": (cout,), "b": (cout,)}}
            if j == 0:
                b["proj"] = (1, 1, cin, cout)
            blocks.append(b)
            cin = cout
        p["stages"].append(blocks)
    p["fc"] = (cin, classes)
    return p


def resnet_apply(p, x):
    x = jax.nn.relu(batchnorm(p["stem"]["bn"], conv_s(x, p["stem"]["w"], 2)))
    x = pool2(x)
    for i, blocks in enumerate(p["stages"]):
        for j, b in enumerate(blocks):
            stride = 2 if (j == 0 and i > 0) else 1
            h = jax.nn.relu(batchnorm(b["bn1"], conv_s(x, b["w1"])))
            h = jax.nn.relu(batchnorm(b["bn2"], conv_s(h, b["w2"], stride)))
            h = batchnorm(b["bn3"], conv_s(h, b["w3"]))
            sc = conv_s(x, b["proj"], stride) if "proj" in b else x
            x = jax.nn.relu(h + sc)
    return jnp.mean(x, (1, 2)) @ p["fc"]


def make_resnet_train(B, HW, stages, width, compute=F32, opt="momentum", remat=False):
    def build():
        def loss(p, x, y):
            f = jax.checkpoint(resnet_apply) if remat else resnet_apply
            logits = f(cast(p, compute), x.astype(compute)).astype(F32)
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, -1))
        return step_fn(loss, tree_sds(resnet_params(stages, width)),
                       (S((B, HW, HW, 3), F32), S((B, 100), F32)), opt)
    return build


def densenet_params(blocks, growth, c0=32, classes=10):
    p = {"stem": (3, 3, 3, c0), "blocks": [], "trans": []}
    c = c0
    for bi, n in enumerate(blocks):
        layers = []
        for _ in range(n):
            layers.append({"bn": {"g": (c,), "b": (c,)}, "w1": (1, 1, c, 4 * growth),
                           "w2": (3, 3, 4 * growth, growth)})
            c += growth
        p["blocks"].append(layers)
        if bi < len(blocks) - 1:
            p["trans"].append((1, 1, c, c // 2))
            c //= 2
    p["fc"] = (c, classes)
    return p


def densenet_apply(p, x):
    x = conv_s(x, p["stem"])
    for bi, layers in enumerate(p["blocks"]):
        for l in layers:
            h = jax.nn.relu(batchnorm(l["bn"], x))
            h = conv_s(jax.nn.relu(conv_s(h, l["w1"])), l["w2"])
            x = jnp.concatenate([x, h], -1)
        if bi < len(p["trans"]):
            x = pool2(conv_s(x, p["trans"][bi]))
    return jnp.mean(x, (1, 2)) @ p["fc"]


def make_densenet_train(B, HW, blocks, growth, compute=F32, opt="adam"):
    def build():
        def loss(p, x, y):
            logits = densenet_apply(cast(p, compute), x.astype(compute)).astype(F32)
            return jnp.mean((logits - y) ** 2)
        return step_fn(loss, tree_sds(densenet_params(blocks, growth)),
                       (S((B, HW, HW, 3), F32), S((B, 10), F32)), opt)
    return build


def make_densenet_fwd(B, HW, blocks, growth, dtype=F32):
    def build():
        return densenet_apply, (tree_sds(densenet_params(blocks, growth), dtype),
                                S((B, HW, HW, 3), dtype))
    return build


def mobilenet_params(cfg, c0=32, classes=100):
    p = {"stem": (3, 3, 3, c0), "blocks": []}
    c = c0
    for (t, cout, n, s) in cfg:
        for i in range(n):
            e = c * t
            p["blocks"].append({"exp": (1, 1, c, e), "dw": (3, 3, 1, e), "proj": (1, 1, e, cout),
                                "bn": {"g": (cout,), "b": (cout,)}})
            c = cout
    p["fc"] = (c, classes)
    return p


def mobilenet_apply(p, x, cfg):
    x = jax.nn.relu6(conv_s(x, p["stem"], 2))
    k = 0
    for (t, cout, n, s) in cfg:
        for i in range(n):
            b = p["blocks"][k]
            k += 1
            h = jax.nn.relu6(conv_s(x, b["exp"]))
            h = jax.nn.relu6(conv_s(h, b["dw"], s if i == 0 else 1, groups=h.shape[-1]))
            h = batchnorm(b["bn"], conv_s(h, b["proj"]))
            x = x + h if (i > 0) else h
    return jnp.mean(x, (1, 2)) @ p["fc"]


MBV2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
        (6, 160, 3, 2), (6, 320, 1, 1)]


def make_mobilenet_train(B, HW, compute=F32, opt="momentum"):
    def build():
        def loss(p, x, y):
            logits = mobilenet_apply(cast(p, compute), x.astype(compute), MBV2).astype(F32)
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, -1))
        return step_fn(loss, tree_sds(mobilenet_params(MBV2)),
                       (S((B, HW, HW, 3), F32), S((B, 100), F32)), opt)
    return build


# ----------------------------------------------------------------------------- U-Nets
def unet_add_params(c, cin=3, cout=3):
    """Additive skips, two convs a level, a residual conv inside each level."""
    p = {"enc": [], "dec": [], "out": (1, 1, c[0], cout)}
    prev = cin
    for ch in c:
        p["enc"].append({"w1": (3, 3, prev, ch), "w2": (3, 3, ch, ch), "w3": (3, 3, ch, ch)})
        prev = ch
    for i in range(len(c) - 1, 0, -1):
        p["dec"].append({"up": (1, 1, c[i], c[i - 1]), "w1": (3, 3, c[i - 1], c[i - 1]),
                         "w2": (3, 3, c[i - 1], c[i - 1])})
    return p


def unet_add_apply(p, x):
    skips = []
    for i, e in enumerate(p["enc"]):
        if i > 0:
            x = pool2(x)
        x = jax.nn.relu(conv(x, e["w1"]))
        h = jax.nn.relu(conv(x, e["w2"]))
        x = x + conv(h, e["w3"])
        skips.append(x)
    skips.pop()
    for d in p["dec"]:
        x = conv(up2(x), d["up"]) + skips.pop()
        x = jax.nn.relu(conv(x, d["w1"]))
        x = jax.nn.relu(conv(x, d["w2"]))
    return conv(x, p["out"])


def make_unet_add_train(c, B, HW, compute=F32, opt="adam", remat=False):
    def build():
        f = jax.checkpoint(unet_add_apply) if remat else unet_add_apply

        def loss(p, x, y):
            return jnp.mean((f(cast(p, compute), x.astype(compute)).astype(F32) - y) ** 2)
        return step_fn(loss, tree_sds(unet_add_params(c)),
                       (S((B, HW, HW, 3), F32), S((B, HW, HW, 3), F32)), opt)
    return build


def unetpp_params(c, cin=3):
    """U-Net++: node X[i][j] (level i, column j) convolves the concatenation of every
    X[i][0..j-1] and the upsampled X[i+1][j-1]."""
    L = len(c)
    p = {"x": {}, "out": (1, 1, c[0], 1)}
    for i in range(L):
        p["x"][f"{i}_0"] = (3, 3, cin if i == 0 else c[i - 1], c[i])
    for j in range(1, L):
        for i in range(L - j):
            p["x"][f"{i}_{j}"] = (3, 3, c[i] * j + c[i + 1], c[i])
    return p


def unetpp_apply(p, x, L):
    X = {}
    for i in range(L):
        if i > 0:
            x = pool2(X[(i - 1, 0)])
        X[(i, 0)] = jax.nn.relu(conv(x, p["x"][f"{i}_0"]))
    for j in range(1, L):
        for i in range(L - j):
            inp = [X[(i, k)] for k in range(j)] + [up2(X[(i + 1, j - 1)])]
            X[(i, j)] = jax.nn.relu(conv(jnp.concatenate(inp, -1), p["x"][f"{i}_{j}"]))
    return conv(X[(0, L - 1)], p["out"])


def make_unetpp_train(c, B, HW, compute=F32, opt="sgd"):
    def build():
        def loss(p, x, y):
            out = unetpp_apply(cast(p, compute), x.astype(compute), len(c)).astype(F32)
            return jnp.mean((out - y) ** 2)
        return step_fn(loss, tree_sds(unetpp_params(c)),
                       (S((B, HW, HW, 3), F32), S((B, HW, HW, 1), F32)), opt)
    return build


def make_unetpp_fwd(c, B, HW, dtype=F32):
    def build():
        return (lambda p, x: unetpp_apply(p, x, len(c))), (
            tree_sds(unetpp_params(c), dtype), S((B, HW, HW, 3), dtype))
    return build


def make_diffusion_loop(c, B, HW, steps, dtype=F32):
    """An unrolled denoising loop: `steps` applications of one additive-skip U-Net."""
    def build():
        def f(p, x):
            for t in range(steps):
                x = x - 0.1 * unet_add_apply(p, x)
            return x
        return f, (tree_sds(unet_add_params(c), dtype), S((B, HW, HW, 3), dtype))
    return build


# ----------------------------------------------------------------------------- RNN, MoE, accumulation
def make_lstm_train(B, T, D, L, compute=F32, opt="adam"):
    """A stacked LSTM unrolled over T steps in Python (no scan), sequence-to-sequence MSE."""
    def build():
        params = tree_sds([{"wx": (D, 4 * D), "wh": (D, 4 * D), "b": (4 * D,)}
                           for _ in range(L)])

        def loss(params, xs, ys):
            cp = cast(params, compute)
            hs = [xs[:, t].astype(compute) for t in range(T)]
            for p in cp:
                h = jnp.zeros((B, D), compute)
                c = jnp.zeros((B, D), compute)
                out = []
                for t in range(T):
                    z = hs[t] @ p["wx"] + h @ p["wh"] + p["b"]
                    i, f, g, o = jnp.split(z, 4, -1)
                    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                    h = jax.nn.sigmoid(o) * jnp.tanh(c)
                    out.append(h)
                hs = out
            return jnp.mean((jnp.stack(hs, 1).astype(F32) - ys) ** 2)
        return step_fn(loss, params, (S((B, T, D), F32), S((B, T, D), F32)), opt)
    return build


def make_moe_train(B, T, D, E, L, compute=F32, opt="adam"):
    """Encoder layers whose MLP is a dense mixture of E experts weighted by a softmax gate."""
    def build():
        params = tree_sds([{"ln1": {"g": (D,), "b": (D,)}, "wqkv": (D, 3 * D), "wo": (D, D),
                            "ln2": {"g": (D,), "b": (D,)}, "gate": (D, E),
                            "w1": (E, D, 2 * D), "w2": (E, 2 * D, D)} for _ in range(L)])
        from models import attention

        def loss(params, x, y):
            cp = cast(params, compute)
            h = x.astype(compute)
            for p in cp:
                h = h + attention(p, layernorm(p["ln1"], h), 8)
                z = layernorm(p["ln2"], h)
                g = jax.nn.softmax(z @ p["gate"], -1)
                e = jax.nn.gelu(jnp.einsum("btd,edf->ebtf", z, p["w1"]))
                e = jnp.einsum("ebtf,efd->ebtd", e, p["w2"])
                h = h + jnp.einsum("ebtd,bte->btd", e, g)
            return jnp.mean((h.astype(F32) - y) ** 2)
        return step_fn(loss, params, (S((B, T, D), F32), S((B, T, D), F32)), opt)
    return build


def make_accum_train(micro, B, T, D, H, L, compute=F32):
    """Gradient accumulation over `micro` unrolled micro-batches, then one momentum step."""
    def build():
        from models import tfm_params, tfm_apply

        def loss(params, x, y):
            h = tfm_apply(cast(params, compute), x.astype(compute), H)
            return jnp.mean((h.astype(F32) - y) ** 2)

        def step(params, vel, xs, ys):
            acc = jax.tree_util.tree_map(jnp.zeros_like, params)
            tot = 0.0
            for m in range(micro):
                l, g = jax.value_and_grad(loss)(params, xs[m], ys[m])
                acc = jax.tree_util.tree_map(jnp.add, acc, g)
                tot = tot + l
            p, v = momentum(params, acc, vel)
            return p, v, tot
        params = tree_sds(tfm_params(L, D, 4 * D))
        return step, (params, params, S((micro, B, T, D), F32), S((micro, B, T, D), F32))
    return build


def make_dense_skip_train(L, B, D, compute=F32, opt="sgd"):
    """An MLP whose layer i reads the sum of every earlier layer's output (dense skips)."""
    def build():
        params = tree_sds([{"w": (D, D), "b": (D,)} for _ in range(L)])

        def loss(params, x, y):
            cp = cast(params, compute)
            acts = [x.astype(compute)]
            for p in cp:
                s = acts[0]
                for a in acts[1:]:
                    s = s + a
                acts.append(jnp.tanh(s @ p["w"] + p["b"]))
            return jnp.mean((acts[-1].astype(F32) - y) ** 2)
        return step_fn(loss, params, (S((B, D), F32), S((B, D), F32)), opt)
    return build


HARDENING = {
    # decoders and encoders with GQA, rotary, RMSNorm, SwiGLU
    "llama_fwd_bf16": make_llama_fwd(B=2, T=512, D=1024, H=16, KV=4, L=8, dtype=BF16),
    "llama_fwd_f32": make_llama_fwd(B=4, T=256, D=512, H=8, KV=2, L=6),
    "llama_train_bf16_adam": make_llama_train(V=4096, B=4, T=256, D=512, H=8, KV=2, L=4,
                                              compute=BF16),
    "llama_train_f16_remat": make_llama_train(V=4096, B=2, T=512, D=640, H=10, KV=5, L=6,
                                              compute=F16, opt="momentum", remat=True),
    "llama_deep_train_bf16": make_llama_train(V=2048, B=2, T=128, D=256, H=4, KV=1, L=32,
                                              compute=BF16),
    "gqa_train_f32": make_gqa_train(B=8, T=128, D=384, H=6, KV=2, L=6),
    "gqa_train_bf16_adam": make_gqa_train(B=4, T=256, D=768, H=12, KV=4, L=4, compute=BF16,
                                          opt="adam"),
    "encdec_train_adam": make_encdec_train(B=4, Ts=256, Tt=128, D=512, H=8, Le=3, Ld=3),
    "encdec_train_bf16": make_encdec_train(B=4, Ts=384, Tt=192, D=384, H=6, Le=4, Ld=2,
                                           compute=BF16, opt="sgd"),
    "vit_train_momentum": make_vit_train(B=16, HW=64, P=8, D=384, H=6, L=6, classes=100),
    "vit_train_bf16_adam": make_vit_train(B=8, HW=128, P=16, D=512, H=8, L=8, classes=100,
                                          compute=BF16, opt="adam"),
    "mixer_fwd": make_mixer_fwd(B=16, HW=128, P=16, C=512, L=8),
    "mixer_train_adam": make_mixer_train(B=16, HW=64, P=8, C=256, L=8),
    "mixer_train_f16": make_mixer_train(B=8, HW=128, P=16, C=512, L=6, compute=F16,
                                        opt="sgd"),
    # CNNs
    "resnet_bottleneck_train": make_resnet_train(B=8, HW=128, stages=(2, 2, 2, 2), width=32),
    "resnet50_train_bf16": make_resnet_train(B=4, HW=128, stages=(3, 4, 6, 3), width=32,
                                             compute=BF16, opt="adam"),
    "resnet_train_remat": make_resnet_train(B=8, HW=96, stages=(2, 3, 2), width=32,
                                            remat=True, opt="sgd"),
    "densenet_train_adam": make_densenet_train(B=8, HW=64, blocks=(6, 12, 8), growth=12),
    "densenet_fwd_bf16": make_densenet_fwd(B=8, HW=96, blocks=(6, 12, 24, 16), growth=16,
                                           dtype=BF16),
    "mobilenet_train": make_mobilenet_train(B=16, HW=96),
    # U-Nets with many long skips
    "unet_add5_train_adam": make_unet_add_train((16, 32, 64, 128, 256), 4, 128),
    "unet_add6_train_remat": make_unet_add_train((8, 16, 32, 64, 128, 256), 2, 192,
                                                 remat=True, opt="sgd"),
    "unet_add4_train_bf16": make_unet_add_train((32, 64, 128, 256), 4, 96, compute=BF16,
                                                opt="momentum"),
    "unetpp4_train": make_unetpp_train((16, 32, 64, 128), 4, 96),
    "unetpp5_fwd_f16": make_unetpp_fwd((8, 16, 32, 64, 128), 4, 128, dtype=F16),
    "diffusion_loop_fwd": make_diffusion_loop((16, 32, 64), 2, 64, steps=8),
    # unrolled loops, MoE, accumulation, dense skips
    "lstm_train_adam": make_lstm_train(B=32, T=32, D=256, L=2),
    "lstm_train_bf16": make_lstm_train(B=16, T=64, D=384, L=3, compute=BF16, opt="sgd"),
    "moe_train_adam": make_moe_train(B=4, T=128, D=256, E=4, L=4),
    "accum4_train": make_accum_train(micro=4, B=2, T=128, D=384, H=6, L=4),
    "dense_skip_train": make_dense_skip_train(L=16, B=256, D=1024),
    # large: thousands of nodes
    "llama_xl_train_bf16_adam": make_llama_train(V=2048, B=1, T=128, D=256, H=4, KV=2, L=96,
                                                 compute=BF16),
}


# ----------------------------------------------------------------------------- second batch
def inception_params(c, nblocks, classes=100):
    p = {"stem": (3, 3, 3, c), "blocks": [], "fc": (4 * c, classes)}
    cin = c
    for _ in range(nblocks):
        p["blocks"].append({"b1": (1, 1, cin, c), "b3a": (1, 1, cin, c), "b3b": (3, 3, c, c),
                            "b5a": (1, 1, cin, c // 2), "b5b": (5, 5, c // 2, c),
                            "bp": (1, 1, cin, c)})
        cin = 4 * c
    return p


def inception_apply(p, x):
    x = jax.nn.relu(conv(x, p["stem"]))
    for i, b in enumerate(p["blocks"]):
        if i in (2, 4):
            x = pool2(x)
        y1 = jax.nn.relu(conv(x, b["b1"]))
        y3 = jax.nn.relu(conv(jax.nn.relu(conv(x, b["b3a"])), b["b3b"]))
        y5 = jax.nn.relu(conv(jax.nn.relu(conv(x, b["b5a"])), b["b5b"]))
        yp = jax.nn.relu(conv(lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1),
                                                (1, 1, 1, 1), "SAME"), b["bp"]))
        x = jnp.concatenate([y1, y3, y5, yp], -1)
    return jnp.mean(x, (1, 2)) @ p["fc"]


def make_inception_train(B, HW, c, nblocks, compute=F32, opt="momentum"):
    def build():
        def loss(p, x, y):
            logits = inception_apply(cast(p, compute), x.astype(compute)).astype(F32)
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, -1))
        return step_fn(loss, tree_sds(inception_params(c, nblocks)),
                       (S((B, HW, HW, 3), F32), S((B, 100), F32)), opt)
    return build


def make_hourglass_train(stacks, c, depth, B, HW, compute=F32, opt="adam"):
    """Stacked hourglasses: each a recursive U of `depth` levels with additive skips; every
    stack's output feeds the next and a per-stack loss (intermediate supervision)."""
    def build():
        def hg_params(d):
            q = {"skip": (3, 3, c, c), "down": (3, 3, c, c), "up": (3, 3, c, c)}
            if d > 1:
                q["inner"] = hg_params(d - 1)
            else:
                q["mid"] = (3, 3, c, c)
            return q

        def hg(q, x, d):
            s = jax.nn.relu(conv(x, q["skip"]))
            y = jax.nn.relu(conv(pool2(x), q["down"]))
            y = hg(q["inner"], y, d - 1) if d > 1 else jax.nn.relu(conv(y, q["mid"]))
            return s + up2(jax.nn.relu(conv(y, q["up"])))
        params = tree_sds({"stem": (3, 3, 3, c), "hg": [hg_params(depth) for _ in range(stacks)],
                           "head": [(1, 1, c, 4) for _ in range(stacks)]})

        def loss(p, x, y):
            cp = cast(p, compute)
            h = jax.nn.relu(conv(x.astype(compute), cp["stem"]))
            tot = 0.0
            for q, head in zip(cp["hg"], cp["head"]):
                h = h + hg(q, h, depth)
                tot = tot + jnp.mean((conv(h, head).astype(F32) - y) ** 2)
            return tot
        return step_fn(loss, params, (S((B, HW, HW, 3), F32), S((B, HW, HW, 4), F32)), opt)
    return build


def make_sd_unet_train(c, B, HW, T, D, compute=F32, opt="adam"):
    """A U-Net whose inner levels have a self-attention block and a cross-attention to a
    text context (Stable-Diffusion-like), concatenated skips."""
    def build():
        L = len(c)
        att = lambda ch: {"ln": {"g": (ch,), "b": (ch,)}, "wq": (ch, ch), "wk": (D, ch),
                          "wv": (D, ch), "wo": (ch, ch)}
        p = {"enc": [], "dec": [], "out": (1, 1, c[0], 3)}
        prev = 3
        for i, ch in enumerate(c):
            e = {"w1": (3, 3, prev, ch), "w2": (3, 3, ch, ch)}
            if i > 0:
                e["att"] = att(ch)
            p["enc"].append(e)
            prev = ch
        for i in range(L - 1, 0, -1):
            d = {"up": (1, 1, c[i], c[i - 1]), "w1": (3, 3, 2 * c[i - 1], c[i - 1])}
            if i - 1 > 0:
                d["att"] = att(c[i - 1])
            p["dec"].append(d)

        def xattn(a, x, ctx):
            Bx, H, W, C = x.shape
            h = layernorm(a["ln"], x.reshape(Bx, H * W, C))
            q, k, v = h @ a["wq"], ctx @ a["wk"], ctx @ a["wv"]
            s = jax.nn.softmax(q @ k.transpose(0, 2, 1) / jnp.sqrt(C).astype(x.dtype), -1)
            return x + ((s @ v) @ a["wo"]).reshape(Bx, H, W, C)

        def apply(p, x, ctx):
            skips = []
            for i, e in enumerate(p["enc"]):
                if i > 0:
                    x = pool2(x)
                x = jax.nn.silu(conv(x, e["w1"]))
                x = jax.nn.silu(conv(x, e["w2"]))
                if "att" in e:
                    x = xattn(e["att"], x, ctx)
                skips.append(x)
            skips.pop()
            for d in p["dec"]:
                x = conv(up2(x), d["up"])
                x = jax.nn.silu(conv(jnp.concatenate([x, skips.pop()], -1), d["w1"]))
                if "att" in d:
                    x = xattn(d["att"], x, ctx)
            return conv(x, p["out"])

        def loss(p, x, ctx, y):
            out = apply(cast(p, compute), x.astype(compute), ctx.astype(compute))
            return jnp.mean((out.astype(F32) - y) ** 2)
        return step_fn(loss, tree_sds(p), (S((B, HW, HW, 3), F32), S((B, T, D), F32),
                                           S((B, HW, HW, 3), F32)), opt)
    return build


def make_tfm_fwd_mixed(B, T, D, H, L, V=None):
    """Mixed precision forward: bf16 matmuls, f32 layer norms, softmax and residual stream;
    with V, a tied-embedding vocabulary head (the logits dominate)."""
    def build():
        from models import tfm_params

        def f(params, x):
            for p in params["layers"]:
                h = layernorm(p["ln1"], x).astype(BF16)
                Bq, Tq, Dq = x.shape
                qkv = h @ p["wqkv"].astype(BF16)
                q, k, v = jnp.split(qkv, 3, axis=-1)
                sh = lambda t: t.reshape(Bq, Tq, H, Dq // H).transpose(0, 2, 1, 3)
                q, k, v = sh(q), sh(k), sh(v)
                s = (q @ k.transpose(0, 1, 3, 2)).astype(F32) / jnp.sqrt(Dq // H)
                a = jax.nn.softmax(s, -1).astype(BF16)
                o = (a @ v).transpose(0, 2, 1, 3).reshape(Bq, Tq, Dq) @ p["wo"].astype(BF16)
                x = x + o.astype(F32)
                h = layernorm(p["ln2"], x).astype(BF16)
                h = jax.nn.gelu(h @ p["w1"].astype(BF16) + p["b1"].astype(BF16))
                x = x + (h @ p["w2"].astype(BF16)).astype(F32) + p["b2"]
            if V:
                return (x.astype(BF16) @ params["emb"].astype(BF16).T).astype(F32)
            return x
        params = {"layers": tfm_params(L, D, 4 * D)}
        if V:
            params["emb"] = (V, D)
        return f, (tree_sds(params), S((B, T, D), F32))
    return build


def make_tfm_train_policy(B, T, D, H, L, compute=F32, opt="adam", every=2):
    """Rematerialisation of blocks of `every` layers with a policy that saves the matmul
    outputs (jax.checkpoint_policies.dots_with_no_batch_dims_saveable)."""
    def build():
        from models import tfm_params, attention

        def layer(p, x):
            x = x + attention(p, layernorm(p["ln1"], x), H)
            h = jax.nn.gelu(layernorm(p["ln2"], x) @ p["w1"] + p["b1"])
            return x + h @ p["w2"] + p["b2"]

        def block(ps, x):
            for p in ps:
                x = layer(p, x)
            return x
        blk = jax.checkpoint(block,
                             policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)

        def loss(params, x, y):
            cp = cast(params, compute)
            h = x.astype(compute)
            for i in range(0, L, every):
                h = blk(cp[i:i + every], h)
            return jnp.mean((h.astype(F32) - y) ** 2)
        return step_fn(loss, tree_sds(tfm_params(L, D, 4 * D)),
                       (S((B, T, D), F32), S((B, T, D), F32)), opt)
    return build


def make_siamese_train(B, D, L, towers, compute=F32, opt="sgd"):
    """`towers` MLP towers with separate weights over separate inputs, joined by pairwise
    dot products: many independent branches, each of whose activations the join keeps."""
    def build():
        params = tree_sds([[{"w": (D, D), "b": (D,)} for _ in range(L)]
                           for _ in range(towers)])

        def loss(params, xs, y):
            cp = cast(params, compute)
            outs = []
            for t, tp in enumerate(cp):
                h = xs[t].astype(compute)
                for p in tp:
                    h = jax.nn.gelu(h @ p["w"] + p["b"])
                outs.append(h)
            s = 0.0
            for i in range(towers):
                for j in range(i + 1, towers):
                    s = s + jnp.sum(outs[i] * outs[j], -1).astype(F32)
            return jnp.mean((s - y) ** 2)
        return step_fn(loss, params, (S((towers, B, D), F32), S((B,), F32)), opt)
    return build


HARDENING.update({
    "inception_train": make_inception_train(B=16, HW=64, c=32, nblocks=6),
    "inception_train_bf16_adam": make_inception_train(B=8, HW=96, c=48, nblocks=6,
                                                      compute=BF16, opt="adam"),
    "hourglass2_train": make_hourglass_train(stacks=2, c=64, depth=4, B=4, HW=128),
    "hourglass4_train_f16": make_hourglass_train(stacks=4, c=32, depth=3, B=4, HW=96,
                                                 compute=F16, opt="sgd"),
    "sd_unet_train": make_sd_unet_train((32, 64, 128, 256), B=2, HW=64, T=77, D=256),
    "sd_unet_train_bf16": make_sd_unet_train((32, 64, 128), B=4, HW=64, T=64, D=384,
                                             compute=BF16, opt="momentum"),
    "tfm_mixed_fwd": make_tfm_fwd_mixed(B=4, T=512, D=512, H=8, L=6),
    "tfm_mixed_vocab_fwd": make_tfm_fwd_mixed(B=4, T=256, D=512, H=8, L=4, V=16384),
    "tfm_long_seq_fwd_bf16": make_tfm_fwd(B=1, T=2048, D=256, H=8, L=4, dtype=BF16),
    "tfm_policy_train_adam": make_tfm_train_policy(B=4, T=256, D=512, H=8, L=6),
    "tfm_policy_train_bf16": make_tfm_train_policy(B=2, T=512, D=768, H=12, L=8,
                                                   compute=BF16, opt="sgd", every=4),
    "siamese4_train": make_siamese_train(B=512, D=1024, L=4, towers=4),
    "siamese6_train_bf16": make_siamese_train(B=256, D=2048, L=3, towers=6, compute=BF16,
                                              opt="momentum"),
})


# ----------------------------------------------------------------------------- small CNN steps
HARDENING.update({
    "resnet_s_train_bf16_adam": make_resnet_train(B=4, HW=64, stages=(1, 2, 1), width=16,
                                                  compute=BF16, opt="adam"),
    "resnet_t_train_bf16_adam": make_resnet_train(B=2, HW=64, stages=(1, 1, 1, 1), width=16,
                                                  compute=BF16, opt="adam"),
    "resnet_s_train_f16_momentum": make_resnet_train(B=4, HW=64, stages=(2, 2), width=16,
                                                     compute=F16),
    "resnet_m_train_bf16_adam": make_resnet_train(B=4, HW=96, stages=(2, 3, 2), width=24,
                                                  compute=BF16, opt="adam"),
    "densenet_s_train_adam": make_densenet_train(B=4, HW=32, blocks=(4, 6), growth=12),
    "densenet_s_train_bf16": make_densenet_train(B=4, HW=48, blocks=(4, 4, 4), growth=8,
                                                 compute=BF16, opt="momentum"),
})
