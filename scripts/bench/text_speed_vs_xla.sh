#!/usr/bin/env bash
# Parse and print times of Tessera's text format against XLA's own parser (jaxlib), back to back
# on the same files, ROUNDS times (default 3), so that the ratios of each round share the
# machine's load. For docs/BENCHMARKS.md.
#
#   bash scripts/bench/text_speed_vs_xla.sh [ROUNDS] [REL_PATH...]
#
# REL_PATHs are relative to CORPUS (default ../shared/corpus/xla-hlo); PYTHON defaults to the
# jax oracle's venv. Each line is the median of 5 runs (text_roundtrip and xla_text_times.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
shift || true
CORPUS=${CORPUS:-../shared/corpus/xla-hlo}
PYTHON=${PYTHON:-/work/oracle/venv/bin/python}
FILES=("$@")
if [ ${#FILES[@]} -eq 0 ]; then
  FILES=(xla/tools/benchmarks/hlo/hlo_mixtral_8x7b_bf16_2x8.hlo
         xla/backends/cpu/benchmarks/hlo/gemma3_1b_flax_call.hlo
         xla/tools/data/benchmarking/mobilenet_v2.hlo)
fi
cargo build -q --release -p tessera-hlo --example text_roundtrip
BIN=target/release/examples/text_roundtrip
for r in $(seq 1 "$ROUNDS"); do
  echo "# round $r, $(date -u '+%F %T') UTC, load: $(cut -d' ' -f1-3 /proc/loadavg)"
  for f in "${FILES[@]}"; do
    ours=$("$BIN" "$CORPUS/$f")
    xla=$("$PYTHON" "scripts/bench/xla_text_times.py" "$CORPUS" "$f" 2>/dev/null)
    tp=$(sed -E 's/.*parse ([0-9.]+) ms.*/\1/' <<<"$ours")
    tq=$(sed -E 's/.*print ([0-9.]+) ms.*/\1/' <<<"$ours")
    xp=$(sed -E 's/.*parse ([0-9.]+) ms.*/\1/' <<<"$xla")
    xq=$(sed -E 's/.*print ([0-9.]+) ms.*/\1/' <<<"$xla")
    awk -v f="$(basename "$f")" -v tp="$tp" -v xp="$xp" -v tq="$tq" -v xq="$xq" 'BEGIN {
      printf "%-40s parse %7.1f ms vs XLA %7.1f ms (%.1fx)   print %6.1f ms vs XLA %6.1f ms (%.1fx)\n",
        f, tp, xp, xp / tp, tq, xq, xq / tq }'
  done
done
