#!/usr/bin/env bash
# Solves every IOPDDL instance in ../shared/iopddl within its contest time limit and prints one
# line per instance (cost, lower bound, gap, time). Release build of the solver example only.
# Usage: scripts/bench/bench_iopddl.sh [DIR]   (DIR defaults to ../shared/iopddl)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir="${1:-../shared/iopddl}"
cargo build -q --release -p tessera-autoshard --example iopddl_solve
bin=target/release/examples/iopddl_solve
for spec in A:60 B:60 C:60 D:60 G:120 K:180 L:180 P:240; do
  name="${spec%%:*}"
  limit="${spec##*:}"
  nice -n 10 timeout $((limit + 60)) "$bin" "$dir/asplos-2025-iopddl-$name.json.gz" "$limit"
done
