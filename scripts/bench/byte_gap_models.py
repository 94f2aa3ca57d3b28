#!/usr/bin/env python3
"""The four model shapes where an outside review found Tessera moving more collective bytes
than XLA (issue 34), lowered by jax in both of its modes, and the bytes beside XLA's.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 .deps/python/bin/python \
        scripts/bench/byte_gap_models.py [--write]

Each model is a jax function on a 2x4 ("data", "model") mesh with its input and output
shardings given, lowered with `as_text(dialect="hlo")` in GSPMD mode and in Shardy mode.
`--write` stores the lowered modules as testdata/compile/gap_<model>.<mode>.hlo (the
pipeline test crates/compile/tests/models.rs runs them on 8 devices against one). Then, per
model and mode: Tessera's `compile --num-partitions 8` output (the binary from $TESSERA,
default target/debug/tessera) and XLA's module right after its `spmd-partitioning` pass when
jax compiles the same function, both counted by spmd_bytes_vs_xla.py's formulas (bytes each
device receives). Development only; never part of the tests.
"""
import glob
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from spmd_bytes_vs_xla import moved  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def embedding_step(table, ids, dy):
    """The gradient of an embedding lookup into a vocabulary-split table (a scatter-add)."""
    def loss(t):
        return jnp.sum(t[ids] * dy)
    return jax.grad(loss)(table)


def reshape_chain(x, y):
    """A chain of reshape, transpose and concatenate."""
    a = x.reshape(16, 8, 32).transpose(1, 0, 2)
    b = jnp.concatenate([a, y], axis=2)
    c = b.reshape(8, 16 * 64).T
    return jnp.tanh(c) * 2.0


def uneven_mlp(x, w1, w2):
    """An MLP whose hidden size (100) does not divide the 4-way model axis."""
    return jax.nn.relu(x @ w1) @ w2


def max_pool(x):
    """3x3 max-pooling, stride 2, over an NHWC batch split on its rows."""
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")


def models(mesh):
    def s(shape, spec, dt=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dt, sharding=NamedSharding(mesh, spec))
    return {
        "embedding_step": (embedding_step, P("model", None),
                           (s((1024, 64), P("model", None)), s((16, 8), P("data"), jnp.int32),
                            s((16, 8, 64), P("data")))),
        "reshape_chain": (reshape_chain, P("model", None),
                          (s((16, 256), P("data", "model")), s((8, 16, 32), P(None, "data")))),
        "uneven_mlp": (uneven_mlp, P("data"),
                       (s((16, 64), P("data")), s((64, 100), P(None, "model")),
                        s((100, 64), P("model", None)))),
        "max_pool": (max_pool, P("data", "model"), (s((8, 32, 32, 16), P("data", "model")),)),
    }


def main(write):
    tessera = os.environ.get("TESSERA", os.path.join(ROOT, "target", "debug", "tessera"))
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))
    print("| model | jax mode | our collectives | our bytes | XLA collectives | XLA bytes |")
    print("|---|---|---|---|---|---|")
    for mode in ("gspmd", "shardy"):
        jax.config.update("jax_use_shardy_partitioner", mode == "shardy")
        for name, (fn, out, args) in models(mesh).items():
            low = jax.jit(fn, out_shardings=NamedSharding(mesh, out)).lower(*args)
            text = low.as_text(dialect="hlo")
            path = os.path.join(ROOT, "testdata", "compile", f"gap_{name}.{mode}.hlo")
            if write:
                with open(path, "w") as f:
                    f.write(text)
            dump = tempfile.mkdtemp()
            low.compile(compiler_options={"xla_dump_to": dump,
                                          "xla_dump_hlo_pass_re": "spmd-partitioning"})
            after = sorted(f for f in glob.glob(os.path.join(dump, "*after_spmd-partitioning*"))
                           if f.endswith(".txt"))
            xc, xb = moved(open(after[-1]).read(), 8)
            with tempfile.TemporaryDirectory() as tmp:
                src, dst = os.path.join(tmp, "in.hlo"), os.path.join(tmp, "out.hlo")
                with open(src, "w") as f:
                    f.write(text)
                subprocess.run([tessera, "compile", src, "--num-partitions", "8", "-o", dst],
                               check=True, capture_output=True)
                oc, ob = moved(open(dst).read(), 8)
            print(f"| {name} | {mode} | {oc} | {ob:,} | {xc} | {xb:,} |")


if __name__ == "__main__":
    main("--write" in sys.argv[1:])
