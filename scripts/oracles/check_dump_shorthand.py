#!/usr/bin/env python3
"""Checks Tessera's reading of XLA dump files (the `%x#N` tuple-element shorthand) against
jaxlib's parser: for each file, jaxlib parses the dump itself (A) and Tessera's printing of it
(`tessera fmt FILE`, B). In XLA's proto of each, every computation's instructions are taken in
creation order (their ids) and compared field by field, with ids replaced by names. Equal means
Tessera made the same get-tuple-elements, with the same names, shapes, (absent) sharding and
metadata, at the same places in the instruction sequence, as XLA's parser.

    VENV/bin/python scripts/oracles/check_dump_shorthand.py [--tessera target/debug/tessera] FILE|DIR...

Also checks that Tessera's print is stable (printing its own print gives the same bytes).
Directories are searched for `*.txt`; files that are not HLO modules (buffer assignments,
memory reports) and modules jaxlib rejects are counted and skipped. Development only
(jaxlib); prints one line per file, a total, and exits 1 on any difference.
"""
import glob
import os
import subprocess
import sys

from jaxlib import _hlo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proto_descriptors import fields, varint  # noqa: E402  (the proto wire format, read once)


def packed(v):
    if isinstance(v, int):
        return [v]
    pos, out = 0, []
    while pos < len(v):
        x, pos = varint(v, pos)
        out.append(x)
    return out


def summary(text):
    """{computation name: [instruction fields in id order, ids replaced by names]}"""
    proto = _hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    comps = [fields(v) for f, v in fields(proto) if f == 3]
    comp_names = {}
    instr_names = {}
    for c in comps:
        cid = next((v for f, v in c if f == 5), 0)
        comp_names[cid] = next(v for f, v in c if f == 1).decode()
        for f, v in c:
            if f == 2:
                i = fields(v)
                instr_names[next((x for k, x in i if k == 35), 0)] = next(x for k, x in i if k == 1).decode()
    out = {}
    for c in comps:
        rows = []
        for f, v in c:
            if f != 2:
                continue
            i = fields(v)
            iid = next((x for k, x in i if k == 35), 0)
            row = []
            for k, x in i:
                if k == 35:
                    continue
                if k in (36, 37):
                    row.append((k, tuple(instr_names[o] for o in packed(x))))
                elif k == 38:
                    row.append((k, tuple(comp_names[o] for o in packed(x))))
                else:
                    row.append((k, x))
            rows.append((iid, row))
        rows.sort(key=lambda r: r[0])
        out[comp_names[next((v for f, v in c if f == 5), 0)]] = [r for _, r in rows]
    return out


def main():
    args = sys.argv[1:]
    tessera = "target/debug/tessera"
    if args[:1] == ["--tessera"]:
        tessera, args = args[1], args[2:]
    paths = []
    for arg in args:
        paths += sorted(glob.glob(os.path.join(arg, "**", "*.txt"), recursive=True)) if os.path.isdir(arg) else [arg]
    bad = checked = shorthand = not_modules = rejected = 0
    for path in paths:
        with open(path) as f:
            text = f.read()
        if not text.startswith("HloModule"):
            not_modules += 1
            continue
        try:
            a = summary(text)
        except Exception:
            rejected += 1
            print(f"skip {path}: jaxlib rejects it")
            continue
        checked += 1
        shorthand += "#" in text
        ours = subprocess.run([tessera, "fmt", path], capture_output=True, text=True)
        if ours.returncode:
            print(f"FAIL {path}: {ours.stderr.strip()}")
            bad += 1
            continue
        ours = ours.stdout
        again = subprocess.run([tessera, "fmt", "-"], input=ours, capture_output=True, text=True).stdout
        b = summary(ours)
        diff = None if again == ours else "printing our print gives other bytes"
        if diff:
            pass
        elif sorted(a) != sorted(b):
            diff = f"computations {sorted(a)} vs {sorted(b)}"
        else:
            for name in a:
                if len(a[name]) != len(b[name]):
                    diff = f"{name}: {len(a[name])} vs {len(b[name])} instructions"
                    break
                for n, (x, y) in enumerate(zip(a[name], b[name])):
                    if x != y:
                        diff = f"{name}: instruction {n} differs:\n  xla:     {x}\n  tessera: {y}"
                        break
                if diff:
                    break
        print(f"{'DIFF' if diff else 'same'} {path} ({text.count('#')} '#')" + (f"\n{diff}" if diff else ""))
        bad += diff is not None
    print(
        f"{checked} dump modules read as jaxlib reads them and print-stable: {checked - bad}"
        f" ({shorthand} with %x#N); {rejected} rejected by jaxlib, {not_modules} files not modules"
    )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
