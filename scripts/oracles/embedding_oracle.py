#!/usr/bin/env python3
"""Makes testdata/embedding/oracle.npz: random embedding configurations and batches, with the
CSR buffers jax-tpu-embedding 0.2.0 makes of them, decoded.

Development only (needs the jax oracle venv, never CI):

    /work/venv/bin/python scripts/oracles/embedding_oracle.py [--cases 60] [--split-cases 16] \
        [--seed 19] [-o testdata/embedding/oracle.npz]

Per case `cN`:
  cN.config            uint8: the JSON config (docs/embedding.md's schema)
  cN.in.<feature>...   the batch, named as in BATCH.npz (dense, ragged or sparse COO, weights)
  cN.out.<stack>.entries  int32 [n, 5]: (device, core, partition, id, sample), sorted
  cN.out.<stack>.gains    float32 [n]: the gain of each entry
  cN.shard.<stack>.sha256 the digest of jax's stack_and_shard_tables output for table values
                       (t * 5000 + row) * 131 + column (f32, NaN padding)
  cN.out.<stack>.max_ids_per_partition / .max_unique_ids_per_partition /
      .required_buffer_sizes / .dropped_id_count   jax-tpu-embedding's statistics
  cN.num_minibatches   int32: how many minibatches jax-tpu-embedding split the batch into
The Rust test crates/embedding/tests/oracle.rs preprocesses the same batches and compares.

Cases draw: 1-16 devices (powers of two: jax-tpu-embedding requires a power-of-two SparseCore
count), 1, 2 or 4 SparseCores per device, 1-20 tables of dim 1-130 and vocabulary 1-5000, extra
features sharing tables, dense/ragged/sparse input, each combiner, weights on and off, duplicate
ids (small id ranges), id dropping on and off, minibatching on and off, "tf" and "jax" stacking.
Limits are set from a first oracle run: equal or above the observed maxima when dropping is off
(jax-tpu-embedding aborts the process otherwise), below them when it is on.

The last --split-cases cases enable minibatching with limits below the observed maxima, so that
jax-tpu-embedding really splits the batch into several minibatches of hash buckets (dropping on
in some). Their oracle runs happen in a forked child: a bucket over a limit without dropping
aborts the process (LOG(FATAL)), and such draws are replaced.
"""

import argparse
import hashlib
import json
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import logging as absl_logging  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.core import pybind_input_preprocessing as pp  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec as es  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import table_stacking as ts  # noqa: E402

absl_logging.set_verbosity(absl_logging.ERROR)

OPTIMIZERS = [
    ({"type": "sgd", "learning_rate": 0.5}, lambda: es.SGDOptimizerSpec(learning_rate=0.5)),
    ({"type": "sgd", "learning_rate": 0.25}, lambda: es.SGDOptimizerSpec(learning_rate=0.25)),
    (
        {"type": "adagrad", "learning_rate": 0.5, "initial_accumulator_value": 0.125},
        lambda: es.AdagradOptimizerSpec(learning_rate=0.5, initial_accumulator_value=0.125),
    ),
    (
        {"type": "adam", "learning_rate": 0.5, "beta_1": 0.875, "beta_2": 0.9990234375, "epsilon": 2.0**-20},
        lambda: es.AdamOptimizerSpec(learning_rate=0.5, beta_1=0.875, beta_2=0.9990234375, epsilon=2.0**-20),
    ),
]


def round_up(x, m):
    return -(-x // m) * m


def tf_groups(tables, features, num_shards):
    """Seed 004's grouping: (padded dim, optimizer, quantization), tables in order of first use."""
    order = []
    for f in features:
        if f["table"] not in order:
            order.append(f["table"])
    groups = {}
    for t in order:
        tb = tables[t]
        key = (round_up(tb["embedding_dim"], 8), json.dumps(tb["optimizer"], sort_keys=True))
        groups.setdefault(key, []).append(t)
    return list(groups.values())


def build_specs(case, limits):
    """FeatureSpecs stacked as the case's stacking mode says; `limits` maps stack -> (ids, unique)."""
    opt_of = {json.dumps(o[0], sort_keys=True): o[1] for o in OPTIMIZERS}
    tspecs = {}
    for t in case["tables"]:
        tspecs[t["name"]] = es.TableSpec(
            name=t["name"],
            vocabulary_size=t["vocabulary_size"],
            embedding_dim=t["embedding_dim"],
            initializer=jax.nn.initializers.zeros,
            optimizer=opt_of[json.dumps(t["optimizer"], sort_keys=True)](),
            combiner=t["combiner"],
            max_ids_per_partition=t["max_ids_per_partition"],
            max_unique_ids_per_partition=t["max_unique_ids_per_partition"],
        )
    feats = [
        es.FeatureSpec(
            name=f["name"],
            table_spec=tspecs[f["table"]],
            input_shape=list(f["input_shape"]),
            output_shape=list(f["output_shape"]),
        )
        for f in case["features"]
    ]
    nd, nsc = case["global_device_count"], case["num_sc_per_device"]
    d_ids = case.get("default_max_ids_per_partition", 256)
    d_unique = case.get("default_max_unique_ids_per_partition", 256)
    if case["stacking"] == "jax":
        ts.auto_stack_tables(
            feats,
            global_device_count=nd,
            num_sc_per_device=nsc,
            stack_to_max_ids_per_partition=lambda n, b: d_ids,
            stack_to_max_unique_ids_per_partition=lambda n, b: d_unique,
        )
    else:
        tables = {t["name"]: t for t in case["tables"]}
        for group in tf_groups(tables, case["features"], nd * nsc):
            name = "_".join(group)
            ids = max(tables[t]["max_ids_per_partition"] for t in group)
            uniq = max(tables[t]["max_unique_ids_per_partition"] for t in group)
            ts.stack_tables(
                feats,
                group,
                global_device_count=nd,
                num_sc_per_device=nsc,
                rotation=nsc,
                stack_to_max_ids_per_partition=lambda n, b, ids=ids: ids,
                stack_to_max_unique_ids_per_partition=lambda n, b, u=uniq: u,
                stack_name=name,
            )
    return feats


def run_oracle(case, batch, feats, allow_dropping, minibatching=None):
    nd, nsc = case["global_device_count"], case["num_sc_per_device"]
    kind = case["_kind"]
    kw = dict(
        num_sc_per_device=nsc,
        allow_id_dropping=allow_dropping,
        enable_minibatching=case["enable_minibatching"] if minibatching is None else minibatching,
    )
    if kind == "sparse":
        out = pp.preprocess_sparse_dense_matmul_sparse_coo_input(
            [batch[f["name"]]["indices"] for f in case["features"]],
            [batch[f["name"]]["values"] for f in case["features"]],
            [batch[f["name"]]["dense_shape"] for f in case["features"]],
            feats,
            nd,
            nd,
            **kw,
        )
    else:
        ids = [batch[f["name"]]["ids"] for f in case["features"]]
        w = None
        if case["_weights"]:
            w = [batch[f["name"]]["weights"] for f in case["features"]]
        out = pp.preprocess_sparse_dense_matmul_input(ids, w, feats, nd, nd, **kw)
    return out


def decode(rp, eid, sid, g, nd, nsc, minibatching, num_mb):
    """(device, core, partition, id, sample), gains: the entries of the buffers."""
    num_scs = nd * nsc
    per_bucket = max(num_scs, 8)
    rp = rp.reshape(nd, -1)
    eid, sid, g = eid.reshape(nd, -1), sid.reshape(nd, -1), g.reshape(nd, -1)
    per_sc = eid.shape[1] // nsc
    rows, gains = [], []
    for d in range(nd):
        global_end = 0
        for c in range(nsc):
            segs = num_mb if minibatching else 1
            base = 0 if minibatching else c * per_sc
            end = global_end if minibatching else 0
            for m in range(segs):
                row = (c * segs + m) * per_bucket
                for p in range(num_scs):
                    start = round_up(end, 8)
                    e = int(rp[d, row + p])
                    for i in range(start, max(e, start)):
                        rows.append((d, c, p, int(eid[d, base + i]), int(sid[d, base + i])))
                        gains.append(g[d, base + i])
                    end = max(e, end)
            global_end = end
    rows = np.array(rows, dtype=np.int32).reshape(-1, 5)
    gains = np.array(gains, dtype=np.float32)
    order = np.lexsort(rows.T[::-1]) if len(rows) else np.zeros(0, dtype=np.int64)
    return rows[order], gains[order]


def make_case(rng, i, split=False):
    nd = int(rng.choice([1, 2, 4, 8, 16], p=[0.2, 0.25, 0.25, 0.2, 0.1]))
    nsc = int(rng.choice([1, 2, 4]))
    if split:
        nd = int(rng.choice([1, 2, 4]))
        nsc = int(rng.choice([1, 2]))
    num_scs = nd * nsc
    minibatching = split or (bool(rng.random() < 0.2) and num_scs <= 8)
    n_tables = int(rng.integers(1, 21)) if num_scs <= 16 else int(rng.integers(1, 9))
    stacking = "jax" if rng.random() < 0.5 else "tf"
    kind = str(rng.choice(["dense", "ragged", "sparse"]))
    weights = kind != "sparse" and bool(rng.random() < 0.5)
    uniform_combiner = str(rng.choice(["sum", "mean", "sqrtn"]))
    # Some cases stack (nearly) everything: long stack names (jax shortens them with a hash).
    uniform = bool(rng.random() < 0.3)
    uniform_dim = int(rng.integers(1, 131))
    uniform_opt = OPTIMIZERS[int(rng.integers(0, len(OPTIMIZERS)))][0]
    tables = []
    for t in range(n_tables):
        big = rng.random() < 0.3
        tables.append(
            {
                "name": f"table{t}",
                "vocabulary_size": int(rng.integers(1, 5001) if big else rng.integers(1, 200)),
                "embedding_dim": uniform_dim if uniform else int(
                    rng.integers(1, 131) if rng.random() < 0.35 else rng.choice([3, 8, 16, 20])
                ),
                "combiner": uniform_combiner
                if stacking == "tf" or uniform
                else str(rng.choice(["sum", "mean", "sqrtn"])),
                "optimizer": uniform_opt if uniform else OPTIMIZERS[int(rng.integers(0, len(OPTIMIZERS)))][0],
                "max_ids_per_partition": 8192,
                "max_unique_ids_per_partition": 8192,
            }
        )
    features = []
    for t in range(n_tables):
        features.append(t)
    for _ in range(int(rng.integers(0, 4))):
        features.append(int(rng.integers(0, n_tables)))
    rng.shuffle(features)
    ids_budget = 6000
    per_feature = max(1, ids_budget // len(features))
    feats = []
    for k, t in enumerate(features):
        mult = int(rng.integers(1, 4))
        batch_size = num_scs * mult
        while batch_size > per_feature and mult > 1:
            mult -= 1
            batch_size = num_scs * mult
        feats.append(
            {
                "name": f"f{k}",
                "table": f"table{t}",
                "input_shape": [batch_size, 0],
                "output_shape": [batch_size, tables[t]["embedding_dim"]],
            }
        )
    case = {
        "tables": tables,
        "features": feats,
        "global_device_count": nd,
        "num_sc_per_device": nsc,
        "stacking": stacking,
        "default_max_ids_per_partition": 8192,
        "default_max_unique_ids_per_partition": 8192,
        "allow_id_dropping": False,
        "enable_minibatching": minibatching,
        "_kind": kind,
        "_weights": weights,
    }
    # The batch.
    batch = {}
    for f in feats:
        t = tables[int(f["table"][5:])]
        vocab = t["vocabulary_size"]
        rows = f["input_shape"][0]
        max_k = max(1, min(8, per_feature // rows))
        hi = vocab if rng.random() < 0.5 else max(1, min(vocab, int(rng.integers(1, 12))))
        if kind == "dense":
            k = int(rng.integers(1, max_k + 1))
            f["input_shape"] = [rows, k]
            ids = rng.integers(0, hi, size=(rows, k)).astype(np.int32)
            entry = {"ids": ids}
            if weights:
                entry["weights"] = rng.uniform(0.1, 2.0, size=(rows, k)).astype(np.float32)
        else:
            f["input_shape"] = [rows]
            lens = rng.integers(0 if kind == "ragged" else 0, max_k + 1, size=rows)
            if kind == "ragged":
                vals = [rng.integers(0, hi, size=int(n)).astype(np.int32) for n in lens]
                arr = np.empty(rows, dtype=object)
                for r in range(rows):
                    arr[r] = vals[r]
                entry = {"ids": arr, "values": np.concatenate(vals).astype(np.int32)
                         if len(vals) else np.zeros(0, np.int32),
                         "row_splits": np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)}
                if weights:
                    ws = [rng.uniform(0.1, 2.0, size=int(n)).astype(np.float32) for n in lens]
                    warr = np.empty(rows, dtype=object)
                    for r in range(rows):
                        warr[r] = ws[r]
                    entry["weights"] = warr
                    entry["weights_flat"] = np.concatenate(ws).astype(np.float32)
            else:
                idx, vals = [], []
                for r in range(rows):
                    for j in range(int(lens[r])):
                        idx.append((r, j))
                        vals.append(int(rng.integers(0, hi)))
                entry = {
                    "indices": np.array(idx, dtype=np.int64).reshape(-1, 2),
                    "values": np.array(vals, dtype=np.int32),
                    "dense_shape": np.array([rows, max_k], dtype=np.int64),
                }
        batch[f["name"]] = entry
    return case, batch


def _isolated_child(conn, case, batch, allow_dropping):
    feats = build_specs(case, None)
    out = run_oracle(case, batch, feats, allow_dropping)
    rp, eid, sid, g, nmb, _ = out
    arrays = [{k: np.asarray(v) for k, v in x.items()} for x in (rp, eid, sid, g)]
    conn.send((*arrays, int(nmb), stats_of(out)))
    conn.close()


def run_isolated(case, batch, allow_dropping):
    """run_oracle in a fresh child process (jax cannot fork): its outputs, or None if it died."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_isolated_child, args=(conn, case, batch, allow_dropping))
    proc.start()
    conn.close()
    try:
        got = parent.recv()
    except EOFError:
        got = None
    proc.join()
    return got


def stats_of(out):
    st = out[5]
    return (
        {k: np.asarray(v) for k, v in st.max_ids_per_partition.items()},
        {k: np.asarray(v) for k, v in st.max_unique_ids_per_partition.items()},
        {k: np.asarray(v) for k, v in st.required_buffer_sizes.items()},
        dict(st.dropped_id_count),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--split-cases", type=int, default=16)
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("-o", default="testdata/embedding/oracle.npz")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    arrays = {}
    summary = {"dropping": 0, "minibatching": 0, "dense": 0, "ragged": 0, "sparse": 0, "weights": 0,
               "tf": 0, "jax": 0, "entries": 0, "dropped": 0, "split": 0, "split_dropping": 0,
               "minibatches": 0}
    total = args.cases + args.split_cases
    i = 0
    while i < total:
        split = i >= args.cases
        case, batch = make_case(rng, i, split)
        nd, nsc = case["global_device_count"], case["num_sc_per_device"]
        # First run: limits out of the way, to see the maxima.
        feats = build_specs(case, None)
        first = run_oracle(case, batch, feats, allow_dropping=True, minibatching=False)
        max_ids, max_unique, _, _ = stats_of(first)
        stack_of = {f.table_spec.name: f.table_spec.stacked_table_spec.stack_name for f in feats}
        stack_tables = {}
        for t, s in stack_of.items():
            stack_tables.setdefault(s, []).append(t)
        dropping = (split or not case["enable_minibatching"]) and bool(rng.random() < 0.35)
        case["allow_id_dropping"] = dropping

        def limit(observed):
            if split and observed > 1 and rng.random() < 0.8:
                return max(1, int(observed * rng.uniform(0.2, 0.9)))
            if dropping and observed > 1 and rng.random() < 0.7:
                return max(1, int(observed * rng.uniform(0.3, 0.95)))
            return int(observed + rng.integers(0, 3))

        multi_ids, multi_unique = 1, 1
        for s, ts_ in stack_tables.items():
            oi, ou = int(max_ids[s].max()), int(max_unique[s].max())
            li, lu = max(1, limit(oi)), max(1, limit(ou))
            if case["stacking"] == "jax" and len(ts_) > 1:
                multi_ids, multi_unique = max(multi_ids, li), max(multi_unique, lu)
            for t in ts_:
                tb = next(x for x in case["tables"] if x["name"] == t)
                tb["max_ids_per_partition"] = li
                tb["max_unique_ids_per_partition"] = lu
        case["default_max_ids_per_partition"] = multi_ids
        case["default_max_unique_ids_per_partition"] = multi_unique
        feats = build_specs(case, None)
        if split:
            got = run_isolated(case, batch, dropping)
            if got is None:
                print(f"case {i}: oracle aborted (a bucket over a limit); drawing another", file=sys.stderr)
                continue
            rp, eid, sid, g, nmb, (mids, muniq, req, dropped) = got
            if nmb < 2:
                print(f"case {i}: no split; drawing another", file=sys.stderr)
                continue
        else:
            try:
                out = run_oracle(case, batch, feats, allow_dropping=dropping)
            except Exception as e:  # noqa: BLE001
                print(f"case {i}: oracle refused ({e}); drawing another", file=sys.stderr)
                continue
            rp, eid, sid, g, nmb, _ = out
            if int(nmb) != 1:
                print(f"case {i}: {nmb} minibatches; drawing another", file=sys.stderr)
                continue
            mids, muniq, req, dropped = stats_of(out)
        nmb = int(nmb)
        p = f"c{i}"
        cfg = {k: v for k, v in case.items() if not k.startswith("_")}
        arrays[f"{p}.config"] = np.frombuffer(json.dumps(cfg).encode(), dtype=np.uint8)
        arrays[f"{p}.num_minibatches"] = np.array(nmb, dtype=np.int32)
        for f in case["features"]:
            e = batch[f["name"]]
            n = f"{p}.in.{f['name']}"
            if case["_kind"] == "dense":
                arrays[n] = e["ids"]
                if "weights" in e:
                    arrays[n + ".weights"] = e["weights"]
            elif case["_kind"] == "ragged":
                arrays[n + ".values"] = e["values"]
                arrays[n + ".row_splits"] = e["row_splits"]
                if "weights_flat" in e:
                    arrays[n + ".weights"] = e["weights_flat"]
            else:
                arrays[n + ".indices"] = e["indices"]
                arrays[n + ".values"] = e["values"]
                arrays[n + ".dense_shape"] = e["dense_shape"]
        for s in rp:
            rows, gains = decode(rp[s], eid[s], sid[s], g[s], nd, nsc, case["enable_minibatching"], nmb)
            arrays[f"{p}.out.{s}.entries"] = rows
            arrays[f"{p}.out.{s}.gains"] = gains
            arrays[f"{p}.out.{s}.max_ids_per_partition"] = mids[s].astype(np.int32)
            arrays[f"{p}.out.{s}.max_unique_ids_per_partition"] = muniq[s].astype(np.int32)
            arrays[f"{p}.out.{s}.required_buffer_sizes"] = req[s].astype(np.int32)
            arrays[f"{p}.out.{s}.dropped_id_count"] = np.array(dropped[s], dtype=np.int64)
            summary["entries"] += len(rows)
            summary["dropped"] += int(dropped[s])
        # Stacked and sharded table values (jax's stack_and_shard_tables), as sha256 digests of
        # the f32 bytes: value (t * 5000 + i) * 131 + j for row i, column j of table t (exact in f32).
        specs = {}
        values = {}
        for f in feats:
            tsp = f.table_spec
            if tsp.name in specs:
                continue
            t = int(tsp.name[5:])
            r = np.arange(tsp.vocabulary_size)[:, None]
            c = np.arange(tsp.embedding_dim)[None, :]
            specs[tsp.name] = tsp
            values[tsp.name] = ((t * 5000 + r) * 131 + c).astype(np.float32)
        sharded = ts.stack_and_shard_tables(specs, values, nd * nsc)
        for s, v in sharded.items():
            digest = hashlib.sha256(np.asarray(v, dtype=np.float32).tobytes()).digest()
            arrays[f"{p}.shard.{s}.sha256"] = np.frombuffer(digest, dtype=np.uint8)
        summary["dropping"] += dropping
        summary["minibatching"] += case["enable_minibatching"]
        summary["split"] += split
        summary["split_dropping"] += split and dropping
        summary["minibatches"] += nmb if split else 0
        summary[case["_kind"]] += 1
        summary["weights"] += case["_weights"]
        summary[case["stacking"]] += 1
        print(f"case {i}: {nd} devices x {nsc} SC, {len(case['tables'])} tables, {len(case['features'])} features, "
              f"{len(rp)} stacks, {case['_kind']}, weights={case['_weights']}, dropping={dropping} "
              f"(dropped {sum(dropped.values())}), minibatching={case['enable_minibatching']} ({nmb}), {case['stacking']}")
        i += 1
    arrays["cases"] = np.array(total, dtype=np.int32)
    os.makedirs(os.path.dirname(args.o) or ".", exist_ok=True)
    np.savez_compressed(args.o, **arrays)
    print(summary)


if __name__ == "__main__":
    main()
