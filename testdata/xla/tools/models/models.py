"""JAX programs for the XLA-vs-memplan comparison. Pure jax.numpy / lax.

Each entry of MODELS maps a name to a function returning (fn, args) where args are
jax.ShapeDtypeStruct pytrees (nothing is ever executed: we only lower and compile).
"""
import jax
import jax.numpy as jnp
from jax import lax

S = jax.ShapeDtypeStruct
F32 = jnp.float32


def tree_sds(shapes, dtype=F32):
    return jax.tree_util.tree_map(lambda s: S(s, dtype), shapes,
                                  is_leaf=lambda x: isinstance(x, tuple))


def sgd(params, grads, lr=1e-3):
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


# ----------------------------------------------------------------------------- MLP
def mlp_params(dims):
    return [{"w": (a, b), "b": (b,)} for a, b in zip(dims[:-1], dims[1:])]


def mlp_apply(params, x):
    for i, p in enumerate(params):
        x = x @ p["w"] + p["b"]
        if i < len(params) - 1:
            x = jax.nn.relu(x)
    return x


MLP_DIMS = [1024, 4096, 4096, 4096, 4096, 1024]
MLP_B = 512


def mlp_fwd():
    params = tree_sds(mlp_params(MLP_DIMS))
    return mlp_apply, (params, S((MLP_B, MLP_DIMS[0]), F32))


def mlp_train():
    def loss(params, x, y):
        return jnp.mean((mlp_apply(params, x) - y) ** 2)

    def step(params, x, y):
        l, g = jax.value_and_grad(loss)(params, x, y)
        return sgd(params, g), l

    params = tree_sds(mlp_params(MLP_DIMS))
    return step, (params, S((MLP_B, MLP_DIMS[0]), F32), S((MLP_B, MLP_DIMS[-1]), F32))


# ----------------------------------------------------------------------------- CNN (ResNet-ish)
DN = ("NHWC", "HWIO", "NHWC")


def conv(x, w, stride=1):
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=DN)


def cnn_params(c0=64, c1=128, nb0=3, nb1=2, classes=100):
    p = {"stem": (3, 3, 3, c0), "blocks0": [], "down": (3, 3, c0, c1), "blocks1": [],
         "fc": (c1, classes)}
    for _ in range(nb0):
        p["blocks0"].append({"w1": (3, 3, c0, c0), "w2": (3, 3, c0, c0), "s": (c0,)})
    for _ in range(nb1):
        p["blocks1"].append({"w1": (3, 3, c1, c1), "w2": (3, 3, c1, c1), "s": (c1,)})
    return p


def res_block(p, x):
    h = jax.nn.relu(conv(x, p["w1"]))
    h = conv(h, p["w2"]) * p["s"]
    return jax.nn.relu(x + h)


def cnn_apply(p, x):
    x = jax.nn.relu(conv(x, p["stem"]))
    for b in p["blocks0"]:
        x = res_block(b, x)
    x = jax.nn.relu(conv(x, p["down"], 2))
    for b in p["blocks1"]:
        x = res_block(b, x)
    x = jnp.mean(x, axis=(1, 2))
    return x @ p["fc"]


CNN_B, CNN_HW = 16, 64


def cnn_fwd():
    return cnn_apply, (tree_sds(cnn_params()), S((CNN_B, CNN_HW, CNN_HW, 3), F32))


def cnn_train():
    def loss(p, x, y):
        logits = cnn_apply(p, x)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    def step(p, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y)
        return sgd(p, g), l

    return step, (tree_sds(cnn_params()), S((CNN_B, CNN_HW, CNN_HW, 3), F32),
                  S((CNN_B, 100), F32))


# ----------------------------------------------------------------------------- Transformer encoder
def tfm_params(L, D, F):
    return [{"ln1": {"g": (D,), "b": (D,)}, "wqkv": (D, 3 * D), "wo": (D, D),
             "ln2": {"g": (D,), "b": (D,)}, "w1": (D, F), "b1": (F,), "w2": (F, D),
             "b2": (D,)} for _ in range(L)]


def layernorm(p, x, eps=1e-5):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean((x - m) ** 2, -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + eps) * p["g"] + p["b"]


def attention(p, x, H):
    B, T, D = x.shape
    qkv = x @ p["wqkv"]
    q, k, v = jnp.split(qkv, 3, axis=-1)
    sh = lambda t: t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
    q, k, v = sh(q), sh(k), sh(v)
    s = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(D // H).astype(x.dtype)
    a = jax.nn.softmax(s, axis=-1)
    o = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    return o @ p["wo"]


def tfm_apply(params, x, H):
    for p in params:
        x = x + attention(p, layernorm(p["ln1"], x), H)
        h = jax.nn.gelu(layernorm(p["ln2"], x) @ p["w1"] + p["b1"])
        x = x + h @ p["w2"] + p["b2"]
    return x


def make_tfm_fwd(B, T, D, H, L, dtype=F32):
    def build():
        f = lambda params, x: tfm_apply(params, x, H)
        return f, (tree_sds(tfm_params(L, D, 4 * D), dtype), S((B, T, D), dtype))
    return build


def make_tfm_train(B, T, D, H, L):
    def build():
        def loss(params, x, y):
            return jnp.mean((tfm_apply(params, x, H) - y) ** 2)

        def step(params, x, y):
            l, g = jax.value_and_grad(loss)(params, x, y)
            return sgd(params, g), l
        return step, (tree_sds(tfm_params(L, D, 4 * D)), S((B, T, D), F32), S((B, T, D), F32))
    return build


# ----------------------------------------------------------------------------- U-Net
def unet_params(c=(32, 64, 128, 256), cin=3, cout=1):
    p = {"enc": [], "dec": [], "out": (1, 1, c[0], cout)}
    prev = cin
    for ch in c:
        p["enc"].append({"w1": (3, 3, prev, ch), "w2": (3, 3, ch, ch)})
        prev = ch
    for i in range(len(c) - 1, 0, -1):
        # upsample c[i] -> concat with skip c[i-1] -> 2 convs to c[i-1]
        p["dec"].append({"up": (1, 1, c[i], c[i - 1]),
                         "w1": (3, 3, 2 * c[i - 1], c[i - 1]),
                         "w2": (3, 3, c[i - 1], c[i - 1])})
    return p


def up2(x):
    return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


def pool2(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def unet_apply(p, x):
    skips = []
    for i, e in enumerate(p["enc"]):
        if i > 0:
            x = pool2(x)
        x = jax.nn.relu(conv(x, e["w1"]))
        x = jax.nn.relu(conv(x, e["w2"]))
        skips.append(x)
    skips.pop()
    for d in p["dec"]:
        x = conv(up2(x), d["up"])
        x = jnp.concatenate([x, skips.pop()], axis=-1)
        x = jax.nn.relu(conv(x, d["w1"]))
        x = jax.nn.relu(conv(x, d["w2"]))
    return conv(x, p["out"])


UNET_B, UNET_HW = 8, 128


def unet_fwd():
    return unet_apply, (tree_sds(unet_params()), S((UNET_B, UNET_HW, UNET_HW, 3), F32))


def unet_train():
    def loss(p, x, y):
        return jnp.mean((unet_apply(p, x) - y) ** 2)

    def step(p, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y)
        return sgd(p, g), l
    return step, (tree_sds(unet_params()), S((UNET_B, UNET_HW, UNET_HW, 3), F32),
                  S((UNET_B, UNET_HW, UNET_HW, 1), F32))


# ----------------------------------------------------------------------------- more programs
# Added for memplan issue 27: other sizes and dtypes, mixed precision, Adam, remat, deeper
# U-Nets and MLPs with many long skips. Nothing here is tuned to a result: sizes are chosen to
# spread node counts (100 to several thousand) and tensor sizes.
BF16 = jnp.bfloat16


def adam(params, grads, state, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    m, v = state
    m = jax.tree_util.tree_map(lambda a, g: b1 * a + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda a, g: b2 * a + (1 - b2) * g * g, v, grads)
    p = jax.tree_util.tree_map(lambda p, a, b: p - lr * a / (jnp.sqrt(b) + eps), params, m, v)
    return p, (m, v)


def train_step(loss, params, xs, opt):
    """A training step of `loss` over `params` with inputs `xs`: SGD, or Adam with its two
    moments as a second argument; returns (fn, args)."""
    if opt == "sgd":
        def step(params, x, y):
            l, g = jax.value_and_grad(loss)(params, x, y)
            return sgd(params, g), l
        return step, (params,) + xs

    def step(params, state, x, y):
        l, g = jax.value_and_grad(loss)(params, x, y)
        p, s = adam(params, g, state)
        return p, s, l
    return step, (params, (params, params)) + xs


def make_tfm_train2(B, T, D, H, L, compute=F32, opt="sgd", remat=False):
    """A transformer training step: f32 master parameters, the forward in `compute` dtype
    (bf16: every matmul gets converts around it), SGD or Adam, optionally rematerialised
    layers (jax.checkpoint)."""
    def build():
        def layer(p, x):
            x = x + attention(p, layernorm(p["ln1"], x), H)
            h = jax.nn.gelu(layernorm(p["ln2"], x) @ p["w1"] + p["b1"])
            return x + h @ p["w2"] + p["b2"]

        f = jax.checkpoint(layer) if remat else layer

        def loss(params, x, y):
            cp = jax.tree_util.tree_map(lambda a: a.astype(compute), params)
            h = x.astype(compute)
            for p in cp:
                h = f(p, h)
            return jnp.mean((h.astype(F32) - y) ** 2)

        return train_step(loss, tree_sds(tfm_params(L, D, 4 * D)),
                          (S((B, T, D), F32), S((B, T, D), F32)), opt)
    return build


def make_mlp_train(dims, B, opt="sgd", compute=F32):
    def build():
        def loss(params, x, y):
            cp = jax.tree_util.tree_map(lambda a: a.astype(compute), params)
            return jnp.mean((mlp_apply(cp, x.astype(compute)).astype(F32) - y) ** 2)

        return train_step(loss, tree_sds(mlp_params(dims)),
                          (S((B, dims[0]), F32), S((B, dims[-1]), F32)), opt)
    return build


def make_unet_train(c, B, HW, compute=F32):
    def build():
        def loss(p, x, y):
            cp = jax.tree_util.tree_map(lambda a: a.astype(compute), p)
            out = unet_apply(cp, x.astype(compute)).astype(F32)
            return jnp.mean((out - y) ** 2)

        def step(p, x, y):
            l, g = jax.value_and_grad(loss)(p, x, y)
            return sgd(p, g), l
        return step, (tree_sds(unet_params(c)), S((B, HW, HW, 3), F32), S((B, HW, HW, 1), F32))
    return build


def make_unet_fwd(c, B, HW, dtype=F32):
    def build():
        return unet_apply, (tree_sds(unet_params(c), dtype), S((B, HW, HW, 3), dtype))
    return build


def skip_params(L, D):
    return [{"w": (D, D), "b": (D,)} for _ in range(L)]


def skip_apply(params, x):
    """An MLP whose layer i adds the output of layer L-1-i (U-shaped long skips): the first
    half's activations stay live until the matching layer of the second half."""
    L = len(params)
    acts = []
    for i, p in enumerate(params):
        if i >= L // 2:
            x = x + acts[L - 1 - i]
        x = jnp.tanh(x @ p["w"] + p["b"])
        acts.append(x)
    return x


def make_skip_fwd(L, B, D, dtype=F32):
    def build():
        return skip_apply, (tree_sds(skip_params(L, D), dtype), S((B, D), dtype))
    return build


def make_skip_train(L, B, D, compute=F32):
    def build():
        def loss(params, x, y):
            cp = jax.tree_util.tree_map(lambda a: a.astype(compute), params)
            return jnp.mean((skip_apply(cp, x.astype(compute)).astype(F32) - y) ** 2)

        def step(params, x, y):
            l, g = jax.value_and_grad(loss)(params, x, y)
            return sgd(params, g), l
        return step, (tree_sds(skip_params(L, D)), S((B, D), F32), S((B, D), F32))
    return build


def make_cnn_train(B, HW, c0, c1, nb0, nb1):
    def build():
        def loss(p, x, y):
            logits = cnn_apply(p, x)
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

        def step(p, x, y):
            l, g = jax.value_and_grad(loss)(p, x, y)
            return sgd(p, g), l
        return step, (tree_sds(cnn_params(c0, c1, nb0, nb1)), S((B, HW, HW, 3), F32),
                      S((B, 100), F32))
    return build


MORE_MODELS = {
    # transformer forwards: sizes and dtypes
    "tfm_s_fwd_bf16": make_tfm_fwd(B=8, T=256, D=512, H=8, L=4, dtype=BF16),
    "tfm_m_fwd": make_tfm_fwd(B=4, T=512, D=768, H=12, L=6),
    "tfm_m_fwd_bf16": make_tfm_fwd(B=4, T=512, D=768, H=12, L=6, dtype=BF16),
    "tfm_long_fwd_bf16": make_tfm_fwd(B=2, T=1024, D=256, H=4, L=8, dtype=BF16),
    "tfm_l_fwd_bf16": make_tfm_fwd(B=2, T=512, D=1024, H=16, L=24, dtype=BF16),
    # transformer training steps
    "tfm_s_train_bf16": make_tfm_train2(B=8, T=256, D=512, H=8, L=4, compute=BF16),
    "tfm_m_train": make_tfm_train2(B=4, T=512, D=768, H=12, L=6),
    "tfm_m_train_adam": make_tfm_train2(B=4, T=512, D=768, H=12, L=6, opt="adam"),
    "tfm_m_train_bf16_adam": make_tfm_train2(B=4, T=512, D=768, H=12, L=6, compute=BF16,
                                             opt="adam"),
    "tfm_s_train_remat": make_tfm_train2(B=8, T=256, D=512, H=8, L=4, remat=True),
    "tfm_l_train_bf16": make_tfm_train2(B=2, T=512, D=1024, H=16, L=24, compute=BF16),
    # MLPs
    "mlp_deep_train_adam": make_mlp_train([512] + [2048] * 10 + [512], 256, opt="adam"),
    "mlp_train_bf16": make_mlp_train([1024, 4096, 4096, 4096, 4096, 1024], 512,
                                     compute=BF16),
    # CNNs and U-Nets (many long skips)
    "cnn_wide_train": make_cnn_train(B=8, HW=96, c0=48, c1=96, nb0=4, nb1=4),
    "unet5_train": make_unet_train((16, 32, 64, 128, 256), 4, 128),
    "unet5_train_bf16": make_unet_train((16, 32, 64, 128, 256), 4, 128, compute=BF16),
    "unet_fwd": make_unet_fwd((32, 64, 128, 256), 8, 128),
    "unet6_fwd_bf16": make_unet_fwd((16, 32, 64, 128, 256, 512), 4, 256, dtype=BF16),
    "skip_fwd": make_skip_fwd(L=24, B=256, D=2048),
    "skip_train": make_skip_train(L=24, B=256, D=2048),
    "skip_train_bf16": make_skip_train(L=16, B=512, D=1024, compute=BF16),
}


# ----------------------------------------------------------------------------- many long-lived skips
SKIP_L, SKIP_B, SKIP_D = 12, 256, 2048


MODELS = {
    "mlp_train": mlp_train,
    "cnn_train": cnn_train,
    "tfm_s_fwd": make_tfm_fwd(B=8, T=256, D=512, H=8, L=4),
    "tfm_s_train": make_tfm_train(B=8, T=256, D=512, H=8, L=4),
    "unet_train": unet_train,
    **MORE_MODELS,
}


# ----------------------------------------------------------------------------- decoders, f16, DenseNet-like
# Added for memplan issue 27 as a second set: a causal decoder with token embeddings and a
# cross-entropy loss (tied output head), f16, a DenseNet-like CNN (a Concat per layer), a
# deeper skip MLP, a 7-level U-Net and a rematerialised 12-layer encoder step.
F16 = jnp.float16


def make_gpt_train(V, B, T, D, H, L, compute=F32, opt="sgd"):
    def build():
        def causal_attention(p, x):
            Bq, Tq, Dq = x.shape
            qkv = x @ p["wqkv"]
            q, k, v = jnp.split(qkv, 3, axis=-1)
            sh = lambda t: t.reshape(Bq, Tq, H, Dq // H).transpose(0, 2, 1, 3)
            q, k, v = sh(q), sh(k), sh(v)
            s = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(Dq // H).astype(x.dtype)
            mask = jnp.tril(jnp.ones((Tq, Tq), bool))
            s = jnp.where(mask, s, jnp.asarray(-1e4, s.dtype))
            a = jax.nn.softmax(s, axis=-1)
            o = (a @ v).transpose(0, 2, 1, 3).reshape(Bq, Tq, Dq)
            return o @ p["wo"]

        def loss(params, tokens, targets):
            cp = jax.tree_util.tree_map(lambda a: a.astype(compute), params)
            x = cp["emb"][tokens]
            for p in cp["layers"]:
                x = x + causal_attention(p, layernorm(p["ln1"], x))
                h = jax.nn.gelu(layernorm(p["ln2"], x) @ p["w1"] + p["b1"])
                x = x + h @ p["w2"] + p["b2"]
            logits = (x @ cp["emb"].T).astype(F32)
            lp = jax.nn.log_softmax(logits)
            return -jnp.mean(jnp.take_along_axis(lp, targets[..., None], axis=-1))

        params = tree_sds({"emb": (V, D), "layers": tfm_params(L, D, 4 * D)})
        return train_step(loss, params, (S((B, T), jnp.int32), S((B, T), jnp.int32)), opt)
    return build


def make_dense_cnn_train(B, HW, growth, blocks):
    def build():
        def apply(p, x):
            x = jax.nn.relu(conv(x, p["stem"]))
            for w in p["layers"]:
                y = jax.nn.relu(conv(x, w))
                x = jnp.concatenate([x, y], axis=-1)
            return jnp.mean(x, axis=(1, 2)) @ p["fc"]
        c = 16
        layers = []
        for _ in range(blocks):
            layers.append((3, 3, c, growth)); c += growth
        p = tree_sds({"stem": (3, 3, 3, 16), "layers": layers, "fc": (c, 10)})

        def loss(p, x, y):
            return jnp.mean((apply(p, x) - y) ** 2)

        def step(p, x, y):
            l, g = jax.value_and_grad(loss)(p, x, y)
            return sgd(p, g), l
        return step, (p, S((B, HW, HW, 3), F32), S((B, 10), F32))
    return build


EVEN_MORE_MODELS = {
    "gpt_train": make_gpt_train(V=8192, B=4, T=256, D=512, H=8, L=4),
    "gpt_train_bf16_adam": make_gpt_train(V=8192, B=4, T=256, D=512, H=8, L=6, compute=BF16, opt="adam"),
    "tfm_fwd_f16": make_tfm_fwd(B=4, T=384, D=640, H=10, L=5, dtype=F16),
    "tfm_train_f16": make_tfm_train2(B=4, T=384, D=640, H=10, L=5, compute=F16),
    "unet7_fwd": make_unet_fwd((8, 16, 32, 64, 128, 256, 512), 2, 256),
    "unet4_train_wide": make_unet_train((24, 48, 96, 192), 6, 96),
    "dense_cnn_train": make_dense_cnn_train(8, 64, 12, 10),
    "skip_deep_fwd_bf16": make_skip_fwd(L=40, B=512, D=1024, dtype=BF16),
    "tfm_xl_train_bf16_remat": make_tfm_train2(B=2, T=256, D=768, H=12, L=12, compute=BF16, remat=True),
}
MODELS.update(EVEN_MORE_MODELS)


# ----------------------------------------------------------------------------- third set
# The issue 27 hardening (hardening.py): GQA and LLaMA-style decoders, an encoder-decoder,
# ViT, MLP-Mixer, bottleneck ResNets, DenseNets, MobileNet, Inception, stacked hourglasses,
# U-Nets with additive and nested skips, unrolled RNNs and loops, MoE, gradient accumulation;
# SGD, momentum and Adam; f32, bf16, f16 and mixed; with and without remat. Five are
# vendored in ../graphs; docs/MEASUREMENTS.md has the figures of all of them.
from hardening import HARDENING  # noqa: E402

MODELS.update(HARDENING)
