"""The package's API: modules, compile and its report, explain, memory, run, compare, errors."""
import os
import threading
import time

import numpy as np
import pytest

import tessera

HERE = os.path.dirname(__file__)
TESTDATA = os.path.join(HERE, "..", "..", "..", "testdata")


def read(*path):
    with open(os.path.join(TESTDATA, *path)) as f:
        return f.read()


REDUCE = read("spmd_pairs", "reduce_sum_sharded.before.hlo")
REDUCE_AFTER = read("spmd_pairs", "reduce_sum_sharded.after.hlo")
BAD = "HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] add(x, z)\n}\n"


def test_parse_print_and_proto_round_trip():
    m = tessera.Module.parse(REDUCE)
    assert m.name == "jit__lambda"
    assert m.num_partitions == 4
    assert m.parameter_shardings() == ["{devices=[4,1]<=[4]}"]
    assert m.output_shardings() == ["{replicated}"]
    text = m.to_text()
    assert text.startswith("HloModule jit__lambda")
    again = tessera.Module.parse(text)
    assert again.to_text() == text
    proto = m.to_proto()
    assert isinstance(proto, bytes) and len(proto) > 0
    back = tessera.Module.from_proto(proto)
    assert back.to_proto() == proto
    assert "ROOT" in m.to_text(short=True)
    m.verify()
    assert repr(m).startswith("<tessera.Module jit__lambda")


def test_errors_name_the_place():
    with pytest.raises(tessera.TesseraError) as e:
        tessera.Module.parse(BAD)
    assert str(e.value).startswith("4:26: ")
    assert "'z' is not defined" in str(e.value)
    assert e.value.place == "4:26"
    with pytest.raises(tessera.TesseraError, match="not a valid xla.HloModuleProto"):
        tessera.Module.from_proto(b"\xff\xff\xff")
    # A setting the module contradicts: the message says which and why.
    with pytest.raises(tessera.TesseraError, match="lowered for num_partitions=4"):
        tessera.compile(REDUCE, num_partitions=8)
    with pytest.raises(tessera.TesseraError, match="not a pass of the compile pipeline"):
        tessera.compile(REDUCE, num_partitions=4, pass_options={"dce.x": 1})
    with pytest.raises(tessera.TesseraError, match="expected a tessera.Module"):
        tessera.compile(42)


def test_compile_report():
    r = tessera.compile(REDUCE, num_partitions=4)
    assert isinstance(r, tessera.CompileResult)
    per_device = r.module
    assert "f32[4,8]" in per_device.to_text()  # the batch split 4 ways
    rep = r.report
    assert rep["num_partitions"] == 4
    names = [p["name"] for p in rep["passes"]]
    assert "sharding-propagation" in names and "spmd-partitioning" in names
    assert all(p["ms"] >= 0 for p in rep["passes"])
    peak = rep["peak_memory"]
    assert peak["before"] > 0 and peak["partitioned"] > 0 and peak["after"] == peak["partitioned"]
    [c] = rep["collectives"]
    assert c["collective"] == "all-reduce"
    assert c["bytes"] == 48  # 2 * 32 * 3/4
    assert "reduce" in c["reason"]
    assert rep["collective_totals"]["all-reduce"] == {"count": 1, "bytes": 48}
    assert any("%constant.1" in w for w in rep["warnings"])  # left replicated, said so
    assert "peak memory per device" in rep["text"]
    assert r.argument_map is None


def test_compile_options_reach_the_passes():
    r = tessera.compile(
        tessera.Module.parse(REDUCE),
        num_partitions=4,
        memory_limit=1 << 20,
        pass_options={"schedule.scheduler": "list"},
    )
    assert r.report["peak_memory"]["limit"] == 1 << 20
    assert "rematerialization" in [p["name"] for p in r.report["passes"]]
    r2 = tessera.compile(REDUCE.encode(), num_partitions=4, pass_options=["schedule.scheduler=dfs"])
    assert r2.module.to_text() != ""


def test_explain_and_memory():
    text = tessera.explain(REDUCE, num_partitions=4)
    assert "all-reduce" in text and "bytes received per device" in text
    mem = tessera.memory(REDUCE)
    assert mem["peak_bytes"] >= mem["output_bytes"] == 32
    assert mem["parameter_bytes"] == 512
    assert mem["peak_at"].startswith("%")
    assert all({"instruction", "shape", "bytes", "index"} <= set(b) for b in mem["live_at_peak"])
    with pytest.raises(tessera.TesseraError):
        tessera.memory(REDUCE, scheduler="no-such-scheduler")


def test_run_on_one_and_four_devices():
    x = np.arange(128, dtype=np.float32).reshape(16, 8)
    [one] = tessera.run(REDUCE, [x])
    np.testing.assert_array_equal(one, x.sum(0))
    [four] = tessera.run(REDUCE, [x], devices=4)
    np.testing.assert_allclose(four, x.sum(0), rtol=1e-6)
    # The per-device program: each device gets its own quarter and returns the whole sum.
    pieces = [[x[4 * d : 4 * d + 4]] for d in range(4)]
    outs = tessera.run(REDUCE_AFTER, pieces, devices=4, per_device=True)
    assert len(outs) == 4
    for [o] in outs:
        np.testing.assert_allclose(o, x.sum(0), rtol=1e-6)
    with pytest.raises(tessera.TesseraError, match="parameter 0"):
        tessera.run(REDUCE, [np.zeros((3,), np.float32)])
    with pytest.raises(tessera.TesseraError, match="devices=0"):
        tessera.run(REDUCE, [x], devices=0)


def test_run_converts_dtypes():
    text = "HloModule m\nENTRY e {\n  x = s32[3] parameter(0)\n  ROOT y = s32[3] add(x, x)\n}\n"
    [y] = tessera.run(text, [np.array([1, 2, 3], np.int32)])
    assert y.dtype == np.int32 and y.tolist() == [2, 4, 6]
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = "HloModule m\nENTRY e {\n  x = bf16[2] parameter(0)\n  ROOT y = bf16[2] add(x, x)\n}\n"
    [z] = tessera.run(bf, [np.array([1.5, -2], ml_dtypes.bfloat16)])
    assert z.dtype == ml_dtypes.bfloat16 and z.astype(np.float32).tolist() == [3.0, -4.0]


def test_compare_passes_and_fails():
    r = tessera.compile(REDUCE, num_partitions=4)
    c = tessera.compare(REDUCE, r.module, devices=4, seed=3)
    assert c.passed and bool(c)
    assert "equivalent on 4 devices" in str(c)
    [o] = c.outputs
    assert o.shape == "f32[8]" and o.passed and o.mismatched == 0
    # A per-device program without its all-reduce returns one device's partial sum: caught.
    broken = REDUCE_AFTER.replace("ROOT %all-reduce", "%all-reduce").replace(
        "  %reduce = f32[8]{0} reduce(", "  ROOT %reduce = f32[8]{0} reduce("
    )
    assert broken != REDUCE_AFTER
    bad = tessera.compare(REDUCE, broken, devices=4)
    assert not bad.passed
    assert bad.outputs[0].mismatched > 0
    x = np.ones((16, 8), np.float32)
    assert tessera.compare(REDUCE, r.module, devices=4, inputs=[x], rtol=0.0, atol=0.0).passed
    with pytest.raises(tessera.TesseraError, match="reference"):
        tessera.compare(REDUCE, r.module, devices=4, reference="nope")


def test_long_calls_release_the_gil():
    text = read("models", "transformer4.before-propagation.hlo")
    done = threading.Event()
    ticks = []

    def count():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    try:
        t0 = time.perf_counter()
        tessera.compile(text, num_partitions=8)
        t1 = time.perf_counter()
    finally:
        done.set()
        t.join()
    during = [x for x in ticks if t0 < x < t1]
    # With the GIL held for the whole compile the other thread could not tick at all.
    assert len(during) >= 0.25 * (t1 - t0) / 0.001 * 0.1, (len(during), t1 - t0)
