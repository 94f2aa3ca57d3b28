#!/usr/bin/env python3
"""XLA's partitioner on a reduce-window whose init is not an identity of its reducer.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 VENV/bin/python scripts/oracles/xla_reduce_window_init.py

A sum with init 1 over windows of 3 rows with one row of padding at each end, rows split over
2 devices (XLA's own propagation and partitioner, jax_use_shardy_partitioner=False). XLA's
semantics: padding contributes nothing, init is added once per window. Prints whether the
partitioned run equals the one-device run, and both. With jaxlib 0.12.0.1 it is not equal:
the first and last outputs are 1 too high (the init value stands in the halo's padding).
testdata/spmd-partitioning/reduce-window-non-identity-init-default.hlo is the same case for
Tessera, which takes the default path there and runs equal.
"""
import numpy as np
import jax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.config.update("jax_use_shardy_partitioner", False)


def f(x):
    return lax.reduce_window(x, np.float32(1.0), lax.add, (3, 1), (1, 1), [(1, 1), (0, 0)])


def main():
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    x = np.arange(16, dtype=np.float32).reshape(8, 2) + 1
    ref = np.asarray(jax.jit(f)(x))
    sh = NamedSharding(mesh, P("x", None))
    out = np.asarray(jax.jit(f, in_shardings=sh, out_shardings=sh)(jax.device_put(x, sh)))
    print("equal:", np.array_equal(ref, out))
    print("one device: ", ref[:, 0])
    print("partitioned:", out[:, 0])


if __name__ == "__main__":
    main()
