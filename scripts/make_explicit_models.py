#!/usr/bin/env python3
"""Makes jax's explicit-sharding-mode modules in testdata/compile/ (never a product dependency).

Run with a Python that has jax 0.12 (see ../shared/ORACLE.md):
    XLA_FLAGS=--xla_force_host_platform_device_count=8 VENV/bin/python scripts/make_explicit_models.py

Each function runs on a 2x4 mesh of explicit axes ("x", "y") and is written as jax lowers it
(`lower().as_text(dialect="hlo")`), with `unreduced` shardings (issue 34):
- explicit_unreduced_matmul.hlo: a dot whose partial sums over "y" stay unreduced
  (`out_sharding=P("x", None, unreduced={"y"})`), then `jax.sharding.reshard` to
  `P("x", "y")`: the reduction may be a reduce-scatter;
- explicit_unreduced_chain.hlo: two unreduced dots summed while unreduced (jax refuses to scale
  an unreduced value by a reduced one), then
  resharded to `P("x", None)`;
- explicit_mlp_step.hlo: a 2-layer MLP training step (value_and_grad + SGD) whose hidden
  activations' gradients are unreduced partial sums until they are resharded.

And one partially manual region (not explicit mode; a 2x4 mesh of auto axes):
- partial_manual_gather_scatter.hlo: `jax.shard_map` manual over "x" only, holding a gather
  (`jnp.take`) and a scatter-add whose operands the partitioner splits over "y" inside the
  region (issue 34: collectives inside partially manual regions); lowered in GSPMD mode.
"""
import os

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "compile")


def arg(mesh, shape, spec, seed):
    x = jax.random.normal(jax.random.key(seed), shape, jnp.float32)
    return jax.device_put(x, NamedSharding(mesh, spec))


def matmul(mesh):
    def f(a, b):
        c = jnp.einsum("ij,jk->ik", a, b, out_sharding=P("x", None, unreduced={"y"}))
        return jax.sharding.reshard(c, P("x", "y"))

    return f, [arg(mesh, (16, 32), P("x", "y"), 0), arg(mesh, (32, 8), P("y", None), 1)]


def chain(mesh):
    def f(a, b, c, d):
        u = jnp.einsum("ij,jk->ik", a, b, out_sharding=P("x", None, unreduced={"y"}))
        v = jnp.einsum("ij,jk->ik", c, d, out_sharding=P("x", None, unreduced={"y"}))
        w = u + v
        return jnp.tanh(jax.sharding.reshard(w, P("x", None)))

    return f, [
        arg(mesh, (16, 32), P("x", "y"), 2),
        arg(mesh, (32, 8), P("y", None), 3),
        arg(mesh, (16, 64), P("x", "y"), 4),
        arg(mesh, (64, 8), P("y", None), 5),
    ]


def mlp_step(mesh):
    def loss(w1, w2, x, t):
        h = jnp.einsum("bi,ih->bh", x, w1, out_sharding=P("x", "y"))
        h = jax.nn.relu(h)
        o = jnp.einsum("bh,ho->bo", h, w2, out_sharding=P("x", None, unreduced={"y"}))
        o = jax.sharding.reshard(o, P("x", None))
        return jnp.mean((o - t) ** 2)

    def step(w1, w2, x, t):
        l, (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1))(w1, w2, x, t)
        return w1 - 0.1 * g1, w2 - 0.1 * g2, l

    return step, [
        arg(mesh, (32, 64), P(None, "y"), 6),
        arg(mesh, (64, 16), P("y", None), 7),
        arg(mesh, (16, 32), P("x", None), 8),
        arg(mesh, (16, 16), P("x", None), 9),
    ]


def partial_manual():
    # GSPMD mode: Tessera reads Shardy's shard_maps only when manual over the whole mesh.
    jax.config.update("jax_use_shardy_partitioner", False)
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)

    def body(t, i, u):
        g = jnp.take(t, i, axis=0)
        g = jax.lax.with_sharding_constraint(g, P(None, "y"))
        s = jnp.zeros_like(t).at[i].add(u)
        return g, s

    f = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(P("x"), P("x"), P("x")),
        out_specs=(P("x"), P("x")),
        axis_names={"x"},
    )
    specs = (P("x", "y"), P("x"), P("x"))
    g = jax.jit(f, in_shardings=tuple(NamedSharding(mesh, s) for s in specs))
    t = jnp.arange(16 * 8, dtype=jnp.float32).reshape(16, 8)
    i = jnp.array([0, 3, 5, 1, 2, 2, 7, 6], dtype=jnp.int32)
    u = jnp.ones((8, 8), jnp.float32)
    return g.lower(t, i, u).as_text(dialect="hlo")


def main():
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    for name, make in [
        ("explicit_unreduced_matmul", matmul),
        ("explicit_unreduced_chain", chain),
        ("explicit_mlp_step", mlp_step),
    ]:
        with jax.set_mesh(mesh):
            f, args = make(mesh)
            text = jax.jit(f).lower(*args).as_text(dialect="hlo")
        assert "unreduced" in text, name
        path = os.path.join(OUT, f"{name}.hlo")
        with open(path, "w") as out:
            out.write(text)
        print(f"wrote {path}")
    path = os.path.join(OUT, "partial_manual_gather_scatter.hlo")
    with open(path, "w") as out:
        out.write(partial_manual())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
