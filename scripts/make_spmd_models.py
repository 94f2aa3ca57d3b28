#!/usr/bin/env python3
"""Real-model fixtures for sharding propagation: XLA's module right before and right after its
`sharding-propagation` pass.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 /work/oracle/venv/bin/python \
        scripts/make_spmd_models.py [NAME...] [--time]

Writes testdata/models/<name>.before-propagation.hlo and <name>.after-propagation.hlo for each
model below (with names, only those). All run on a 2x4 mesh ("data", "model") of CPU devices
with XLA's own propagation (Shardy off). The user annotations are the jit in_shardings plus a
few with_sharding_constraint calls; everything else is left to propagation. Metadata is not
dumped (xla_dump_disable_metadata) to keep the files small. The files are XLA's own printing
of the dumped HloModuleProto (see module_text).

Models:
  mlp               2-layer MLP training step (value_and_grad + SGD update)
  transformer_block one pre-LN transformer block, training step: Megatron-style weights
                    (q/k/v/ff-in split on "model" by columns, out/ff-out by rows), batch on "data"
  convnet           two convolutions + pooling + dense head, training step, batch on "data"
  embedding         lookup in a vocab-sharded table (rows split on "model"), training step
                    (so the gradient is a scatter-add into the sharded table)
  transformer4      the same with 4 blocks: the depth the tests execute in CI (the 48-block
                    module takes the plugin too long to compile for every CI run)
  transformer48     48 unrolled transformer blocks, training step, for the benchmark
                    (about 17k instructions)

With --time, also compiles transformer48 again with TF_CPP_VMODULE=hlo_pass_pipeline=1 in a
child process and prints XLA's `sharding-propagation` times from its log.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.config.update("jax_use_shardy_partitioner", False)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "models")
f32 = jnp.float32


def mesh():
    return Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))


def sgd(params, grads, lr=0.01):
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


# ---------------------------------------------------------------- models


def mlp(m):
    def step(params, x, y):
        def loss_fn(p):
            h = jax.nn.relu(x @ p["w1"] + p["b1"])
            h = jax.lax.with_sharding_constraint(h, NamedSharding(m, P("data", "model")))
            out = h @ p["w2"] + p["b2"]
            return jnp.mean((out - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return sgd(params, grads), loss

    params = {
        "w1": ((64, 256), P(None, "model")),
        "b1": ((256,), P("model")),
        "w2": ((256, 32), P("model", None)),
        "b2": ((32,), P()),
    }
    args = (params, ((16, 64), P("data", None)), ((16, 32), P("data", None)))
    return step, args


def layer_norm(x, scale):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * scale


def block(p, x, m, heads):
    b, s, d = x.shape
    hd = d // heads
    h = layer_norm(x, p["ln1"])
    q = (h @ p["wq"]).reshape(b, s, heads, hd)
    k = (h @ p["wk"]).reshape(b, s, heads, hd)
    v = (h @ p["wv"]).reshape(b, s, heads, hd)
    att = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd).astype(np.float32)
    mask = jnp.tril(jnp.ones((s, s), dtype=bool))
    att = jnp.where(mask, att, -1e9)
    att = jax.nn.softmax(att, axis=-1)
    o = jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, s, d)
    x = x + o @ p["wo"]
    x = jax.lax.with_sharding_constraint(x, NamedSharding(m, P("data", None, None)))
    h = layer_norm(x, p["ln2"])
    h = jax.nn.gelu(h @ p["w1"] + p["b1"])
    return x + h @ p["w2"]


def block_params(d, ff):
    return {
        "ln1": ((d,), P()),
        "wq": ((d, d), P(None, "model")),
        "wk": ((d, d), P(None, "model")),
        "wv": ((d, d), P(None, "model")),
        "wo": ((d, d), P("model", None)),
        "ln2": ((d,), P()),
        "w1": ((d, ff), P(None, "model")),
        "b1": ((ff,), P("model")),
        "w2": ((ff, d), P("model", None)),
    }


def transformer(m, layers, b=8, s=16, d=64, ff=256, heads=4):
    def step(params, x, y):
        def loss_fn(ps):
            h = x
            for p in ps:
                h = block(p, h, m, heads)
            return jnp.mean((h - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return sgd(params, grads), loss

    params = [block_params(d, ff) for _ in range(layers)]
    args = (params, ((b, s, d), P("data", None, None)), ((b, s, d), P("data", None, None)))
    return step, args


def convnet(m):
    dn = ("NHWC", "HWIO", "NHWC")

    def step(params, x, y):
        def loss_fn(p):
            h = jax.lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME", dimension_numbers=dn)
            h = jax.nn.relu(h + p["cb1"])
            h = jax.lax.reduce_window(h, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0
            h = jax.lax.conv_general_dilated(h, p["c2"], (1, 1), "SAME", dimension_numbers=dn)
            h = jax.nn.relu(h + p["cb2"])
            h = jax.lax.with_sharding_constraint(h, NamedSharding(m, P("data", None, None, "model")))
            h = jnp.mean(h, axis=(1, 2))
            logits = h @ p["w"]
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return sgd(params, grads), loss

    params = {
        "c1": ((3, 3, 3, 16), P()),
        "cb1": ((16,), P()),
        "c2": ((3, 3, 16, 32), P(None, None, None, "model")),
        "cb2": ((32,), P("model")),
        "w": ((32, 10), P()),
    }
    args = (params, ((8, 16, 16, 3), P("data", None, None, None)), ((8, 10), P("data", None)))
    return step, args


def embedding(m):
    def step(params, ids, y):
        def loss_fn(p):
            e = jnp.take(p["table"], ids, axis=0)  # [batch, seq, dim]
            e = jax.lax.with_sharding_constraint(e, NamedSharding(m, P("data", None, None)))
            h = jnp.sum(e, axis=1) @ p["w"]
            return jnp.mean((h - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return sgd(params, grads), loss

    params = {"table": ((1024, 64), P("model", None)), "w": ((64, 16), P())}
    args = (params, ((16, 8), P("data", None), jnp.int32), ((16, 16), P("data", None)))
    return step, args


MODELS = {
    "mlp": lambda m: mlp(m),
    "transformer_block": lambda m: transformer(m, 1),
    "convnet": lambda m: convnet(m),
    "embedding": lambda m: embedding(m),
    "transformer4": lambda m: transformer(m, 4),
    "transformer48": lambda m: transformer(m, 48),
}


# ---------------------------------------------------------------- dumping


def specs(tree, m):
    def leaf(x):
        return isinstance(x, tuple) and len(x) >= 2 and isinstance(x[1], P)

    def to_spec(x):
        dtype = x[2] if len(x) > 2 else f32
        return jax.ShapeDtypeStruct(x[0], dtype, sharding=NamedSharding(m, x[1]))

    return jax.tree_util.tree_map(to_spec, tree, is_leaf=leaf)


def lowered(name):
    m = mesh()
    fn, args = MODELS[name](m)
    return jax.jit(fn).lower(*specs(args, m))


def hlo_module_field(data):
    """The dumps' .pb files are `xla.HloProto`s; field 1 is the HloModuleProto."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 2:
            n, pos = varint(data, pos)
            if field == 1:
                return data[pos : pos + n]
            pos += n
        elif wire == 0:
            _, pos = varint(data, pos)
        else:
            raise ValueError(f"unexpected wire type {wire} in HloProto")
    raise ValueError("no hlo_module in HloProto")


def varint(data, pos):
    out, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return out, pos


def module_text(pb, txt):
    """The module of a dump, in text: from the proto dump, so that every instruction keeps its
    own name (the text dumps abbreviate a get-tuple-element operand as `%tuple#0` and leave the
    instruction out), with the header line (module config: num_partitions, allow_spmd_*) of the
    text dump, which the proto does not hold."""
    from jaxlib import _hlo

    with open(pb, "rb") as f:
        m = _hlo.HloModule.from_serialized_hlo_module_proto(hlo_module_field(f.read()))
    opts = _hlo.HloPrintOptions()
    opts.print_large_constants = True
    opts.print_metadata = False
    body = m.to_string(opts).split("\n", 1)[1]
    with open(txt) as f:
        header = f.readline().rstrip("\n")
    return header + "\n" + body


def dump(name):
    d = tempfile.mkdtemp()
    lowered(name).compile(
        compiler_options={
            "xla_dump_to": d,
            "xla_dump_hlo_pass_re": "sharding-propagation",
            "xla_dump_disable_metadata": True,
            "xla_dump_hlo_as_text": True,
            "xla_dump_hlo_as_proto": True,
        }
    )
    files = sorted(os.listdir(d))
    before = [f for f in files if ".before_sharding-propagation." in f]
    after = [f for f in files if ".after_sharding-propagation." in f]
    if not (before and after):
        raise SystemExit(f"{name}: no sharding-propagation dumps in {d}: {files[:30]}")
    os.makedirs(OUT, exist_ok=True)
    for which, fs in [("before", before), ("after", after)]:
        pb = os.path.join(d, next(f for f in fs if f.endswith(".pb")))
        txt = os.path.join(d, next(f for f in fs if f.endswith(".txt")))
        with open(os.path.join(OUT, f"{name}.{which}-propagation.hlo"), "w") as f:
            f.write(module_text(pb, txt))
    print(name, before[0], after[0])
    shutil.rmtree(d)


def time_xla(name="transformer48", runs=5):
    """XLA's sharding-propagation time, from its pass-pipeline log, over `runs` compilations."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="hlo_pass_pipeline=1")
    code = (
        "import sys; sys.argv=['x']; sys.path.insert(0, %r); import make_spmd_models as s\n"
        "for _ in range(%d): s.lowered(%r).compile()\n"
    ) % (os.path.dirname(os.path.abspath(__file__)), runs, name)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    times = [float(t) for t in re.findall(r"HLO pass: sharding-propagation time: ([\d.]+) ms", r.stderr)]
    if not times:
        # other spellings of the same log line
        times = [float(t) for t in re.findall(r"sharding-propagation.*?([\d.]+) ?ms", r.stderr)]
    print(f"XLA sharding-propagation on {name}: {times} ms; median {np.median(times) if times else 'n/a'}")
    if not times:
        print(r.stderr[-3000:])


def main():
    argv = [a for a in sys.argv[1:] if not a.startswith("--")]
    for name in argv or list(MODELS):
        dump(name)
    if "--time" in sys.argv:
        time_xla()


if __name__ == "__main__":
    main()
