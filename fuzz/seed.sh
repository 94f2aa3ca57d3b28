#!/usr/bin/env bash
# Seeds the fuzz corpora with every module of the shared XLA corpus (split on `// -----`).
# Usage: [CORPUS=/path/to/xla-hlo] fuzz/seed.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="${CORPUS:-$here/../../shared/corpus/xla-hlo}"
[ -d "$src" ] || { echo "corpus not found at $src; set CORPUS=/path/to/xla-hlo" >&2; exit 1; }
for target in parse roundtrip; do
  mkdir -p "$here/corpus/$target"
done
n=0
while IFS= read -r -d '' f; do
  awk -v out="$here/corpus/parse/seed" -v base="$n" '
    BEGIN { k = 0; file = sprintf("%s-%05d-%02d.hlo", out, base, k) }
    /^\/\/ -----/ { k++; file = sprintf("%s-%05d-%02d.hlo", out, base, k); next }
    { print > file }' "$f"
  n=$((n + 1))
done < <(find "$src" -name '*.hlo' -print0 | sort -z)
cp "$here"/corpus/parse/* "$here/corpus/roundtrip/"
echo "seeded $(ls "$here/corpus/parse" | wc -l) inputs from $n files"
