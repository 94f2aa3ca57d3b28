#!/usr/bin/env python3
"""Run XLA's own `sharding-propagation` on an HLO text file and print its answer.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 /work/oracle/venv/bin/python \
        scripts/oracles/xla_propagation_oracle.py FILE.hlo [NUM_PARTITIONS] [--before | --both] [--names]
        scripts/oracles/xla_propagation_oracle.py FILE.hlo NUM_PARTITIONS [RUNS] --time [--spmd]

The module (`// ...` lines dropped, so filetests work as they are) is parsed by XLA, converted
to StableHLO and compiled by jax's XLA with NUM_PARTITIONS (default 8) partitions and Shardy
off; the module XLA dumps right after (or, with --before, right before; with --both, both, each
under a `===== before` / `===== after` heading) its `sharding-propagation` pass is printed.
--names prints one `name sharding` line per instruction instead (`(none)` where XLA left none).
--time [RUNS] instead compiles the module RUNS times (default 3) in a child process with XLA's
pass-pipeline log on (and LLVM at -O0, which does not touch the HLO passes) and prints how long
XLA's `sharding-propagation` pass took each time; with --spmd, its `spmd-partitioning` pass
(give it a module whose shardings are already propagated, e.g. an *.after-propagation.hlo).
The child is stopped once the pass's time is logged; it gets NUM_PARTITIONS host devices.

Used to settle the expected shardings of the filetests in testdata/spmd that XLA's own test
file has no case for (the `prop-*.hlo` files and Tessera's own gather/scatter cases). XLA's
pipeline runs the pass with is_spmd=true and the module's `allow_spmd_sharding_propagation_to_*`
settings (put them in the `HloModule` line), after a few cleanup passes.

Caveats: the passes XLA runs before propagation may rewrite the module (an `s32[8,1]` iota
becomes a reshape of an `s32[8]` one, the root becomes a tuple, tuple elements of loops may be
reordered, instruction names get `.N` suffixes), so compare by meaning; device ids in shardings
must be below NUM_PARTITIONS. A research tool for checking ported expectations, not a
dependency of anything.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

import jax
import numpy as np
from jax._src.lib import xla_client as xc
from jaxlib import _hlo

jax.config.update("jax_use_shardy_partitioner", False)


def time_pass(path, n, runs, pass_name="sharding-propagation"):
    """XLA's times (ms) of `pass_name` from its pass-pipeline log, one per compilation.

    Each compilation runs in a child process that is stopped as soon as the pass's log line
    appears (the rest of the compilation would take minutes on a 17k-instruction module and
    tells nothing about the pass)."""
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", ""))
    flags += f" --xla_force_host_platform_device_count={n}"
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="0",
        TF_CPP_VMODULE="hlo_pass_pipeline=1",
        XLA_FLAGS=flags
        + " --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true",
    )
    line = re.compile(r"HLO pass: " + re.escape(pass_name) + r" time: ([\d.]+) (us|ms|s)\b")
    times = []
    for _ in range(runs):
        child = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), path, str(n), "--names"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        found, tail = None, []
        for log in child.stderr:
            tail = (tail + [log])[-40:]
            found = line.search(log)
            if found:
                break
        child.kill()
        child.wait()
        if not found:
            sys.exit(f"no {pass_name} time in XLA's log:\n" + "".join(tail))
        value, unit = found.groups()
        times.append(float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit])
    print(f"XLA {pass_name} on {path} ({n} devices): {times} ms; median {np.median(times)}")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    path = args[0]
    n = int(args[1]) if len(args) > 1 else 8
    if "--time" in flags:
        pass_name = "spmd-partitioning" if "--spmd" in flags else "sharding-propagation"
        time_pass(path, n, int(args[2]) if len(args) > 2 else 3, pass_name)
        return
    text = "\n".join(l for l in open(path).read().splitlines() if not l.startswith("//"))
    proto = _hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    mlir = xc._xla.mlir.hlo_to_stablehlo(proto)
    opts = xc.CompileOptions()
    eb = opts.executable_build_options
    eb.num_partitions = n
    eb.num_replicas = 1
    eb.use_spmd_partitioning = True
    eb.device_assignment = xc.DeviceAssignment.create(np.arange(n).reshape(1, n))
    dump = tempfile.mkdtemp()
    eb.debug_options.xla_dump_to = dump
    eb.debug_options.xla_dump_hlo_pass_re = "sharding-propagation"
    client = jax.devices()[0].client
    try:
        client.compile_and_load(mlir, jax.devices()[:n], opts)
    except Exception as e:  # compilation after propagation may fail; the dump is what matters
        print(f"note: compile stopped: {str(e)[:300]}", file=sys.stderr)
    if "--both" in flags:
        stages = ["before", "after"]
    else:
        stages = ["before" if "--before" in flags else "after"]
    for stage in stages:
        pattern = f"*{stage}_sharding-propagation*.txt"
        files = sorted(glob.glob(os.path.join(dump, pattern)))
        if not files:
            sys.exit(f"no {pattern} dump in {dump}")
        if len(stages) > 1:
            print(f"===== {stage}: {os.path.basename(files[0])}")
        out = open(files[0]).read()
        if "--names" in flags:
            print_names(out)
        else:
            print(out)


def print_names(out):
    """One `name sharding` line per instruction of the dumped module."""
    for line in out.splitlines():
        line = re.sub(r", metadata=\{[^}]*\}", "", line)
        m = re.match(r"\s+(?:ROOT )?%(\S+) = (.*)$", line)
        if not m:
            continue
        s = re.search(r"sharding=(\{.*\})$", m.group(2))
        print(m.group(1), s.group(1) if s else "(none)")


if __name__ == "__main__":
    main()
