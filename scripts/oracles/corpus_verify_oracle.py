#!/usr/bin/env python3
"""Asks XLA's own verifier which corpus modules it rejects.

Usage: corpus_verify_oracle.py CORPUS_DIR ORACLE_BINARY OUT_VERIFY_REJECTS [CANDIDATES]

jaxlib's `_hlo.hlo_module_from_text` parses but does NOT run XLA's HloVerifier (a module with a
wrong dot shape parses fine), so each module is serialized to an `xla.HloModuleProto` and
compiled with the PJRT CPU plugin by ORACLE_BINARY (build it with
`cargo build -p tessera-runtime --example xla_verify_oracle`; it lands in
target/debug/examples/). The CPU compiler runs the HloVerifier (layout-insensitive) at the start
of its first pass pipeline; its errors read `during context [hlo verifier]: ... Failed after
pipeline-start`. Errors from later passes or from code generation (unsupported custom calls,
scaled-dot on CPU, ...) mean the verifier accepted the module. A process that dies without an
answer (XLA CHECK-fails inside the verifier on some malformed async ops) counts as a reject.

Modules are indexed as in scripts/oracles/corpus_oracle.py. Compiling all ~700 modules takes many
minutes (large ones go through LLVM), so CANDIDATES, a file of `path.hlo:INDEX` lines, limits
the run to those (e.g. the modules Tessera's verifier rejects). Compiles use 1 replica and 1
partition, so replica-group sizes are checked against 1, which XLA's verifier treats as
unknown.

Known artifact: the plugin's XLA reads iota replica groups (`[1,128]<=[128]`) from the proto
of this jaxlib as empty groups and then refuses use_global_device_ids=true with "Replica groups
must be specified in flattened-id mode". Such rejections are dropped (the text has the groups).
"""
import os
import subprocess
import sys
import tempfile

from jaxlib import _hlo

from corpus_oracle import corpus_modules

ARTIFACTS = ["Replica groups must be specified in flattened-id mode"]

# Modules the plugin cannot load as a whole (an opcode newer than the plugin's XLA), checked by
# hand: the module minus the computations holding the unknown opcode, compiled the same way.
MANUAL = {
    "xla/hlo/translate/hlo_to_mhlo/tests/import.hlo:0": "(checked without its scan computation) "
    "HLO all-to-all has operands with different shapes: the 0th operand shape f32[128,4], but "
    "the 1th operand has shape f32[128,4] (layouts differ); for instruction %all-to-all.1",
}


def classify(proc):
    line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    parts = line.split("\t")
    if len(parts) < 2:
        return "crash", f"the compiler died (exit {proc.returncode}) without an answer"
    if parts[1] == "ok":
        return "ok", ""
    msg = parts[2] if len(parts) > 2 else ""
    if "during context [hlo verifier]" in msg and (
        "Failed after pipeline-start" in msg or "Failed after" not in msg
    ):
        msg = msg.split("during context [hlo verifier]: ", 1)[-1]
        if any(a in msg for a in ARTIFACTS):
            return "artifact", msg
        return "verifier", msg
    return "later", msg


def main():
    corpus, binary, out = sys.argv[1], sys.argv[2], sys.argv[3]
    wanted = None
    if len(sys.argv) > 4:
        with open(sys.argv[4], encoding="utf-8") as fh:
            wanted = {l.split("\t")[0].strip() for l in fh if l.strip() and not l.startswith("#")}
    total, checked, rejects, notes = 0, 0, [], {}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    with tempfile.TemporaryDirectory() as tmp:
        for rel, i, m in corpus_modules(corpus):
            total += 1
            name = f"{rel}:{i}"
            if wanted is not None and name not in wanted:
                continue
            try:
                proto = _hlo.hlo_module_from_text(m).as_serialized_hlo_module_proto()
            except Exception:
                continue  # XLA's parser rejects it: listed in xla_rejects.txt
            pb = os.path.join(tmp, "m.pb")
            with open(pb, "wb") as fh:
                fh.write(proto)
            checked += 1
            try:
                proc = subprocess.run([binary, pb], capture_output=True, text=True, env=env, timeout=300)
                kind, msg = classify(proc)
            except subprocess.TimeoutExpired:
                kind, msg = "later", "timeout"
            notes[kind] = notes.get(kind, 0) + 1
            if kind in ("verifier", "crash"):
                rejects.append(f"{name}\t{msg[:200]}")
            print(f"{name}\t{kind}", file=sys.stderr)
    for name, msg in MANUAL.items():
        if (wanted is None or name in wanted) and not any(r.startswith(name + "\t") for r in rejects):
            rejects.append(f"{name}\t{msg}")
            notes["manual"] = notes.get("manual", 0) + 1
    rejects.sort()
    scope = "all modules" if wanted is None else f"{checked} candidate modules"
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(
            f"# {total} modules; XLA's verifier rejects {len(rejects)} of the {scope} it was asked about"
            f" ({', '.join(f'{k}: {v}' for k, v in sorted(notes.items()))}). Made by scripts/oracles/corpus_verify_oracle.py.\n"
        )
        for r in rejects:
            fh.write(r + "\n")
    print(f"checked {checked}, rejected {len(rejects)}: {notes}")


if __name__ == "__main__":
    main()
