#!/usr/bin/env bash
# The main job on the bundled example: a jax-made training step of one transformer block
# sharded on a 2x4 mesh (testdata/examples/transformer_train_step.hlo, as jax's
# `lower().as_text()` gives it; scripts/fixtures/make_examples.py made it). Installs the PJRT CPU plugin
# (idempotent), builds the `tessera` driver, and compiles the module for 8 devices:
# sharding propagation, SPMD partitioning, scheduling, verified on 8 PJRT CPU devices against
# the original on one, with the report (pass times, peak memory per device, collectives and
# why each exists, warnings). The per-device program is written to
# target/example/transformer_train_step.per_device.hlo; then the same within 70% of its per-device
# peak memory (.per_device.70.hlo). Needs nothing but cargo and Python's pip.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

EXAMPLE="testdata/examples/transformer_train_step.hlo"
OUT="target/example/transformer_train_step.per_device.hlo"
bash scripts/install-build-tools.sh
bash scripts/install-pjrt.sh
cargo build --release --quiet -p tessera-cli
TESSERA="${CARGO_TARGET_DIR:-target}/release/tessera"
mkdir -p "$(dirname "${OUT}")"

echo "== tessera compile ${EXAMPLE} --num-partitions 8 --verify --report -o ${OUT}"
# The plugin's own log lines (absl, the GSPMD deprecation notice) are noise here.
REPORT="target/example/transformer_train_step.report.txt"
"${TESSERA}" compile "${EXAMPLE}" --num-partitions 8 --verify --report -o "${OUT}" \
  2> >(grep -v -e '^WARNING: All log messages' -e '^I0000' -e '^W0000' -e 'GSPMD' >&2) \
  | tee "${REPORT}"
echo "== wrote ${OUT} ($(grep -c '' "${OUT}") lines)"

# Again within 70% of that per-device peak: rematerialization recomputes activations instead
# of keeping them live, and the result is verified the same way (docs/compile.md, *A 70%
# memory limit*).
PEAK="$(awk '$1 == "after" && $2 == "partitioning:" { print $3 }' "${REPORT}")"
LIMIT=$((PEAK * 7 / 10))
OUT70="target/example/transformer_train_step.per_device.70.hlo"
echo "== tessera compile ${EXAMPLE} --num-partitions 8 --memory-limit ${LIMIT} --verify --report -o ${OUT70}"
echo "   (70% of the per-device peak ${PEAK}; the report's memory part and the verdict)"
"${TESSERA}" compile "${EXAMPLE}" --num-partitions 8 --memory-limit "${LIMIT}" --verify --report \
  -o "${OUT70}" \
  2> >(grep -v -e '^WARNING: All log messages' -e '^I0000' -e '^W0000' -e 'GSPMD' >&2) \
  | awk '/^peak memory per device/ { on = 1 } on && /^$/ { on = 0 } on || /equivalent on/'
echo "== wrote ${OUT70} ($(grep -c '' "${OUT70}") lines)"
