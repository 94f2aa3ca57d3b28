#!/usr/bin/env python3
"""Makes testdata/compile/*.hlo: jax modules as `lower().as_text(dialect="hlo")` gives them in
both of jax's modes, for crates/compile/tests/inputs.rs (never a product dependency).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 VENV/bin/python scripts/make_shardy_inputs.py

- shard_map2.{shardy,gspmd}.hlo: a shard_map over a 2x4 mesh (manual on both axes) with three
  inputs and two outputs (a psum over "model" and a per-shard sum), between automatic parts.
  Shardy mode (jax's default) writes the shard_map as xla.sdy.GlobalToLocalShape / call /
  xla.sdy.LocalToGlobalShape with its shardings only in `xla.sdy.*` frontend attributes; GSPMD
  mode writes SPMDFullToShardShape / SPMDShardToFullShape. The same function, so the same
  outputs for the same inputs.
- constraint.{shardy,gspmd}.hlo: a with_sharding_constraint and an out_sharding (Shardy mode
  writes the latter as xla.sdy.FuncResultSharding).
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import shard_map
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "compile")


def shard_map2(mesh):
    def body(a, w, b):
        y = jax.lax.psum(a @ w, "model")
        return y + b, jnp.sum(a, axis=1, keepdims=True)

    def step(x, w, b):
        y, s = shard_map(
            body,
            mesh=mesh,
            in_specs=(P("data", "model"), P("model", None), P(None, None)),
            out_specs=(P("data", None), P("data", "model")),
        )(x, w, b)
        return jnp.tanh(y) * 2.0, s

    args = [((16, 32), P("data", None)), ((32, 8), P(None, None)), ((1, 8), P(None, None))]
    return jax.jit(step), args


def constraint(mesh):
    def step(x, w):
        h = jax.lax.with_sharding_constraint(x @ w, NamedSharding(mesh, P("data", "model")))
        return jnp.tanh(h).sum(axis=0)

    args = [((16, 32), P("data", None)), ((32, 8), P(None, "model"))]
    return jax.jit(step, out_shardings=NamedSharding(mesh, P("model"))), args


def main():
    devices = jax.devices()
    assert len(devices) >= 8, "set XLA_FLAGS=--xla_force_host_platform_device_count=8"
    mesh = Mesh(np.array(devices[:8]).reshape(2, 4), ("data", "model"))
    os.makedirs(OUT, exist_ok=True)
    for mode in ["shardy", "gspmd"]:
        jax.config.update("jax_use_shardy_partitioner", mode == "shardy")
        for name, make in [("shard_map2", shard_map2), ("constraint", constraint)]:
            fn, args = make(mesh)
            specs = [
                jax.ShapeDtypeStruct(s, jnp.float32, sharding=NamedSharding(mesh, p))
                for s, p in args
            ]
            text = fn.lower(*specs).as_text(dialect="hlo")
            with open(os.path.join(OUT, f"{name}.{mode}.hlo"), "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
