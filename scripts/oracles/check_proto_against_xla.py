#!/usr/bin/env python3
"""Checks Tessera's HloModuleProto encoding against XLA's own (jaxlib), both ways.

For every corpus module XLA's parser accepts:
  XLA text -> XLA's HloModuleProto bytes -> Tessera (decode, Module, encode) -> bytes
  -> XLA reads them back -> XLA's printout, which must equal XLA's printout of its own bytes.
This shows that Tessera decodes everything XLA writes and that XLA reads back what Tessera
writes, field for field as far as XLA's printer shows. A hand-built Tessera module
(`proto_roundtrip --sample`) is also fed to XLA and its printout checked.

jax is not a dependency of the product; run with the oracle venv:
  cargo build -p tessera-hlo --example proto_roundtrip
  /work/oracle/venv/bin/python scripts/oracles/check_proto_against_xla.py [--corpus DIR] [--limit N]
Exit status 0 when every module matched.
"""
import argparse
import difflib
import os
import subprocess
import sys
import tempfile

from jaxlib import _hlo

from corpus_oracle import modules

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def first_diff(a, b):
    for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")):
            continue
        return line
    return "(lengths differ)"


def blocks(text):
    return sorted(text.split("\n\n"))


def check_sample(binary, tmp):
    out = os.path.join(tmp, "sample.pb")
    subprocess.run([binary, "--sample", out], check=True, capture_output=True)
    text = _hlo.HloModule.from_serialized_hlo_module_proto(open(out, "rb").read()).to_string()
    expected = [
        "%p0 = f32[4,8]{1,0} parameter(0), sharding={devices=[2,1]<=[2]}",
        "replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%add",
        "%h = bf16[2]{0} constant({1, -2})",
        "%q = s4[3]{0} constant({1, -1, 7})",
        "ROOT %t = (f32[4,2]{1,0}, bf16[2]{0}, s4[3]{0}) tuple(%ar, %h, %q)",
    ]
    missing = [e for e in expected if e not in text]
    print(f"sample module: XLA reads it; {len(expected) - len(missing)}/{len(expected)} expected lines present")
    for e in missing:
        print(f"  missing: {e}")
    return not missing


def main():
    ap = argparse.ArgumentParser()
    default_corpus = os.path.join(ROOT, "..", "shared", "corpus", "xla-hlo")
    if not os.path.isdir(default_corpus):  # a git worktree below /work/wt
        default_corpus = os.path.join(ROOT, "..", "..", "shared", "corpus", "xla-hlo")
    ap.add_argument("--corpus", default=default_corpus)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "debug", "examples", "proto_roundtrip"))
    ap.add_argument("--limit", type=int, default=0, help="stop after N modules (0 = all)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()

    files = []
    for d, _, names in os.walk(args.corpus):
        files += [os.path.join(d, n) for n in names if n.endswith(".hlo")]
    files.sort()

    tmp = tempfile.mkdtemp(prefix="tessera-proto-")
    ok = check_sample(args.bin, tmp)

    cases = []  # (label, xla_text, in_path, out_path)
    text_cases = []  # the same, from HLO text through Tessera's parser
    rejected = 0
    for f in files:
        for k, mod in enumerate(modules(open(f, encoding="utf-8", errors="replace").read())):
            if args.limit and len(cases) >= args.limit:
                break
            label = f"{os.path.relpath(f, args.corpus)}:{k}"
            try:
                m = _hlo.hlo_module_from_text(mod)
                data = m.as_serialized_hlo_module_proto()
                ref = _hlo.HloModule.from_serialized_hlo_module_proto(data).to_string()
            except Exception:
                rejected += 1
                continue
            n = len(cases)
            inp, outp = os.path.join(tmp, f"{n}.in.pb"), os.path.join(tmp, f"{n}.out.pb")
            open(inp, "wb").write(data)
            cases.append((label, ref, inp, outp))
            # The same text through Tessera's parser.
            tin, tout = os.path.join(tmp, f"{n}.in.hlo"), os.path.join(tmp, f"{n}.text.pb")
            open(tin, "w", encoding="utf-8").write(mod)
            text_cases.append((label, ref, tin, tout))

    ok = report("XLA proto -> Tessera -> XLA", cases, args) and ok
    # Tessera's parser + encoder against XLA's parser: what PJRT gets from a text file.
    ok = report("HLO text -> Tessera parser -> proto -> XLA", text_cases, args) and ok
    print(f"({rejected} corpus modules XLA's parser rejects were skipped)")
    sys.exit(0 if ok else 1)


def run_tessera(binary, cases):
    results = {}
    batch = 100
    for i in range(0, len(cases), batch):
        argv = [binary]
        for _, _, inp, outp in cases[i : i + batch]:
            argv += [inp, outp]
        r = subprocess.run(argv, capture_output=True, text=True)
        for line in r.stdout.splitlines():
            kind, rest = line.split(" ", 1)
            path = rest.split(" ", 1)[0].rstrip(":")
            if kind == "error":
                path = path.split(":")[0] if path.endswith(".hlo") or ".hlo:" in path else path
            results[path] = (kind, rest)
    return results


def report(title, cases, args):
    results = run_tessera(args.bin, cases)
    matched, decode_errors, xla_refused, differ, reordered = 0, [], [], [], []
    for label, ref, inp, outp in cases:
        kind, rest = results.get(inp, ("error", "no result"))
        if kind != "ok":
            decode_errors.append((label, rest))
            continue
        try:
            ours = _hlo.HloModule.from_serialized_hlo_module_proto(open(outp, "rb").read()).to_string()
        except Exception as e:  # XLA refused our bytes
            xla_refused.append((label, str(e).splitlines()[0]))
            continue
        if ours == ref:
            matched += 1
        elif blocks(ours) == blocks(ref):
            # XLA prints computations in an order derived from its instruction ids, which
            # encode creation order; Tessera numbers instructions by position instead.
            reordered.append(label)
        else:
            differ.append((label, first_diff(ref, ours)))

    total = len(cases)
    print(f"{title}: {total} corpus modules")
    print(f"  identical XLA printout:                   {matched}/{total}")
    print(f"  identical up to XLA's computation order:  {len(reordered)}")
    print(f"  Tessera could not read the input:         {len(decode_errors)}")
    print(f"  XLA refused Tessera's proto:              {len(xla_refused)}")
    print(f"  XLA printout differs:                     {len(differ)}")
    groups = (("decode errors", decode_errors), ("refused", xla_refused), ("differs", differ))
    for title, items in groups:
        for label, msg in items[: (None if args.verbose else 15)]:
            print(f"  [{title}] {label}: {msg}")
    return matched + len(reordered) == total


if __name__ == "__main__":
    main()
