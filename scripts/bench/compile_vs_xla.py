#!/usr/bin/env python3
"""XLA's side of docs/compile.md's table: for each model of make_spmd_models.py, XLA's own
compile of the same module Tessera compiles (testdata/models/<name>.before-propagation.hlo),
with its per-device program right after `spmd-partitioning` and the times of its
`sharding-propagation` and `spmd-partitioning` passes from its pass-pipeline log.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 VENV/bin/python \\
        scripts/bench/compile_vs_xla.py OUTDIR [NAME...] [--runs N]

Writes OUTDIR/<name>.xla-after-spmd.hlo (XLA's partitioned module, text from its proto dump)
and OUTDIR/<name>.xla-times.txt (one line per compilation: `propagation_ms partitioning_ms`).
Then `cargo run --release -p tessera-compile --example compile_table -- OUTDIR NAME...` runs
Tessera's pipeline on the same modules and prints the table rows (scripts/compile_vs_xla.sh
runs both, back to back). Development only: jax is never a dependency of Tessera.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import make_spmd_models as models  # noqa: E402  (sets jax_use_shardy_partitioner=False)


# XLA logs `HLO pass: NAME time: 366 us (...)`, in us, ms or s.
PASS = r"HLO pass: %s time: ([\d.]+) (us|ms|s)\b"


def ms(value, unit):
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def compile_runs(name, runs, out):
    """`runs` compilations in a child process that logs pass times; the first one also dumps
    the module right after spmd-partitioning, written to OUT/<name>.xla-after-spmd.hlo."""
    d = tempfile.mkdtemp()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="hlo_pass_pipeline=1")
    opts = {
        "xla_dump_to": d,
        "xla_dump_hlo_pass_re": "spmd-partitioning",
        "xla_dump_disable_metadata": True,
        "xla_dump_hlo_as_text": True,
        "xla_dump_hlo_as_proto": True,
    }
    code = (
        "import sys; sys.path.insert(0, %r); import make_spmd_models as s\n"
        "s.lowered(%r).compile(compiler_options=%r)\n"
        "for _ in range(%d - 1): s.lowered(%r).compile()\n"
    ) % (os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"), name, opts, runs, name)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    files = sorted(os.listdir(d))
    fs = [f for f in files if ".after_spmd-partitioning." in f]
    if not fs:
        raise SystemExit(f"{name}: no spmd-partitioning dump in {d}: {files[:20]}\n{r.stderr[-2000:]}")
    pb = os.path.join(d, next(f for f in fs if f.endswith(".pb")))
    txt = os.path.join(d, next(f for f in fs if f.endswith(".txt")))
    with open(os.path.join(out, f"{name}.xla-after-spmd.hlo"), "w") as f:
        f.write(models.module_text(pb, txt))
    shutil.rmtree(d)
    prop = [ms(v, u) for v, u in re.findall(PASS % "sharding-propagation", r.stderr)]
    part = [ms(v, u) for v, u in re.findall(PASS % "spmd-partitioning", r.stderr)]
    if not prop or not part:
        raise SystemExit(f"{name}: no pass times in XLA's log:\n{r.stderr[-2000:]}")
    return list(zip(prop, part))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    runs = 3
    if "--runs" in sys.argv:
        runs = int(sys.argv[sys.argv.index("--runs") + 1])
        args = [a for a in args if a != str(runs)]
    if not args:
        raise SystemExit(__doc__)
    out, names = args[0], args[1:] or list(models.MODELS)
    os.makedirs(out, exist_ok=True)
    for name in names:
        times = compile_runs(name, max(runs, 1), out)
        with open(os.path.join(out, f"{name}.xla-times.txt"), "w") as f:
            for p, q in times:
                f.write(f"{p} {q}\n")
        print(name, "XLA propagation/partitioning ms:", times)


if __name__ == "__main__":
    main()
