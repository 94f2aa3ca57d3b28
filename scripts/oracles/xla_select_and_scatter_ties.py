#!/usr/bin/env python3
"""How XLA:CPU picks among equal values in a select-and-scatter window.

    VENV/bin/python scripts/oracles/xla_select_and_scatter_ties.py   (after `cargo build -p tessera-cli`)

One 2x2 window over [[0, 1], [1, 0]] (select GE, scatter add, sources 10 and 20), run three
ways: by hand in the window's row-major order (the first maximum wins, what a select that keeps
its left operand on ties gives when the window is reduced in order), through jaxlib's XLA
(0.12.0.1), and on the PJRT CPU plugin (`tessera run`). With one column of low padding on the
minor dimension XLA picks (1, 0), the first maximum in column-major order; the same windows
without padding (a column of -100 in front instead) pick (0, 1), the row-major one. Tessera's
select-and-scatter handler runs local windows without padding along split dimensions, so on
ties it would pick like the second module; window.rs keeps a padded integer select-and-scatter
on the default path for that reason (docs/spmd-windowed.md). Development only.
"""
import os
import subprocess
import tempfile

import numpy as np
import jax
from jax._src.lib import xla_client as xc
from jaxlib import _hlo

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

MODULE = """HloModule ties

ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY main {
  x = f32[2,COLS] parameter(0)
  s = f32[1,2] parameter(1)
  i = f32[] constant(0)
  ROOT r = f32[2,COLS] select-and-scatter(x, s, i), window={size=2x2 stride=1x1 pad=0_0xPAD}, select=ge, scatter=add
}
"""


def with_jax(text, args):
    m = _hlo.hlo_module_from_text(text)
    mlir = xc._xla.mlir.hlo_to_stablehlo(m.as_serialized_hlo_module_proto())
    exe = jax.devices()[0].client.compile_and_load(mlir, jax.devices()[:1], xc.CompileOptions())
    return np.asarray(exe.execute([jax.device_put(a) for a in args])[0])


def with_plugin(text, args):
    tessera = os.environ.get("TESSERA", os.path.join(ROOT, "target", "debug", "tessera"))
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "m.hlo"), "w") as f:
        f.write(text)
    for k, a in enumerate(args):
        np.save(os.path.join(d, f"arg{k}.npy"), a)
    subprocess.run([tessera, "run", os.path.join(d, "m.hlo"), "--inputs", d, "--outputs",
                    os.path.join(d, "out")], check=True, capture_output=True)
    return np.load(os.path.join(d, "out", "out0.npy"))


def main():
    s = np.array([[10, 20]], np.float32)
    padded = MODULE.replace("COLS", "2").replace("PAD", "1_0")
    x = np.array([[0, 1], [1, 0]], np.float32)
    unpadded = MODULE.replace("COLS", "3").replace("PAD", "0_0")
    x3 = np.array([[-100, 0, 1], [-100, 1, 0]], np.float32)
    print("by hand, row-major first maximum: [[0, 20], [10, 0]]")
    print("padded   jax:", with_jax(padded, [x, s]).tolist(), "plugin:", with_plugin(padded, [x, s]).tolist())
    print("unpadded jax:", with_jax(unpadded, [x3, s]).tolist(), "plugin:", with_plugin(unpadded, [x3, s]).tolist())


if __name__ == "__main__":
    main()
