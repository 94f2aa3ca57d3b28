#!/usr/bin/env python3
"""Partitions the deduplicated sharded train step with XLA's own SPMD partitioner, as the
fixture of the CLI round trip `tessera compare IN OUT_PARTITIONED --devices 4`
(crates/cli/tests/dedup_cli.rs), until Tessera's partitioner is on main.

    cargo build -p tessera-cli
    VENV/bin/python scripts/make_dedup_partitioned.py

Runs `tessera opt testdata/dedup/modules/train_step_sharded.hlo --passes variable-dedup`,
compiles the result for 4 partitions through jaxlib (HLO text -> XLA's parser -> StableHLO ->
compile with SPMD partitioning, dumping the spmd-partitioning pass), and writes the module right
after `spmd-partitioning` to testdata/dedup/modules/train_step_sharded.dedup.after_spmd.hlo.
XLA keeps the module's frontend attributes, so the fixture still carries the argument map.
"""
import glob
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
from jax._src.lib import xla_client as xc  # noqa: E402
from jaxlib import _hlo  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "testdata", "dedup", "modules", "train_step_sharded.hlo")
OUT = os.path.join(ROOT, "testdata", "dedup", "modules", "train_step_sharded.dedup.after_spmd.hlo")
N = 4


def main():
    tessera = os.environ.get("TESSERA", os.path.join(ROOT, "target", "debug", "tessera"))
    text = subprocess.run(
        [tessera, "opt", SRC, "--passes", "variable-dedup"],
        check=True, capture_output=True, text=True,
    ).stdout
    module = _hlo.hlo_module_from_text(text)
    mlir = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    opts = xc.CompileOptions()
    opts.num_partitions = N
    opts.num_replicas = 1
    build = opts.executable_build_options
    build.use_spmd_partitioning = True
    dump = tempfile.mkdtemp()
    build.debug_options.xla_dump_to = dump
    build.debug_options.xla_dump_hlo_pass_re = "spmd-partitioning"
    jax.devices()[0].client.compile_and_load(mlir, jax.devices()[:N], opts)
    (after,) = glob.glob(os.path.join(dump, "*after_spmd-partitioning*"))
    with open(after) as f, open(OUT, "w") as g:
        g.write(f.read())
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
