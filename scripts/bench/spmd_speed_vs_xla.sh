#!/usr/bin/env bash
# Tessera's `spmd-partitioning` against XLA's own pass on the same inputs, in one run: jax's
# 48-layer transformer step (testdata/models/transformer48.after-propagation.hlo) on 8 devices
# and, made from it by `gen devices` (tessera_benches::on_more_devices: the same tiles, each
# held by 8 or 64 times as many devices), on 64 and 512. For docs/BENCHMARKS.md.
#
#   bash scripts/bench/spmd_speed_vs_xla.sh [XLA_RUNS]
#
# Ours: the criterion bench `cargo bench -p tessera-benches --bench spmd` (median of 10). XLA:
# scripts/oracles/xla_propagation_oracle.py --time --spmd, XLA_RUNS compilations per device count
# (default 3), each stopped once the pass's time is logged. PYTHON defaults to the jax oracle's
# venv (dev-only; never a dependency of the tests). The variants go to OUT (default
# target/spmd-scaling).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
PYTHON=${PYTHON:-/work/venv/bin/python}
OUT=${OUT:-target/spmd-scaling}
MODEL=testdata/models/transformer48.after-propagation.hlo
mkdir -p "$OUT"
cargo build -q --release -p tessera-benches --example gen
cp "$MODEL" "$OUT/transformer48.8.hlo"
target/release/examples/gen devices "$MODEL" 8 > "$OUT/transformer48.64.hlo"
target/release/examples/gen devices "$MODEL" 64 > "$OUT/transformer48.512.hlo"
echo "# $(date -u '+%F %T') UTC, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in 8 64 512; do
  "$PYTHON" scripts/oracles/xla_propagation_oracle.py "$OUT/transformer48.$n.hlo" "$n" "$RUNS" --time --spmd
done
cargo bench -q -p tessera-benches --bench spmd 2>&1 | grep -E "^spmd-partitioning|time:"
echo "# $(date -u '+%F %T') UTC, load: $(cut -d' ' -f1-3 /proc/loadavg)"
