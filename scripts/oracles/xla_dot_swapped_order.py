"""XLA partitions, compiles and runs testdata/spmd-partitioning/dot-2d-free-and-contracting-3.hlo
(its own test Dot2DPartitionedNoncontractingAndContracting3) on 4 CPU devices, and each device's
result is compared with the tile the root sharding {devices=[2,2]1,0,3,2} gives it.

    VENV/bin/python scripts/oracles/xla_dot_swapped_order.py testdata/spmd-partitioning/dot-2d-free-and-contracting-3.hlo

jaxlib 0.12.0.1 and 0.10.2 both put on every device the column tile of its neighbour (the
error against the other column tile is float rounding): the result's swapped device order is
ignored. XLA reports the root sharding as the output sharding, so the caller gets the wrong
array. Development only (needs a jax venv).
"""
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import numpy as np, jax
from jax._src.lib import xla_client as xc
from jaxlib import _hlo
text = open(sys.argv[1]).read()
module = _hlo.hlo_module_from_text(text)
mlir = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
opts = xc.CompileOptions()
opts.num_partitions = 4
opts.num_replicas = 1
opts.executable_build_options.use_spmd_partitioning = True
devs = jax.devices()[:4]
exe = devs[0].client.compile_and_load(mlir, devs, opts)
rng = np.random.default_rng(0)
x = rng.standard_normal((23, 24)).astype(np.float32)
y = rng.standard_normal((23, 32)).astype(np.float32)
pad = lambda a, rows: np.concatenate([a, np.full((rows - a.shape[0],) + a.shape[1:], 99, np.float32)])
xs = [pad(x[12 * (p // 2):][:12], 12) for p in range(4)]            # [2,1,2] last_tile_dim_replicate
ys = [pad(y[12 * (p // 2):][:12, 16 * (p % 2):][:, :16], 12) for p in range(4)]   # [2,2]0,1,2,3
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
line = NamedSharding(Mesh(np.array(devs), ("d",)), P("d"))
# The executable reads each device's buffer; the global shape is only a carrier.
carry = lambda pieces: jax.make_array_from_single_device_arrays(
    (4 * pieces[0].shape[0],) + pieces[0].shape[1:], line,
    [jax.device_put(pieces[p], devs[p]) for p in range(4)])
args = [carry(xs), carry(ys)]
outs = exe.execute_sharded(args).disassemble_into_single_device_arrays()[0]
want = x.T @ y
tile_of = {1: (0, 0), 0: (0, 1), 3: (1, 0), 2: (1, 1)}               # devices=[2,2]1,0,3,2
print("jaxlib", jax.__version__)
for p in range(4):
    i, j = tile_of[p]
    got = np.asarray(outs[p])
    err = np.abs(got - want[12 * i:12 * i + 12, 16 * j:16 * j + 16]).max()
    other = np.abs(got - want[12 * i:12 * i + 12, 16 * (1 - j):16 * (1 - j) + 16]).max()
    print(f"device {p}: tile {i},{j} max abs error {err:.3g} (against the other column tile: {other:.3g})")
print("output sharding XLA reports:", [str(s) for s in exe.get_output_shardings()] if hasattr(exe, "get_output_shardings") else "n/a")
print("parameter shardings:", [str(s) for s in exe.get_parameter_shardings()] if hasattr(exe, "get_parameter_shardings") else "n/a")
