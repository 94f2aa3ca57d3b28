#!/usr/bin/env python3
"""Bytes moved per device by Tessera's and by XLA's SPMD partitioner on the same filetests.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 VENV/bin/python \
        scripts/bench/spmd_bytes_vs_xla.py testdata/spmd-partitioning/reduce-window-*.hlo ...

For each file: Tessera's output is `tessera opt FILE --passes spmd-partitioning` (the binary
from $TESSERA, default target/debug/tessera); XLA's is the module right after its
`spmd-partitioning` pass when jaxlib compiles the same text for the file's num_partitions
(HLO text -> XLA's parser -> StableHLO -> compile with SPMD partitioning, the pass dumped).
Both outputs are counted by the same code with ORACLE.md's formulas (bytes each device
receives; g is the replica-group size): all-gather out*(g-1)/g, all-reduce 2*out*(g-1)/g,
reduce-scatter out*(g-1), all-to-all out*(g-1)/g, collective-permute out. Prints one line per
file and a summary; development only (needs the jax venv), never part of the tests.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

import jax
from jax._src.lib import xla_client as xc
from jaxlib import _hlo

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
         "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
LINE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+(" + "|".join(KINDS) + r")(?:-start)?\(")
ARRAY = re.compile(r"\b(" + "|".join(BYTES) + r")\[([\d,]*)\]")


def shape_bytes(text):
    total = 0
    for ty, dims in ARRAY.findall(text):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * BYTES[ty]
    return total


def group_size(line, n):
    # XLA's mesh form: `replica_groups=mesh['data'=2,'model'=4] {'model'}`, groups over the
    # axes named in braces (a sub-axis `'model':(1)2` counts its size after the colon).
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    if m:
        sizes = {a: int(k) for a, k in re.findall(r"'([^']+)'=(\d+)", m.group(1))}
        g = 1
        for ref in re.findall(r"'([^']+)'(?::\((\d+)\)(\d+))?", m.group(2)):
            g *= int(ref[2]) if ref[2] else sizes[ref[0]]
        return g
    m = re.search(r"replica_groups=\[([\d,]+)\]<=", line)
    if m:
        return int(m.group(1).split(",")[-1])
    m = re.search(r"replica_groups=\{(\{[\d,]*\})", line)
    if m and m.group(1) != "{}":
        return len(m.group(1).strip("{}").split(","))
    return n


COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*[(]")
WHILE = re.compile(r"\bwhile\(.*condition=%?([\w.\-]+), body=%?([\w.\-]+)")


def trips(text):
    """Each while body's trip count (times its caller's), for the loops whose condition
    compares the counter with one s32 constant (Tessera's windowed loops, XLA's too); other
    bodies count once."""
    comps, cur = {}, None
    for line in text.splitlines():
        m = COMP.match(line)
        if m and line.rstrip().endswith("{"):
            cur = m.group(1)
            comps[cur] = []
        elif cur:
            comps[cur].append(line)
    count = {}
    for name, lines in comps.items():
        for line in lines:
            m = WHILE.search(line)
            if not m:
                continue
            consts = [int(c) for l in comps.get(m.group(1), [])
                      for c in re.findall(r"s32\[\] constant\((\d+)\)", l)]
            count[m.group(2)] = (name, consts[0] if len(consts) == 1 else 1)

    def times(name, depth=0):
        if name not in count or depth > 20:
            return 1
        caller, k = count[name]
        return k * times(caller, depth + 1)

    return comps, times


def moved(text, n):
    """(collectives, bytes each device receives) of a partitioned module's text; a
    collective in a while body counts once per trip."""
    comps, times = trips(text)
    where = {}
    for name, lines in comps.items():
        for line in lines:
            where[line] = name
    count, total = 0, 0
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        k = times(where[line]) if line in where else 1
        shape, kind = m.group(1), m.group(2)
        out = shape_bytes(shape)
        if kind == "collective-permute" and "-start" in line:
            out //= 2  # the start's tuple holds the operand and the result
        g = group_size(line, n)
        count += k
        total += k * {
            "all-gather": out * (g - 1) // g,
            "all-reduce": 2 * out * (g - 1) // g,
            "reduce-scatter": out * (g - 1),
            "all-to-all": out * (g - 1) // g,
            "collective-permute": out,
        }[kind]
    return count, total


def xla_after(text, n):
    module = _hlo.hlo_module_from_text(text)
    mlir = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    opts = xc.CompileOptions()
    opts.num_partitions = n
    opts.num_replicas = 1
    build = opts.executable_build_options
    build.use_spmd_partitioning = True
    # jax's Shardy-mode text (`xla.sdy.*` attributes) goes through XLA's Shardy pipeline.
    build.use_shardy_partitioner = "xla.sdy." in text
    dump = tempfile.mkdtemp()
    build.debug_options.xla_dump_to = dump
    build.debug_options.xla_dump_hlo_pass_re = "spmd-partitioning"
    jax.devices()[0].client.compile_and_load(mlir, jax.devices()[:n], opts)
    (after,) = [f for f in glob.glob(os.path.join(dump, "*after_spmd-partitioning*"))
                if f.endswith(".txt")]
    with open(after) as f:
        return f.read()


def main(paths):
    tessera = os.environ.get("TESSERA", os.path.join(ROOT, "target", "debug", "tessera"))
    rows, at_most, more, failed = [], 0, [], []
    for path in paths:
        text = open(path).read()
        n = int(re.search(r"num_partitions=(\d+)", text).group(1))
        # The file's own RUN-line options (e.g. the windowed-einsum threshold) apply.
        opts = [w for line in text.splitlines() if line.startswith("// RUN:")
                for w in re.findall(r"--pass-option\s+(spmd-partitioning\.\S+)", line)]
        args = [tessera, "opt", path, "--passes", "spmd-partitioning"]
        for o in opts:
            args += ["--pass-option", o]
        ours = subprocess.run(args, check=True, capture_output=True, text=True).stdout
        oc, ob = moved(ours, n)
        # XLA runs in a child process: on some inputs it aborts (a CHECK failure) instead of
        # refusing them.
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--xla-after", path, str(n)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            why = [l for l in r.stderr.splitlines() if "Check failed" in l or "Error" in l]
            failed.append((os.path.basename(path), (why[-1] if why else f"exit {r.returncode}")[:120]))
            continue
        xc_, xb = moved(r.stdout, n)
        name = os.path.basename(path)
        rows.append((name, n, oc, ob, xc_, xb))
        if ob <= xb:
            at_most += 1
        else:
            more.append(name)
    print("| file | devices | our collectives | our bytes | XLA collectives | XLA bytes |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %d | %d | %d | %d |" % r)
    print(f"\n{at_most} of {len(rows)} at most XLA's bytes; more: {', '.join(more) or 'none'}")
    for name, why in failed:
        print(f"XLA failed on {name}: {why}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--xla-after"]:
        sys.stdout.write(xla_after(open(sys.argv[2]).read(), int(sys.argv[3])))
    else:
        main(sys.argv[1:])
