#!/usr/bin/env python3
"""Partially manual shard_map regions from jax, as XLA's partitioner receives them.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 VENV/bin/python scripts/make_shard_map_dumps.py [NAME...]

Each model below runs `jax.shard_map` over the "model" axis only of a 2x4 ("data", "model")
mesh (`axis_names={"model"}`: the region is manual along "model" and still partitioned along
"data", XLA's `last_tile_dims={manual}`), with one of the collectives jax emits inside such a
region: psum (all-reduce), all_gather, ppermute (collective-permute), psum_scatter
(reduce-scatter), all_to_all and axis_index (partition-id), plus a region that uses all of
them together. For each model and each of jax's two propagation modes (`shardy`: jax's default;
`gspmd`: `jax_use_shardy_partitioner=False`), the jitted step is compiled on 8 CPU devices with
`xla_dump_to`, and XLA's dump files are copied unchanged to testdata/shard_map/:

    <name>.<mode>.before-spmd.txt   the module right before spmd-partitioning
    <name>.<mode>.after-spmd.txt    right after it (XLA's per-device program), when XLA makes one

Each compilation runs in a child process: with GSPMD propagation, jaxlib 0.12.0.1's
partitioner aborts the process (`Check failed: sharding.IsManualSubgroup()` in
`SpmdPartitioningVisitor::Preprocess`) on the all_gather and all_to_all regions. Its
before-spmd dump is written before the abort and is kept; there is no after-spmd file then
(MANIFEST.tsv says so). Development only: the tests read the committed files.
"""
import os
import shutil
import subprocess
import sys
import tempfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "shard_map")
MODES = ["shardy", "gspmd"]
NAMES = ["psum", "all_gather", "ppermute", "psum_scatter", "all_to_all", "axis_index", "all"]


def models():
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    ring = [(i, (i + 1) % 4) for i in range(4)]
    # (body, in_specs, out_specs); the input is f32[8,16] split ("data", "model") outside.
    return {
        # A psum over "model" of pieces still split along "data".
        "psum": (lambda a: jax.lax.psum(jnp.sin(a), "model") * a, P(None, "model"), P(None, "model")),
        # Gathers the "model" pieces along dimension 1 (whole in the piece).
        "all_gather": (lambda a: jax.lax.all_gather(a, "model", axis=1, tiled=True) + 1.0, P(None, "model"), P("model")),
        # Rotates the pieces one step along the "model" ring.
        "ppermute": (lambda a: jax.lax.ppermute(a * 3.0, "model", ring), P(None, "model"), P(None, "model")),
        # Sums over "model" and scatters dimension 0 (split along "data" before: it is
        # made whole first).
        "psum_scatter": (lambda a: jax.lax.psum_scatter(a, "model", scatter_dimension=0, tiled=True), P(None, "model"), P("model")),
        # Moves the split from dimension 1 to dimension 0 within the "model" axis.
        "all_to_all": (lambda a: jax.lax.all_to_all(a, "model", 0, 1, tiled=True), P(None, "model"), P("model")),
        # Each subgroup adds its own index along "model".
        "axis_index": (lambda a: a + jax.lax.axis_index("model").astype(a.dtype), P(None, "model"), P(None, "model")),
        "all": (
            lambda a: (
                jax.lax.psum(a, "model") + jax.lax.ppermute(a, "model", ring) + jax.lax.axis_index("model").astype(a.dtype),
                jax.lax.all_gather(a, "model", axis=1, tiled=True),
                jax.lax.psum_scatter(a, "model", scatter_dimension=0, tiled=True),
                jax.lax.all_to_all(a, "model", 0, 1, tiled=True),
            ),
            P(None, "model"),
            (P(None, "model"), P("model"), P("model"), P("model")),
        ),
    }


def child(name, mode, d):
    """Compiles model `name` in `mode` with XLA's dumps going to `d` (in a child process)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import shard_map
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    jax.config.update("jax_use_shardy_partitioner", mode == "shardy")
    m = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))
    body, in_specs, out_specs = models()[name]

    def step(x):
        y = shard_map(body, mesh=m, in_specs=in_specs, out_specs=out_specs, axis_names={"model"})(jnp.tanh(x))
        return jax.tree_util.tree_map(lambda v: v * 2.0, y)

    x = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(m, P("data", "model")))
    jax.jit(step).lower(x).compile(
        compiler_options={"xla_dump_to": d, "xla_dump_hlo_pass_re": "spmd-partitioning"}
    )


def dump(name, mode, manifest):
    d = tempfile.mkdtemp()
    r = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", name, mode, d],
        capture_output=True,
        text=True,
    )
    files = sorted(f for f in os.listdir(d) if f.endswith(".txt"))
    for stage, key in [("before-spmd", ".before_spmd-partitioning."), ("after-spmd", ".after_spmd-partitioning.")]:
        hits = [f for f in files if key in f]
        if hits:
            out = f"{name}.{mode}.{stage}.txt"
            shutil.copy(os.path.join(d, hits[0]), os.path.join(OUT, out))
            manifest.append(f"{out}\t{hits[0]}")
        elif stage == "after-spmd":
            why = [l for l in r.stderr.splitlines() if "Check failed" in l]
            manifest.append(f"{name}.{mode}.{stage}.txt\tnone: XLA aborted ({why[0].split('] ')[-1] if why else r.returncode})")
        else:
            raise SystemExit(f"{name} ({mode}): no {stage} dump:\n{r.stderr[-2000:]}")
    shutil.rmtree(d)


def main():
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:5])
        return
    import jax

    only = sys.argv[1:] or NAMES
    os.makedirs(OUT, exist_ok=True)
    manifest = []
    for name in only:
        for mode in MODES:
            dump(name, mode, manifest)
            print(name, mode, manifest[-1].split("\t")[1])
    if only == NAMES:
        with open(os.path.join(OUT, "MANIFEST.tsv"), "w") as f:
            f.write(f"# written by scripts/make_shard_map_dumps.py with jax {jax.__version__}\n")
            f.write("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main()
