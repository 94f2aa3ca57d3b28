"""Tessera from Python: an XLA-style HLO compiler as a library.

Parse a module, compile it into the program every device runs, see why each collective exists,
measure memory, run it on PJRT CPU devices and compare it with the original::

    import tessera
    m = tessera.Module.parse(hlo_text)            # or Module.from_proto(bytes)
    r = tessera.compile(m, num_partitions=8)      # r.module: the per-device program
    print(r.report["text"])                       # pass times, peak memory, collectives
    print(tessera.compare(m, r.module, devices=8))  # equivalent on 8 devices?

``tessera.jax`` (with jax installed) compiles jax functions with Tessera and runs them on jax's
own devices: ``tessera.jax.jit(f, in_shardings=..., out_shardings=...)``.

Every error is a :class:`TesseraError` whose message names the place (``line:col`` of the input,
or the instruction); its ``place`` attribute holds it where there is one. Long calls release the
GIL.
"""

from __future__ import annotations

import os
import sys

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np


def _find_cpu_plugin() -> None:
    """Points ``TESSERA_PJRT_PLUGIN`` at the PJRT CPU plugin of this environment (the
    ``xla-cpu-pjrt`` package, ``pip install tessera[cpu]``) unless it is set already; without
    either, the runtime looks in the ``.deps/`` of the workspace the package was built in."""
    if os.environ.get("TESSERA_PJRT_PLUGIN"):
        return
    for base in sys.path:
        so = os.path.join(base, "xla_plugins", "xla_cpu_pjrt", "xla_cpu_pjrt.so")
        if base and os.path.isfile(so):
            os.environ["TESSERA_PJRT_PLUGIN"] = so
            return


_find_cpu_plugin()

from ._tessera import (  # noqa: E402
    CompileResult,
    Module,
    TesseraError,
    _compare,
    _run,
    compile,
    explain,
    memory,
)

__all__ = [
    "CompileResult",
    "Comparison",
    "Module",
    "OutputComparison",
    "TesseraError",
    "compare",
    "compile",
    "explain",
    "memory",
    "run",
]

# numpy dtype name -> XLA element type name.
_XLA_TYPES = {
    "bool": "pred",
    "int8": "s8",
    "int16": "s16",
    "int32": "s32",
    "int64": "s64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "complex64": "c64",
    "complex128": "c128",
    "bfloat16": "bf16",
    "float8_e4m3fn": "f8e4m3fn",
    "float8_e5m2": "f8e5m2",
    "float8_e4m3fnuz": "f8e4m3fnuz",
    "float8_e5m2fnuz": "f8e5m2fnuz",
    "float8_e4m3b11fnuz": "f8e4m3b11fnuz",
}
_NUMPY_TYPES = {v: k for k, v in _XLA_TYPES.items()}


def _numpy_dtype(xla_type: str) -> np.dtype:
    name = _NUMPY_TYPES.get(xla_type)
    if name is None:
        raise TesseraError(f"element type {xla_type} has no numpy dtype")
    if hasattr(np, name):
        return np.dtype(name)
    try:  # bfloat16 and the fp8 types live in ml_dtypes (installed with jax).
        import ml_dtypes
    except ImportError:
        raise TesseraError(
            f"element type {xla_type} needs the ml_dtypes package for a numpy dtype"
        ) from None
    return np.dtype(getattr(ml_dtypes, name))


def _to_triple(i: int, a: Any) -> tuple[str, list[int], bytes]:
    a = np.asarray(a)
    t = _XLA_TYPES.get(a.dtype.name)
    if t is None:
        raise TesseraError(f"input {i}: numpy dtype {a.dtype} has no XLA element type")
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return t, list(a.shape), a.tobytes()


def _from_triple(t: tuple[str, list[int], bytes]) -> np.ndarray:
    ty, dims, data = t
    return np.frombuffer(data, dtype=_numpy_dtype(ty)).reshape(dims).copy()


def run(
    module: Module | str | bytes,
    inputs: Sequence[Any],
    devices: int = 1,
    per_device: bool = False,
) -> list[np.ndarray] | list[list[np.ndarray]]:
    """Runs ``module`` on ``devices`` PJRT CPU devices and returns its flattened outputs.

    With one device the module runs as one global program (its shardings only annotate it).
    With more, ``inputs`` are global arrays split by the entry parameter shardings, XLA's own
    SPMD partitioner partitions the module, and the outputs are assembled by the root sharding.
    With ``per_device=True`` the module is already partitioned: ``inputs`` is one list of arrays
    per device, and the result is one list of outputs per device.
    """
    if per_device:
        lists = [[_to_triple(i, a) for i, a in enumerate(l)] for l in inputs]
        outs = _run(module, lists, devices, True)
        return [[_from_triple(t) for t in l] for l in outs]
    triples = [_to_triple(i, a) for i, a in enumerate(inputs)]
    outs = _run(module, triples, devices, False)
    return [_from_triple(t) for t in outs[0]]


@dataclass(frozen=True)
class OutputComparison:
    """How one output of the partitioned module compares with the reference."""

    index: int
    shape: str
    passed: bool
    max_abs_error: float
    max_rel_error: float
    mismatched: int


@dataclass(frozen=True)
class Comparison:
    """The verdict of :func:`compare`: ``passed``, per-output details, and the report text
    ``tessera compare`` prints (``str(comparison)``)."""

    passed: bool
    text: str
    outputs: list[OutputComparison] = field(default_factory=list)
    #: ``"equivalent"``, ``"NOT equivalent"`` or ``"not comparable"`` (an output depends on a
    #: stateful rng, or a custom-call cannot run on the host).
    outcome: str = "equivalent"

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return self.text


def compare(
    original: Module | str | bytes,
    partitioned: Module | str | bytes,
    devices: int,
    inputs: Optional[Sequence[Any]] = None,
    seed: int = 0,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    reference: str = "auto",
    native: bool = False,
) -> Comparison:
    """Runs the reference and the per-device ``partitioned`` module on ``devices`` devices
    with the same global inputs (``inputs``, else random ones from ``seed``) and judges every
    output: the verdict of ``tessera compare``, decided in f64 unless ``native`` (or
    ``rtol``/``atol``) is given. ``reference``: ``"auto"`` (the original on one device where it
    has a single-device meaning, else XLA's partitioning of it), ``"single-device"`` or
    ``"xla-spmd"``."""
    triples = None if inputs is None else [_to_triple(i, a) for i, a in enumerate(inputs)]
    passed, text, outs, outcome = _compare(
        original, partitioned, devices, triples, seed, rtol, atol, reference, native
    )
    return Comparison(passed, text, [OutputComparison(*o) for o in outs], outcome)
