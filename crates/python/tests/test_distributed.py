"""Two processes x 4 CPU devices under jax.distributed (gloo, 127.0.0.1) give the outputs of
one process x 8 devices, for the transformer training step run by tessera.jax.jit."""
import os
import socket
import subprocess
import sys

import jax
import numpy as np

import jax_models
import tessera.jax as tj

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 300


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_equal_one(tmp_path):
    out = tmp_path / "outs.npz"
    port = free_port()
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.join(HERE, "distributed_worker.py"), str(i), "2", str(port), str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=TIMEOUT_S)[0].decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, p in enumerate(procs):
        assert p.returncode == 0, f"process {i} exited {p.returncode}:\n" + logs[i][-4000:]

    fn, args = jax_models.model("transformer", jax_models.mesh())
    want = jax.tree_util.tree_leaves(tj.jit(fn)(*args))
    got = np.load(out)
    assert len(got.files) == len(want)
    for k, w in enumerate(want):
        g = got[f"arr_{k}"]
        assert g.shape == w.shape
        # The same program on the same mesh; gloo's all-reduce adds in another order than
        # the in-process one: f32 rounding, judged as in test_jax.
        jax_models.assert_close(g, np.asarray(w))
