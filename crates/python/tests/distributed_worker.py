"""One process of tests/test_distributed.py: 4 CPU devices of a 2-process jax.distributed job.

    python distributed_worker.py PROCESS_ID NUM_PROCESSES PORT OUT.npz

Runs the transformer training step with tessera.jax.jit on the global 2x4 mesh (collectives
across the processes, over gloo) and process 0 writes every output, gathered to the host, to
OUT.npz.
"""
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts", "fixtures"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import numpy as np  # noqa: E402


def main():
    pid, n, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=n, process_id=pid)
    assert jax.device_count() == 8 and jax.local_device_count() == 4, jax.devices()
    from jax.experimental import multihost_utils

    import jax_models
    import tessera.jax as tj

    fn, args = jax_models.model("transformer", jax_models.mesh())
    outs = tj.jit(fn)(*args)
    leaves = jax.tree_util.tree_leaves(outs)
    assert all(not x.is_fully_addressable for x in leaves if x.ndim > 0)
    host = [np.asarray(multihost_utils.process_allgather(x, tiled=True)) for x in leaves]
    if pid == 0:
        np.savez(out, *host)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
