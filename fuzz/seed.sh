#!/usr/bin/env bash
# Seeds the fuzz corpora:
#   parse, roundtrip: every module of the shared XLA corpus (split on `// -----`), the
#                     robustness reproducers and the repository's testdata modules;
#   opt:              the same modules under 16 KB, each prefixed by a byte that picks the
#                     pipeline (tessera_robust::PIPELINES, the byte modulo their number),
#                     cycling through 0..=255 so that every pipeline gets seeds;
#   proto:            `tessera to-proto` of the modules under 16 KB that parse, and the
#                     robustness reproducers' .pb files;
#   options:          pass lists and options of `tessera passes` (first line: --passes).
# Usage: [CORPUS=/path/to/xla-hlo] [TESSERA=path/to/tessera] fuzz/seed.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/.."
src="${CORPUS:-$root/../shared/corpus/xla-hlo}"
robust="${ROBUSTNESS:-$root/../shared/robustness}"
[ -d "$src" ] || { echo "corpus not found at $src; set CORPUS=/path/to/xla-hlo" >&2; exit 1; }
tessera="${TESSERA:-$root/target/release/tessera}"
[ -x "$tessera" ] || (cd "$root" && cargo build --release -p tessera-cli)
for target in parse roundtrip opt proto options; do
  mkdir -p "$here/corpus/$target"
done
n=0
while IFS= read -r -d '' f; do
  awk -v out="$here/corpus/parse/seed" -v base="$n" '
    BEGIN { k = 0; file = sprintf("%s-%05d-%02d.hlo", out, base, k) }
    /^\/\/ -----/ { k++; file = sprintf("%s-%05d-%02d.hlo", out, base, k); next }
    { print > file }' "$f"
  n=$((n + 1))
done < <(find "$src" "$root/testdata" -name '*.hlo' -print0 | sort -z)
[ -d "$robust" ] && cp "$robust"/*.hlo "$here/corpus/parse/" 2>/dev/null || true
cp "$here"/corpus/parse/* "$here/corpus/roundtrip/"
k=0
for f in "$here"/corpus/parse/*; do
  [ "$(stat -c %s "$f")" -le 16384 ] || continue
  base="$(basename "$f" .hlo)"
  { printf "\\x$(printf %02x $((k % 256)))"; cat "$f"; } > "$here/corpus/opt/$base"
  "$tessera" to-proto "$f" -o "$here/corpus/proto/$base.pb" 2>/dev/null || rm -f "$here/corpus/proto/$base.pb"
  k=$((k + 1))
done
[ -d "$robust" ] && cp "$robust"/*.pb "$here/corpus/proto/" 2>/dev/null || true
i=0
for p in dce inline flatten-call-graph 'fix(tuple-simplify,dce)' sharding-propagation schedule \
         'schedule,remat' 'schedule,print-liveness,print-memory' print-points-to print-call-graph; do
  printf '%s\n' "$p" > "$here/corpus/options/pass-$i"; i=$((i + 1))
done
for o in 'sharding-propagation.propagate_to_parameters={true,false}' \
         'sharding-propagation.propagate_to_output=true' 'sharding-propagation.is_spmd=false' \
         'remat.memory_limit=1K' 'remat.mode=recompute-and-compress' 'dce.remove_dead_computations=false' \
         'inline.single_call_site=true'; do
  pass="${o%%.*}"
  [ "$pass" = remat ] && pass='schedule,remat'
  printf '%s\n%s\n' "$pass" "$o" > "$here/corpus/options/opt-$i"; i=$((i + 1))
done
echo "seeded from $n files: parse/roundtrip $(ls "$here/corpus/parse" | wc -l), opt $(ls "$here/corpus/opt" | wc -l), proto $(ls "$here/corpus/proto" | wc -l), options $(ls "$here/corpus/options" | wc -l)"
