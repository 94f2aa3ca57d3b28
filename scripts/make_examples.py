#!/usr/bin/env python3
"""Makes the bundled example modules in testdata/examples/ with jax (never a product dependency).

Run with a Python that has jax 0.12 (see ../shared/ORACLE.md):
    XLA_FLAGS=--xla_force_host_platform_device_count=8 VENV/bin/python scripts/make_examples.py [mlp] [transformer]

Writes (both by default, or the ones named), each a training step sharded on a 2x4 mesh
(data x model):
- mlp_train_step.hlo: a 2-layer MLP as jax lowers it (`lower().as_text(dialect="hlo")`:
  shardings on parameters and custom-call Sharding constraints), the input of sharding
  propagation and partitioning;
- mlp_train_step.after_spmd.hlo: XLA's own partitioned module (per-device program), for comparison;
- transformer_train_step.hlo: one pre-LN transformer block (Megatron-style weights: q/k/v and
  the first feed-forward layer split on "model" by columns, the output projections by rows;
  batch on "data"), value_and_grad + SGD, as jax lowers it: the README's main job compiles it
  (`tessera compile --verify --report`). The model is make_spmd_models.py's `transformer_block`.
"""
import os
import sys

import jax
import numpy as np
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.config.update("jax_use_shardy_partitioner", False)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "examples")


def mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    h = jax.nn.relu(x @ w1 + b1)
    out = h @ w2 + b2
    return jnp.mean((out - y) ** 2)


def train_step(params, x, y):
    loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
    new = tuple(p - 0.01 * g for p, g in zip(params, grads))
    return new, loss


def transformer_example(mesh):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_spmd_models as models

    step, args = models.transformer(mesh, 1)
    lowered = jax.jit(step).lower(*models.specs(args, mesh))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "transformer_train_step.hlo"), "w") as f:
        f.write(lowered.as_text(dialect="hlo"))


def main():
    devices = jax.devices()
    assert len(devices) >= 8, "set XLA_FLAGS=--xla_force_host_platform_device_count=8"
    mesh = Mesh(np.array(devices[:8]).reshape(2, 4), ("data", "model"))
    names = sys.argv[1:] or ["mlp", "transformer"]
    if "transformer" in names:
        transformer_example(mesh)
    if "mlp" not in names:
        return
    s = lambda *spec: NamedSharding(mesh, P(*spec))
    params = (
        jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=s(None, "model")),
        jax.ShapeDtypeStruct((256,), jnp.float32, sharding=s("model")),
        jax.ShapeDtypeStruct((256, 32), jnp.float32, sharding=s("model", None)),
        jax.ShapeDtypeStruct((32,), jnp.float32, sharding=s()),
    )
    x = jax.ShapeDtypeStruct((16, 64), jnp.float32, sharding=s("data", None))
    y = jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=s("data", None))
    lowered = jax.jit(train_step).lower(params, x, y)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "mlp_train_step.hlo"), "w") as f:
        f.write(lowered.as_text(dialect="hlo"))
    with open(os.path.join(OUT, "mlp_train_step.after_spmd.hlo"), "w") as f:
        f.write(lowered.compile().as_text())


if __name__ == "__main__":
    main()
