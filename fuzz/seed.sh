#!/usr/bin/env bash
# Seeds the fuzz corpora:
#   parse, roundtrip: every module of the shared XLA corpus (split on `// -----`), the
#                     robustness reproducers and the repository's testdata modules;
#   opt:              the same modules under 16 KB, each prefixed by a byte that picks the
#                     pipeline (tessera_robust::PIPELINES, the byte modulo their number),
#                     cycling through 0..=255 so that every pipeline gets seeds;
#   proto:            `tessera to-proto` of the modules under 16 KB that parse, and the
#                     robustness reproducers' .pb files;
#   options:          pass lists and options of `tessera passes` (first line: --passes);
#   compile:          testdata and reproducer modules under 16 KB, each behind a line of
#                     `compile` options (partition counts from 1 to 2^32, limits, dedup);
#   sharding:         the shardings of the corpus and testdata, seven at a time, behind
#                     device counts (tessera_robust::check_sharding);
#   embedding:        every embedding configuration of testdata and the reproducers, NUL,
#                     then each batch (.npz).
# Usage: [CORPUS=/path/to/xla-hlo] [TESSERA=path/to/tessera] fuzz/seed.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/.."
src="${CORPUS:-$root/../shared/corpus/xla-hlo}"
robust="${ROBUSTNESS:-$root/../shared/robustness}"
[ -d "$src" ] || { echo "corpus not found at $src; set CORPUS=/path/to/xla-hlo" >&2; exit 1; }
tessera="${TESSERA:-$root/target/release/tessera}"
[ -x "$tessera" ] || (cd "$root" && cargo build --release -p tessera-cli)
for target in parse roundtrip opt proto options compile sharding embedding; do
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
args=("" "--num-partitions 2" "--num-partitions 8 --dedup" "--num-partitions 4 --memory-limit 1K"
      "--num-partitions 4294967296" "--num-partitions 3 --pass-option spmd-partitioning.x=1"
      "--num-replicas 2" "--memory-limit 100000000")
k=0
while IFS= read -r -d '' f; do
  [ "$(stat -c %s "$f")" -le 16384 ] || continue
  { printf '%s\n' "${args[$((k % ${#args[@]}))]}"; cat "$f"; } > "$here/corpus/compile/seed-$k"
  k=$((k + 1))
done < <(find "$root/testdata/compile" "$root/testdata/examples" "$root/testdata/probe3" \
              "$root/testdata/spmd" "$robust" -name '*.hlo' -print0 2>/dev/null | sort -z)
python3 - "$here/corpus/sharding" "$src" "$root/testdata" "$robust" <<'PY'
import os, sys
out, roots = sys.argv[1], sys.argv[2:]
found = set()
for root in roots:
    for d, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".hlo"):
                continue
            text = open(os.path.join(d, name), errors="replace").read()
            at = text.find("sharding={")
            while at >= 0:
                i, depth = at + len("sharding="), 0
                for j in range(i, min(len(text), i + 4096)):
                    depth += {"{": 1, "}": -1}.get(text[j], 0)
                    if depth == 0:
                        found.add(text[i:j + 1])
                        break
                at = text.find("sharding={", at + 1)
found = sorted(s for s in found if "\n" not in s)
# Shardings that fit the fixed module (rank 2 ... rank 2, rank 1, a tuple), so that seeds
# reach the partitioner.
fits = [
    ["{devices=[2,1]0,1}", "{devices=[1,2]0,1}", "{devices=[2,1]<=[2]}", "{replicated}",
     "{devices=[2,1]0,1}", "{devices=[2]0,1}", "{{devices=[2]0,1}, {replicated}}"],
    ["{devices=[2,2]<=[4]}", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}",
     "{devices=[4,1]<=[4]}", "{devices=[1,4]<=[4]}", "{maximal device=3}", "{devices=[4]<=[4]}",
     "{{replicated}, {devices=[2,2]<=[2,2]T(1,0)}}"],
    ["{mesh['x'=2,'y'=4], [{'x'}, {'y'}]}", "{devices=[2,4]<=[8]}", "{devices=[8,1]<=[8]}",
     "{manual}", "{devices=[2,1,4]<=[8] last_tile_dims={manual}}", "{replicated}",
     "{{devices=[8]<=[8]}, {devices=[1,8]<=[8]}}"],
]
for k, f in enumerate(fits):
    n = str([2, 4, 8][k])
    with open(os.path.join(out, f"fits-{k}"), "w") as w:
        w.write(n + "\n\n" + "\n".join(f) + "\n")
counts = ["1", "2", "4", "8", "99999999999", "2147483647"]
for k in range(0, len(found), 7):
    n = counts[(k // 7) % len(counts)]
    with open(os.path.join(out, f"seed-{k // 7:05d}"), "w") as f:
        f.write(n + "\n" + ("" if k % 2 else n) + "\n" + "\n".join(found[k:k + 7]) + "\n")
PY
k=0
for c in "$root"/testdata/embedding/*/config.json "$robust"/*emb*.json; do
  [ -f "$c" ] || continue
  for b in "$root"/testdata/embedding/*/*.npz "$robust"/*emb*.npz; do
    [ -f "$b" ] || continue
    { cat "$c"; printf '\0'; cat "$b"; } > "$here/corpus/embedding/seed-$k"; k=$((k + 1))
  done
done
echo "seeded from $n files: parse/roundtrip $(ls "$here/corpus/parse" | wc -l), opt $(ls "$here/corpus/opt" | wc -l), proto $(ls "$here/corpus/proto" | wc -l), options $(ls "$here/corpus/options" | wc -l), compile $(ls "$here/corpus/compile" | wc -l), sharding $(ls "$here/corpus/sharding" | wc -l), embedding $(ls "$here/corpus/embedding" | wc -l)"
