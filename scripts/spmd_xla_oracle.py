#!/usr/bin/env python3
"""XLA's own answer for a sharding-propagation case: compiles an HLO text file for N CPU
devices (SPMD, through jax's client) with dumps around XLA's `sharding-propagation` pass, and
prints the module the pass received and the one it returned.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 /work/oracle/venv/bin/python \
        scripts/spmd_xla_oracle.py CASE.hlo [N]

Used to settle the expected shardings of the filetests in testdata/spmd that XLA's own test
file has no case for. XLA's pipeline runs the pass with is_spmd=true and the module's
`allow_spmd_sharding_propagation_to_*` settings (put them in the `HloModule` line), after a few
cleanup passes; compare with the "before" module, whose names follow XLA's (`.1` suffixes).
"""
import os, sys, tempfile
import jax
from jax._src.lib import xla_client as xc
from jaxlib import _hlo

path = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
text = open(path).read()
m = _hlo.hlo_module_from_text(text)
mlir = xc._xla.mlir.hlo_to_stablehlo(m.as_serialized_hlo_module_proto())
opts = xc.CompileOptions()
opts.num_replicas = 1
opts.num_partitions = n
opts.executable_build_options.use_spmd_partitioning = True
d = tempfile.mkdtemp()
dbg = opts.executable_build_options.debug_options
dbg.xla_dump_to = d
dbg.xla_dump_hlo_pass_re = "sharding-propagation"
client = jax.devices()[0].client
devs = jax.devices()[:n]
try:
    client.compile_and_load(mlir, xc.DeviceList(tuple(devs)), opts)
except Exception as e:
    print("compile error (dumps may still exist):", e, file=sys.stderr)
files = sorted(os.listdir(d))
for which in ["before", "after"]:
    f = [x for x in files if f".{which}_sharding-propagation." in x and x.endswith(".txt")]
    print(f"===== {which}: {f}")
    if f:
        print(open(os.path.join(d, f[0])).read())
