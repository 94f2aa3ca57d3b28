#!/usr/bin/env python3
"""XLA's own dump files (`--xla_dump_to`), kept as users hand them to us.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 VENV/bin/python scripts/make_xla_dumps.py [NAME...]

For each model below and each of jax's two propagation modes (`shardy`: jax's default;
`gspmd`: `jax_use_shardy_partitioner=False`, XLA's own sharding-propagation), compiles the jitted
step on 8 CPU devices with `xla_dump_to` and `xla_dump_hlo_pass_re` set, and copies three of
XLA's text dump files unchanged (metadata included) to testdata/dumps/:

    <name>.<mode>.before-propagation.txt   the module right before sharding-propagation / shardy-xla
    <name>.<mode>.before-spmd.txt          right before spmd-partitioning (shardings everywhere)
    <name>.<mode>.after-spmd.txt           right after it (the per-device program)

These files are XLA's dump printing, not `HloModule.to_string()`: they elide get-tuple-element
as `%x#N`. The models are those of scripts/make_spmd_models.py (transformer48 left out: its
dumps are 6 MB each) and four small ones for the forms the others do not have: a scan (while
loop), a top-k, a conditional and a shard_map region (manual shardings, SPMDFullToShardShape /
SPMDShardToFullShape). A list of the files written and the XLA file each came from goes to
testdata/dumps/MANIFEST.tsv.

    ... scripts/make_xla_dumps.py --all-passes DIR

writes instead every dump file of every pass (`xla_dump_hlo_pass_re=.*`) of every model and
mode to DIR/<name>.<mode>/ (about 800 files; not committed), for
scripts/check_dump_shorthand.py.
"""
import os
import shutil
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_spmd_models as models  # noqa: E402  (it switches Shardy off at import; see main)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "dumps")
f32 = jnp.float32


def scan_loop(m):
    """A recurrent cell under lax.scan: a while loop whose state is a tuple."""

    def step(w, h0, xs):
        def cell(h, x):
            h = jnp.tanh(h @ w + x)
            return h, jnp.sum(h)

        h, ys = jax.lax.scan(cell, h0, xs)
        return h, ys

    args = (((32, 32), P(None, "model")), ((8, 32), P("data", None)), ((6, 8, 32), P(None, "data", None)))
    return step, args


def topk(m):
    """top-k along the last axis of a batch-sharded array (a tuple-shaped topk / sort)."""

    def step(x):
        v, i = jax.lax.top_k(x * 2.0, 4)
        return v, i

    return step, (((16, 64), P("data", None)),)


def cond(m):
    """A conditional on a reduced predicate; both branches keep the batch sharding."""

    def step(x, w):
        s = jnp.sum(x)
        return jax.lax.cond(s > 0, lambda a: a @ w, lambda a: (a * 2.0) @ w, x)

    return step, (((16, 32), P("data", None)), ((32, 8), P(None, "model")))


def shard_map_region(m):
    """A shard_map body (manual on both axes) with a psum, between automatic parts."""
    from jax import shard_map

    def body(a, w):
        return jax.lax.psum(a @ w, "model")

    def step(x, w):
        y = shard_map(body, mesh=m, in_specs=(P("data", "model"), P("model", None)), out_specs=P("data", None))(x, w)
        return jnp.tanh(y) + 1.0

    return step, (((16, 32), P("data", None)), ((32, 8), P(None, None)))


MODELS = {name: models.MODELS[name] for name in ["mlp", "transformer_block", "convnet", "embedding"]}
MODELS.update(scan_loop=scan_loop, topk=topk, cond=cond, shard_map=shard_map_region)
MODES = ["shardy", "gspmd"]
# (stage name, a piece of XLA's dump file name that picks the file)
STAGES = [
    ("before-propagation", [".before_sharding-propagation.", ".before_shardy-xla."]),
    ("before-spmd", [".before_spmd-partitioning."]),
    ("after-spmd", [".after_spmd-partitioning."]),
]


def compile_with_dumps(name, mode, d, pass_re):
    jax.config.update("jax_use_shardy_partitioner", mode == "shardy")
    m = models.mesh()
    fn, args = MODELS[name](m)
    jax.jit(fn).lower(*models.specs(args, m)).compile(
        compiler_options={"xla_dump_to": d, "xla_dump_hlo_pass_re": pass_re}
    )


def dump(name, mode, manifest):
    d = tempfile.mkdtemp()
    compile_with_dumps(name, mode, d, "sharding-propagation|shardy-xla|spmd-partitioning")
    files = sorted(f for f in os.listdir(d) if f.endswith(".txt"))
    for stage, keys in STAGES:
        hits = [f for f in files if any(k in f for k in keys)]
        if not hits:
            raise SystemExit(f"{name} ({mode}): no {stage} dump in {d}: {files}")
        out = f"{name}.{mode}.{stage}.txt"
        shutil.copy(os.path.join(d, hits[0]), os.path.join(OUT, out))
        manifest.append(f"{out}\t{hits[0]}")
    shutil.rmtree(d)


def main():
    if sys.argv[1:2] == ["--all-passes"]:
        for name in MODELS:
            for mode in MODES:
                compile_with_dumps(name, mode, os.path.join(sys.argv[2], f"{name}.{mode}"), ".*")
                print(name, mode)
        return
    only = [a for a in sys.argv[1:] if not a.startswith("--")]
    os.makedirs(OUT, exist_ok=True)
    manifest = []
    for name in only or list(MODELS):
        for mode in MODES:
            dump(name, mode, manifest)
            print(name, mode)
    if not only:
        with open(os.path.join(OUT, "MANIFEST.tsv"), "w") as f:
            f.write(f"# written by scripts/make_xla_dumps.py with jax {jax.__version__}\n")
            f.write("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main()
