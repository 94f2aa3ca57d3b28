#!/usr/bin/env python3
"""tessera.jax.jit against jax.jit on the transformer training step, 8 CPU devices.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 nice -n 10 VENV/bin/python \
        scripts/bench/bench_jax_bridge.py [--layers 4] [--trials 3] [--steps 30]

VENV holds jax 0.12 and the tessera package built with --release
(`cd crates/python && maturin build --release -i VENV/bin/python`, then pip install the wheel).
Prints, for the step of scripts/fixtures/make_spmd_models.py (`transformer(mesh, layers)`, 2x4 mesh):

- first call (lower + compile + one run), median of --trials fresh functions, for both; for
  tessera.jax also its parts: jax's lowering to HLO text, Tessera's compile, XLA's compile of
  the per-device program;
- steady-state step time: median of --steps calls (each waited for);
- per-call overhead: median time of a call of `x + 1` on a f32[8] array split over 8 devices,
  which is almost all dispatch.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import make_spmd_models as models  # noqa: E402

jax.config.update("jax_use_shardy_partitioner", True)  # jax's default (the script turns it off)
import tessera  # noqa: E402
import tessera.jax as tj  # noqa: E402


def inputs(spec, m):
    rng = np.random.default_rng(0)

    def make(s):
        a = rng.standard_normal(s.shape).astype(s.dtype)
        return jax.device_put(a, s.sharding)

    return jax.tree_util.tree_map(make, models.specs(spec, m))


def ms(t):
    return f"{t * 1e3:.1f} ms"


def timed(f):
    t0 = time.perf_counter()
    out = f()
    jax.block_until_ready(out)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    m = models.mesh()
    fn, spec = models.transformer(m, a.layers)
    args = inputs(spec, m)

    first = {"jax.jit": [], "tessera.jax.jit": []}
    parts = {"lower": [], "tessera": [], "xla": []}
    for _ in range(a.trials):
        f = lambda *x: fn(*x)  # noqa: E731  a fresh function: nothing cached
        first["jax.jit"].append(timed(lambda: jax.jit(f)(*args)))
        g = lambda *x: fn(*x)  # noqa: E731
        first["tessera.jax.jit"].append(timed(lambda: tj.jit(g)(*args)))
        # The parts, on another fresh function.
        h = lambda *x: fn(*x)  # noqa: E731
        t0 = time.perf_counter()
        lowered = jax.jit(h, keep_unused=True).lower(*args)
        text = lowered.as_text(dialect="hlo")
        t1 = time.perf_counter()
        r = tessera.compile(text, num_partitions=8)
        t2 = time.perf_counter()
        parts["lower"].append(t1 - t0)
        parts["tessera"].append(t2 - t1)
        jt = tj.jit(h)
        lo = jt.lower(*args)
        t3 = time.perf_counter()
        lo.compile()
        parts["xla"].append(time.perf_counter() - t3)
    instrs = r.module.instruction_count
    print(f"transformer training step, {a.layers} layers, 2x4 mesh of 8 CPU devices "
          f"(jax {jax.__version__}); Tessera's per-device program: {instrs} instructions")
    med = {k: statistics.median(v) for k, v in first.items()}
    print(f"first call (lower + compile + run), median of {a.trials}:")
    for k, v in med.items():
        print(f"  {k:<16} {ms(v)}")
    print("  tessera.jax.jit parts: jax lowering to HLO text "
          f"{ms(statistics.median(parts['lower']))}, Tessera compile "
          f"{ms(statistics.median(parts['tessera']))}, XLA compile of the per-device program "
          f"{ms(statistics.median(parts['xla']))}")

    steady = {}
    for name, jit in [("jax.jit", jax.jit), ("tessera.jax.jit", tj.jit)]:
        f = jit(fn)
        jax.block_until_ready(f(*args))
        ts = [timed(lambda: f(*args)) for _ in range(a.steps)]
        steady[name] = statistics.median(ts)
    print(f"steady-state step, median of {a.steps}:")
    for k, v in steady.items():
        print(f"  {k:<16} {ms(v)}")

    x = jax.device_put(np.zeros(8, np.float32), NamedSharding(m, P(("data", "model"))))
    over = {}
    for name, jit in [("jax.jit", jax.jit), ("tessera.jax.jit", tj.jit)]:
        f = jit(lambda v: v + 1)
        jax.block_until_ready(f(x))
        ts = [timed(lambda: f(x)) for _ in range(500)]
        over[name] = statistics.median(ts)
    print("per call, x + 1 on f32[8] split 8 ways (dispatch), median of 500:")
    for k, v in over.items():
        print(f"  {k:<16} {v * 1e6:.0f} us")
    print(f"  overhead of tessera.jax.jit: {(over['tessera.jax.jit'] - over['jax.jit']) * 1e6:.0f} us per call")


if __name__ == "__main__":
    main()
