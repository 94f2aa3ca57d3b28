#!/usr/bin/env python3
"""Dumps XLA's own (before, after) pairs of the spmd-partitioning pass, as fixtures for the
runtime's equivalence harness.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 VENV/bin/python scripts/make_spmd_pairs.py [NAME...]

(with names, only those cases are written).

For each small jax function below, jit-compiles it on a mesh of 2, 4 or 8 CPU devices with
XLA's own sharding propagation (not Shardy), dumps every pass, and copies the module right
before `spmd-partitioning` (shardings on every instruction) and right after it (the per-device
program with collectives) to testdata/spmd_pairs/<name>.{before,after}.hlo.
"""
import glob
import os
import shutil
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.config.update("jax_use_shardy_partitioner", False)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "spmd_pairs")


def cases():
    def mesh(shape, names):
        n = int(np.prod(shape))
        return Mesh(np.array(jax.devices()[:n]).reshape(shape), names)

    m8 = mesh((2, 4), ("data", "model"))
    m4 = mesh((4,), ("x",))
    m2 = mesh((2,), ("x",))
    f32 = jnp.float32
    yield (
        "matmul_rowcol",
        lambda a, b: a @ b,
        [((16, 32), f32, NamedSharding(m8, P("data", "model"))), ((32, 24), f32, NamedSharding(m8, P("model", None)))],
    )
    yield (
        "mlp_layer",
        lambda x, w, b: jax.nn.relu(x @ w + b),
        [((8, 16), f32, NamedSharding(m8, P("data", None))), ((16, 32), f32, NamedSharding(m8, P(None, "model"))),
         ((32,), f32, NamedSharding(m8, P("model")))],
    )
    yield (
        "reduce_sum_sharded",
        lambda x: jnp.sum(x, axis=0),
        [((16, 8), f32, NamedSharding(m4, P("x", None)))],
    )
    yield (
        "transpose_reshard",
        lambda x: (x.T * 2.0),
        [((8, 12), f32, NamedSharding(m4, P("x", None)))],
    )
    yield (
        "elementwise_2dev",
        lambda x, y: jnp.tanh(x) + y,
        [((6, 4), f32, NamedSharding(m2, P("x", None))), ((6, 4), f32, NamedSharding(m2, P(None, None)))],
    )
    # 10 rows over 4 devices inside the program: padded tiles of 3, gathered back to every device.
    wsc = jax.lax.with_sharding_constraint
    yield (
        "allgather_uneven",
        lambda x: wsc(wsc(x[:10] * 2.0 + 1.0, NamedSharding(m4, P("x", None))), NamedSharding(m4, P(None, None))),
        [((12, 4), f32, NamedSharding(m4, P("x", None)))],
    )
    # A 2-layer MLP training step on the 2x4 mesh (as scripts/make_examples.py, with smaller
    # sizes): a tuple of five outputs, gradients reduced over both mesh axes.
    def train_step(w1, b1, w2, b2, x, y):
        def loss_fn(params):
            a, c, d, e = params
            out = jax.nn.relu(x @ a + c) @ d + e
            return jnp.mean((out - y) ** 2)

        params = (w1, b1, w2, b2)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        return tuple(p - 0.01 * g for p, g in zip(params, grads)) + (loss,)

    yield (
        "mlp_train_step",
        train_step,
        [((32, 64), f32, NamedSharding(m8, P(None, "model"))), ((64,), f32, NamedSharding(m8, P("model"))),
         ((64, 16), f32, NamedSharding(m8, P("model", None))), ((16,), f32, NamedSharding(m8, P())),
         ((8, 32), f32, NamedSharding(m8, P("data", None))), ((8, 16), f32, NamedSharding(m8, P("data", None)))],
    )
    # Contracting dimension sharded, result sharded by rows: partial sums reduced and scattered.
    yield (
        "matmul_reduce_scatter",
        lambda a, b: jax.lax.with_sharding_constraint(a @ b, NamedSharding(m4, P("x", None))),
        [((8, 16), f32, NamedSharding(m4, P(None, "x"))), ((16, 8), f32, NamedSharding(m4, P("x", None)))],
    )


def main():
    os.makedirs(OUT, exist_ok=True)
    only = set(sys.argv[1:])
    for name, fn, args in cases():
        if only and name not in only:
            continue
        specs = [jax.ShapeDtypeStruct(s, t, sharding=sh) for s, t, sh in args]
        d = tempfile.mkdtemp()
        jax.jit(fn).lower(*specs).compile(
            compiler_options={"xla_dump_to": d, "xla_dump_hlo_pass_re": "spmd-partitioning"}
        )
        after = sorted(glob.glob(os.path.join(d, "*.after_spmd-partitioning.*txt")))
        before = sorted(glob.glob(os.path.join(d, "*.before_spmd-partitioning.txt")))
        if not after:
            after = sorted(f for f in glob.glob(os.path.join(d, "*spmd-partitioning*")) if "after_spmd" in f)
        if not before:
            before = sorted(f for f in glob.glob(os.path.join(d, "*spmd-partitioning*")) if "before_spmd" in f)
        if not (before and after):
            raise SystemExit(f"{name}: no dumps found in {d}: {os.listdir(d)[:20]}")
        shutil.copy(before[0], os.path.join(OUT, f"{name}.before.hlo"))
        shutil.copy(after[0], os.path.join(OUT, f"{name}.after.hlo"))
        print(name, os.path.basename(before[0]), os.path.basename(after[0]))
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
