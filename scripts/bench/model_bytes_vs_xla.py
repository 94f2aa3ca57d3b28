#!/usr/bin/env python3
"""Collective bytes per device of every jax model in testdata: Tessera's pipeline beside XLA's
partitioned module (issue 34's table in docs/spmd-partitioning.md).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 .deps/python/bin/python \\
        scripts/bench/model_bytes_vs_xla.py [NAME_FILTER]

Ours: `tessera compile FILE --num-partitions 8` (the binary from $TESSERA, default
target/debug/tessera) on the module jax hands over (before propagation), as
crates/compile/tests/models.rs compiles it. XLA's:
- testdata/dumps (both jax modes): the module XLA's own run left right after its
  `spmd-partitioning` pass (`*.after-spmd.txt`, stored beside the input);
- testdata/models, testdata/examples and testdata/compile: XLA compiling the same text for 8
  partitions (spmd_bytes_vs_xla.py's `xla_after`: XLA's propagation, then its partitioner),
  in a child process; the gap models (testdata/compile/gap_*) are in byte_gap_models.py,
  which compiles them through jax in each mode.
Both counted by spmd_bytes_vs_xla.py's `moved` (ORACLE.md's formulas, bytes each device
receives). Development only (needs the jax venv), never part of the tests.
"""
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spmd_bytes_vs_xla import moved  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DUMPS = ["mlp", "transformer_block", "convnet", "embedding", "scan_loop", "topk", "cond",
         "shard_map"]
MODELS = ["mlp", "convnet", "embedding", "transformer_block", "transformer4"]
EXAMPLES = ["mlp_train_step", "transformer_train_step"]
COMPILE = ["explicit_unreduced_matmul", "explicit_unreduced_chain", "explicit_mlp_step",
           "partial_manual_gather_scatter", "constraint.gspmd", "constraint.shardy",
           "shard_map2.gspmd", "shard_map2.shardy"]


def ours(path):
    tessera = os.environ.get("TESSERA", os.path.join(ROOT, "target", "debug", "tessera"))
    with tempfile.TemporaryDirectory() as tmp:
        dst = os.path.join(tmp, "out.hlo")
        r = subprocess.run([tessera, "compile", path, "--num-partitions", "8", "-o", dst],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None, r.stderr.strip().splitlines()[-1][:120]
        return moved(open(dst).read(), 8), None


def xla(path):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spmd_bytes_vs_xla.py")
    r = subprocess.run([sys.executable, script, "--xla-after", path, "8"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        why = [l for l in r.stderr.splitlines() if "rror" in l or "Check failed" in l]
        return None, (why[-1] if why else f"exit {r.returncode}")[:120]
    return moved(r.stdout, 8), None


def rows():
    for name in DUMPS:
        for mode in ("gspmd", "shardy"):
            base = os.path.join(ROOT, "testdata", "dumps", f"{name}.{mode}")
            after = open(base + ".after-spmd.txt").read()
            yield (f"dumps/{name}", mode, base + ".before-propagation.txt",
                   (moved(after, 8), None), "XLA's run (after-spmd dump)")
    for name in MODELS:
        path = os.path.join(ROOT, "testdata", "models", f"{name}.before-propagation.hlo")
        yield f"models/{name}", "gspmd", path, xla(path), "XLA compiling the text"
    for name in EXAMPLES:
        path = os.path.join(ROOT, "testdata", "examples", f"{name}.hlo")
        yield f"examples/{name}", "gspmd", path, xla(path), "XLA compiling the text"
    for name in COMPILE:
        path = os.path.join(ROOT, "testdata", "compile", f"{name}.hlo")
        mode = "shardy" if "xla.sdy." in open(path).read() else "gspmd"
        yield f"compile/{name.split('.')[0]}", mode, path, xla(path), "XLA compiling the text"


def main(filt):
    print("| model | jax mode | our collectives | our bytes | XLA collectives | XLA bytes | XLA's module |")
    print("|---|---|---|---|---|---|---|")
    notes = []
    for name, mode, path, (x, xwhy), src in rows():
        if filt and filt not in name:
            continue
        o, owhy = ours(path)
        oc, ob = o if o else ("-", None)
        xc, xb = x if x else ("-", None)
        fmt = lambda b: "-" if b is None else f"{b:,}"  # noqa: E731
        mark = " **more**" if ob is not None and xb is not None and ob > xb else ""
        print(f"| {name} | {mode} | {oc} | {fmt(ob)}{mark} | {xc} | {fmt(xb)} | {src} |")
        if owhy:
            notes.append(f"{name} ({mode}): ours failed: {owhy}")
        if xwhy:
            notes.append(f"{name} ({mode}): XLA failed: {xwhy}")
    for n in notes:
        print(n)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
