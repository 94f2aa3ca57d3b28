"""The jax models of testdata, with concrete inputs: the definitions of scripts/fixtures/make_spmd_models.py
and scripts/fixtures/make_xla_dumps.py (the scripts that made testdata/models and testdata/dumps), plus an
embedding lookup alone and explicit-sharding-mode modules."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import make_spmd_models as models  # noqa: E402  (switches Shardy off at import)
import make_xla_dumps as dumps  # noqa: E402

jax.config.update("jax_use_shardy_partitioner", True)  # back to jax's default


def embedding_lookup(m):
    """A lookup in a vocab-sharded table, forward only (a gather from rows split on "model")."""

    def lookup(table, ids):
        e = jnp.take(table, ids, axis=0)
        return jax.lax.with_sharding_constraint(e, NamedSharding(m, P("data", None, None)))

    return lookup, (((1024, 64), P("model", None)), ((16, 8), P("data", None), jnp.int32))


MODELS = {
    "mlp": models.MODELS["mlp"],
    "transformer": models.MODELS["transformer_block"],
    "convnet": models.MODELS["convnet"],
    "embedding_lookup": embedding_lookup,
    "embedding_step": models.MODELS["embedding"],
    "scan": dumps.MODELS["scan_loop"],
    "cond": dumps.MODELS["cond"],
    "shard_map": dumps.MODELS["shard_map"],
    "topk": dumps.MODELS["topk"],
}


def mesh():
    return models.mesh()


def inputs(spec_tree, m, seed=0):
    """Concrete global arrays for a tree of (shape, spec[, dtype]) leaves, placed by spec."""
    rng = np.random.default_rng(seed)

    def make(s):
        if jnp.issubdtype(s.dtype, jnp.integer):
            a = rng.integers(0, 64, size=s.shape).astype(s.dtype)
        else:
            a = rng.standard_normal(s.shape).astype(s.dtype)
        return jax.make_array_from_callback(s.shape, s.sharding, lambda idx: a[idx])

    return jax.tree_util.tree_map(make, models.specs(spec_tree, m))


def model(name, m):
    """(function, concrete arguments) of a model on mesh m."""
    fn, spec = MODELS[name](m)
    return fn, inputs(spec, m)


def explicit_step():
    """An MLP training step in explicit sharding mode (jax.make_mesh's default axis types):
    shardings are part of the types; no unreduced values."""
    m = jax.make_mesh((2, 4), ("data", "model"))

    def step(params, x, y):
        def loss_fn(p):
            h = jax.nn.relu(x @ p["w1"])
            out = jnp.dot(h, p["w2"], out_sharding=P("data", None))
            return jnp.mean((out - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss

    spec = (
        {"w1": ((64, 256), P(None, "model")), "w2": ((256, 32), P("model", None))},
        ((16, 64), P("data", None)),
        ((16, 32), P("data", None)),
    )
    return m, step, spec


def explicit_unreduced():
    """Explicit mode with an unreduced partial sum (`P(..., unreduced={"model"})`), resharded
    to the reduced spec afterwards: jax writes `last_tile_dims={unreduced}` into the HLO."""
    m = jax.make_mesh((2, 4), ("data", "model"))

    def f(x, w):
        y = jnp.dot(x, w, out_sharding=P("data", None, unreduced={"model"}))
        return jnp.tanh(jax.sharding.reshard(y, P("data", None)))

    return m, f, (((16, 32), P("data", "model")), ((32, 8), P("model", None)))


def assert_close(a, b):
    """Integers exact; floats equal up to the order of f32 sums, norm-wise: the largest
    difference at most 2^-12 of the largest magnitude (an elementwise tolerance raises false
    alarms on long reductions split another way; a wrong shard is off by the values)."""
    if np.issubdtype(b.dtype, np.floating):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        scale = max(float(np.max(np.abs(b64), initial=0.0)), 1e-30)
        diff = float(np.max(np.abs(a64 - b64), initial=0.0))
        assert diff <= scale * 2.0**-12, f"max difference {diff:.3g} against largest |value| {scale:.3g}"
    else:
        np.testing.assert_array_equal(a, b)
