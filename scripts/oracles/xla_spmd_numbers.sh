#!/usr/bin/env bash
# Executes XLA's own SPMD partitioning of filetests and compares it with the original, as the
# tests do for ours: which cases does a given XLA partition to wrong numbers? For the notes and
# docs/spmd-partitioning.md; development only (needs a jax venv), never part of the tests.
#
#   PYTHON=VENV/bin/python bash scripts/oracles/xla_spmd_numbers.sh testdata/spmd-partitioning/scatter-*.hlo
#
# XLA's side is the module right after its `spmd-partitioning` pass (scripts/bench/spmd_bytes_vs_xla.py
# --xla-after, XLA of the venv's jaxlib, large constants printed whole: XLA's dump elides them as
# `{...}` otherwise, which reads back as zeros); it runs on the PJRT CPU plugin through `tessera
# compare` against the original on one device, with compare's default seed and tolerances. One
# line per file: `equal`, `DIFFERS` (with compare's first failing line) or `xla-refused`.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-/work/venv/bin/python}
TESSERA=${TESSERA:-target/release/tessera}
out=$(mktemp -d)
for f in "$@"; do
  n=$(grep -o 'num_partitions=[0-9]*' "$f" | head -1 | cut -d= -f2)
  name=$(basename "$f")
  if ! XLA_FLAGS="--xla_force_host_platform_device_count=8 --xla_dump_large_constants=true" "$PYTHON" scripts/bench/spmd_bytes_vs_xla.py \
      --xla-after "$f" "$n" > "$out/xla.hlo" 2> "$out/err"; then
    echo "$name xla-refused"
    continue
  fi
  if "$TESSERA" compare --devices "$n" "$f" "$out/xla.hlo" > "$out/cmp" 2>&1; then
    echo "$name equal"
  else
    echo "$name DIFFERS: $(grep -v -e '^WARNING' -e '^I0000' -e ': ok' "$out/cmp" | head -1)"
  fi
done
rm -rf "$out"
