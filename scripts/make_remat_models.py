#!/usr/bin/env python3
"""Makes the model fixtures of the rematerialization evaluation with jax (never a product
dependency).

    /work/oracle/venv/bin/python scripts/make_remat_models.py [LAYERS]

Writes testdata/models/transformer48_1dev.hlo: one SGD training step of a 48-layer
decoder-only transformer (pre-layernorm, 2-head causal self-attention, GELU MLP, tied
embedding-free: inputs are already embedded activations) on a single device, as jax lowers it
(before any XLA optimization), with metadata stripped. The layers are unrolled (a Python loop,
no scan), so the module is one flat entry computation of about 16k instructions whose
activations of the forward pass stay live until the backward pass uses them: the shape of
program rematerialization exists for. Dimensions are small (batch 2, sequence 16, model 32,
MLP 64) so the module runs in well under a second on the PJRT CPU plugin.

Also writes testdata/models/transformer2_1dev.hlo, the same step with 2 layers (about 800
instructions), small enough for XLA to compile in a few seconds in the PJRT equivalence test.
With LAYERS, writes only testdata/models/transformer<LAYERS>_1dev.hlo.
"""
import os
import re
import sys

import jax
import jax.numpy as jnp

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "models")

BATCH, SEQ, D, HEADS, MLP = 2, 16, 32, 2, 64


def layer_norm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b


def block(p, x):
    ln1_g, ln1_b, wqkv, wo, ln2_g, ln2_b, w1, b1, w2, b2 = p
    h = layer_norm(x, ln1_g, ln1_b)
    qkv = h @ wqkv  # [B, S, 3D]
    q, k, v = jnp.split(qkv, 3, axis=-1)
    hd = D // HEADS

    def heads(t):
        return t.reshape(BATCH, SEQ, HEADS, hd).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    s = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(jnp.float32(hd))
    mask = jnp.tril(jnp.ones((SEQ, SEQ), dtype=bool))
    s = jnp.where(mask, s, jnp.float32(-1e9))
    a = jax.nn.softmax(s, axis=-1)
    o = (a @ v).transpose(0, 2, 1, 3).reshape(BATCH, SEQ, D)
    x = x + o @ wo
    h = layer_norm(x, ln2_g, ln2_b)
    h = jax.nn.gelu(h @ w1 + b1)
    return x + h @ w2 + b2


def init_layer(key):
    ks = jax.random.split(key, 4)
    n = lambda k, shape: jax.random.normal(k, shape, jnp.float32) * 0.05
    return (
        jnp.ones((D,)), jnp.zeros((D,)), n(ks[0], (D, 3 * D)), n(ks[1], (D, D)),
        jnp.ones((D,)), jnp.zeros((D,)), n(ks[2], (D, MLP)), jnp.zeros((MLP,)),
        n(ks[3], (MLP, D)), jnp.zeros((D,)),
    )


def make(layers):
    def loss_fn(params, x, y):
        for p in params:
            x = block(p, x)
        return jnp.mean((x - y) ** 2)

    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        new = jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)
        return new, loss

    keys = jax.random.split(jax.random.PRNGKey(0), layers)
    params = [init_layer(k) for k in keys]
    spec = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    x = jax.ShapeDtypeStruct((BATCH, SEQ, D), jnp.float32)
    return jax.jit(train_step).lower(spec, x, x).as_text(dialect="hlo")


# `, metadata={...}` with quoted strings that may hold braces.
METADATA = re.compile(r',\s*metadata=\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}')


def main():
    for layers in [int(a) for a in sys.argv[1:]] or [48, 2]:
        text = METADATA.sub("", make(layers))
        os.makedirs(OUT, exist_ok=True)
        path = os.path.join(OUT, f"transformer{layers}_1dev.hlo")
        with open(path, "w") as f:
            f.write(text)
        count = sum(1 for line in text.splitlines() if " = " in line and not line.startswith("HloModule"))
        print(f"{path}: {count} instructions, {len(text)} bytes")


if __name__ == "__main__":
    main()
