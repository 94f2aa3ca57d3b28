#!/usr/bin/env python3
"""Preprocessing throughput: Tessera vs jax-tpu-embedding 0.2.0 on the same batches, one run.

    nice -n 10 /work/venv/bin/python scripts/bench/embedding_bench.py [--repeat 5] [--dir target/embedding-bench]

Writes CONFIG.json, dense.npz (100 features x 16,000 samples x 16 ids) and ragged.npz (the same
features, 0-32 ids per sample, 16 on average) under --dir, times jax-tpu-embedding's
`preprocess_sparse_dense_matmul_input` on them (median of --repeat runs, inputs already in
memory), then `cargo run --release -p tessera-embedding --example preprocess_timing` on the same
files, and prints both and the ratio. 4 devices x 4 SparseCores, jax stacking (the activation
limit makes 4 stacks of 25 tables), vocabularies of 1,000,000, dim 16, sum combiner, no weights.
"""

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import logging as absl_logging  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.core import pybind_input_preprocessing as pp  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec as es  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import table_stacking as ts  # noqa: E402

absl_logging.set_verbosity(absl_logging.ERROR)

FEATURES, SAMPLES, IDS, VOCAB, DIM = 100, 16000, 16, 1_000_000, 16
DEVICES, NSC, LIMIT = 4, 4, 40000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default="target/embedding-bench")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    cfg = {
        "tables": [
            {"name": f"t{i}", "vocabulary_size": VOCAB, "embedding_dim": DIM, "combiner": "sum",
             "optimizer": {"type": "sgd", "learning_rate": 0.5},
             "max_ids_per_partition": LIMIT, "max_unique_ids_per_partition": LIMIT}
            for i in range(FEATURES)
        ],
        "features": [
            {"name": f"f{i}", "table": f"t{i}", "input_shape": [SAMPLES, IDS], "output_shape": [SAMPLES, DIM]}
            for i in range(FEATURES)
        ],
        "global_device_count": DEVICES,
        "num_sc_per_device": NSC,
        "stacking": "jax",
        "default_max_ids_per_partition": LIMIT,
        "default_max_unique_ids_per_partition": LIMIT,
        "allow_id_dropping": True,
    }
    config_path = os.path.join(args.dir, "config.json")
    with open(config_path, "w") as f:
        json.dump(cfg, f)
    rng = np.random.default_rng(2026)
    dense = [rng.integers(0, VOCAB, size=(SAMPLES, IDS), dtype=np.int32) for _ in range(FEATURES)]
    ragged = []
    for _ in range(FEATURES):
        lens = rng.integers(0, 2 * IDS + 1, size=SAMPLES)
        vals = rng.integers(0, VOCAB, size=int(lens.sum()), dtype=np.int32)
        splits = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        ragged.append((vals, splits))
    np.savez(os.path.join(args.dir, "dense.npz"), **{f"f{i}": dense[i] for i in range(FEATURES)})
    rag = {}
    for i, (v, s) in enumerate(ragged):
        rag[f"f{i}.values"] = v
        rag[f"f{i}.row_splits"] = s
    np.savez(os.path.join(args.dir, "ragged.npz"), **rag)

    specs = []
    for i in range(FEATURES):
        t = es.TableSpec(name=f"t{i}", vocabulary_size=VOCAB, embedding_dim=DIM,
                         initializer=jax.nn.initializers.zeros,
                         optimizer=es.SGDOptimizerSpec(learning_rate=0.5), combiner="sum",
                         max_ids_per_partition=LIMIT, max_unique_ids_per_partition=LIMIT)
        specs.append(es.FeatureSpec(name=f"f{i}", table_spec=t, input_shape=[SAMPLES, IDS],
                                    output_shape=[SAMPLES, DIM]))
    ts.auto_stack_tables(specs, global_device_count=DEVICES, num_sc_per_device=NSC,
                         stack_to_max_ids_per_partition=lambda n, b: LIMIT,
                         stack_to_max_unique_ids_per_partition=lambda n, b: LIMIT)
    stacks = sorted({s.table_spec.stacked_table_spec.stack_name for s in specs})
    ragged_objs = []
    for v, s in ragged:
        arr = np.empty(SAMPLES, dtype=object)
        for r in range(SAMPLES):
            arr[r] = v[s[r]:s[r + 1]]
        ragged_objs.append(arr)

    jax_times = {}
    for name, feats in (("dense", dense), ("ragged", ragged_objs)):
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = pp.preprocess_sparse_dense_matmul_input(feats, None, specs, DEVICES, DEVICES,
                                                          num_sc_per_device=NSC, allow_id_dropping=True)
            times.append(time.perf_counter() - t0)
            del out
        jax_times[name] = sorted(times)[len(times) // 2]
    ids = {"dense": sum(d.size for d in dense), "ragged": sum(len(v) for v, _ in ragged)}

    cmd = ["cargo", "run", "-q", "--release", "-p", "tessera-embedding", "--example", "preprocess_timing", "--",
           config_path, str(args.repeat), os.path.join(args.dir, "dense.npz"), os.path.join(args.dir, "ragged.npz")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        print(res.stderr, file=sys.stderr)
        sys.exit(1)
    ours = {}
    for line in res.stdout.splitlines():
        path, n, secs = line.split()
        ours[os.path.basename(path)[:-4]] = (int(n), float(secs))
    print(f"{len(stacks)} stacks, {DEVICES} devices x {NSC} SparseCores, median of {args.repeat}")
    print("| batch | ids | jax-tpu-embedding | Tessera | ratio |")
    print("|---|---|---|---|---|")
    for name in ("dense", "ragged"):
        n, secs = ours[name]
        assert n == ids[name]
        j = jax_times[name]
        print(f"| {name} | {n:,} | {j * 1e3:.0f} ms ({n / j / 1e6:.1f} M ids/s) | "
              f"{secs * 1e3:.0f} ms ({n / secs / 1e6:.1f} M ids/s) | {j / secs:.2f}x |")


if __name__ == "__main__":
    main()
