#!/usr/bin/env bash
# The main job on the bundled example: a jax-made MLP training step sharded on a 2x4 mesh.
# Builds the `tessera` driver, prints the module in canonical form, verifies it, and prints a
# summary. Idempotent; needs nothing but cargo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

EXAMPLE="testdata/examples/mlp_train_step.hlo"
cargo build --release --quiet -p tessera-cli
TESSERA=target/release/tessera

echo "== tessera fmt ${EXAMPLE} (first 20 lines)"
"${TESSERA}" fmt "${EXAMPLE}" | head -n 20
echo "== tessera verify ${EXAMPLE}"
"${TESSERA}" verify "${EXAMPLE}"
echo "== tessera summary ${EXAMPLE}"
"${TESSERA}" summary "${EXAMPLE}"
