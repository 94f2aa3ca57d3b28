"""``tessera.jax``: jax functions compiled by Tessera, run on jax's own devices.

``tessera.jax.jit(f, in_shardings=..., out_shardings=..., **compile_options)`` behaves like
``jax.jit(f, ...)``; on the first call for an input signature it

1. lowers ``f`` with jax to HLO (``jax.jit(f).lower(*args).as_text(dialect="hlo")``),
2. compiles that with Tessera (``tessera.compile``: propagation, SPMD partitioning, scheduling,
   rematerialization under ``memory_limit``) into the program every device runs,
3. hands that per-device program to jax's own PJRT client, with MANUAL shardings on its
   parameters and root so that XLA compiles it as is and does not partition it again,

and caches the executable per input signature (shapes, dtypes, shardings, static arguments),
as jax.jit does. Arguments and results are ``jax.Array``s on the devices of the lowering's mesh,
with the shardings the program was partitioned to. A call made under ``jax.distributed`` runs
on every process's devices, with collectives across processes: jax's multi-controller runtime
runs Tessera's program.

``.lower(*args)`` gives the Tessera report and the per-device text without running anything.

Limits: no donation, no ordered effects (``jax.debug.print`` with ordered=True, io callbacks),
no host callbacks; ``dedup`` is refused (the bridge passes arguments one to one). Outputs
without an ``out_shardings`` get the sharding Tessera's propagation gave them, which can differ
from the one XLA would choose (the values are the same).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence

import numpy as np

import jax
import jax.extend.mlir  # noqa: F401  (jax.extend.mlir.hlo_to_stablehlo)
from jax._src import compiler as _compiler
from jax._src.lib import xla_client as _xc
from jax._src.sharding_impls import GSPMDSharding as _GSPMDSharding

import tessera

__all__ = ["jit", "Jitted", "Lowered"]


class _Unspecified:
    def __repr__(self) -> str:
        return "UNSPECIFIED"


UNSPECIFIED = _Unspecified()

# Compile options of a per-device program: XLA must not propagate or partition it again.
_NO_REPARTITION = {"xla_disable_hlo_passes": "sharding-propagation,spmd-partitioning"}


def _is_sharding(s: Any) -> bool:
    return isinstance(s, jax.sharding.Sharding)


def _sharding(devices, text: Optional[str]) -> jax.sharding.Sharding:
    hlo = _xc.HloSharding.from_string(text) if text else _xc.HloSharding.replicate()
    return _GSPMDSharding(devices, hlo)


def _pick(jax_side: Any, ours: jax.sharding.Sharding, ndim: int) -> jax.sharding.Sharding:
    """jax's own sharding object where jax decided one and it is the same as Tessera's (a
    user then sees the NamedSharding they wrote), else Tessera's."""
    if _is_sharding(jax_side):
        try:
            if jax_side.is_equivalent_to(ours, ndim):
                return jax_side
        except (ValueError, TypeError):
            pass
    return ours


class Lowered:
    """A jax function lowered by jax and compiled by Tessera for one input signature.

    ``report``: Tessera's report (a dict, see ``tessera.CompileResult.report``);
    ``as_text()``: the program every device runs; ``input_text``: the HLO jax lowered;
    ``result``: the ``tessera.CompileResult``; ``jax_lowered``: jax's ``Lowered``.
    """

    def __init__(self, jax_lowered, input_text: str, result: tessera.CompileResult, devices):
        self.jax_lowered = jax_lowered
        self.input_text = input_text
        self.result = result
        self.devices = devices

    @property
    def report(self) -> dict:
        return self.result.report

    @property
    def module(self) -> tessera.Module:
        """The per-device program."""
        return self.result.module

    def as_text(self) -> str:
        """The per-device program as HLO text."""
        return self.result.module.to_text()

    def compile(self) -> "_Executable":
        """Compiles the per-device program with jax's client for the lowering's devices."""
        return _Executable(self)


class _Executable:
    """The per-device program loaded on jax's client, with the shardings of its arguments
    and results."""

    def __init__(self, lowered: Lowered):
        comp = lowered.jax_lowered._lowering
        args = comp.compile_args
        if args.get("ordered_effects") or args.get("host_callbacks"):
            raise tessera.TesseraError(
                "tessera.jax: the function has ordered effects or host callbacks, which the "
                "bridge does not run"
            )
        devices = lowered.devices
        n = len(devices)
        r = lowered.result
        in_avals = args["global_in_avals"]
        out_avals = args["global_out_avals"]
        params = r.sharded.parameter_shardings()
        if len(params) != len(in_avals):
            raise tessera.TesseraError(
                f"tessera.jax: the lowered module takes {len(params)} parameters for "
                f"{len(in_avals)} arguments"
            )
        outs = r.module.output_shardings()
        if len(outs) != len(out_avals):
            raise tessera.TesseraError(
                f"tessera.jax: the program returns {len(outs)} outputs, jax expects "
                f"{len(out_avals)}"
            )
        self.in_avals = in_avals
        self.out_avals = out_avals
        self.in_shardings = [
            _pick(j, _sharding(devices, t), a.ndim)
            for j, t, a in zip(args["in_shardings"], params, in_avals)
        ]
        self.out_shardings = [
            _pick(j, _sharding(devices, t), a.ndim)
            for j, t, a in zip(args["out_shardings"], outs, out_avals)
        ]
        self.const_args = list(getattr(comp, "const_args", None) or [])
        mlir = jax.extend.mlir.hlo_to_stablehlo(r.per_device_proto())
        options = _compiler.get_compile_options(
            num_replicas=1,
            num_partitions=n,
            device_assignment=np.array(tuple(devices)).reshape(1, n),
            env_options_overrides=dict(_NO_REPARTITION),
        )
        options.executable_build_options.use_spmd_partitioning = True
        try:
            options.executable_build_options.use_shardy_partitioner = False
        except AttributeError:
            pass
        client = tuple(devices)[0].client
        self.executable = client.compile_and_load(mlir, devices, options)

    def __call__(self, flat_args: Sequence[Any]) -> list:
        args = []
        for x, aval, s in zip(flat_args, self.in_avals, self.in_shardings):
            if isinstance(x, jax.Array) and x.dtype == aval.dtype:
                xs = x.sharding
                if xs is not s and xs != s and not xs.is_equivalent_to(s, aval.ndim):
                    x = jax.device_put(x, s)
            else:
                x = jax.device_put(np.asarray(x, dtype=aval.dtype), s)
            args.append(x)
        results = self.executable.execute_sharded(args)
        shards = results.disassemble_into_single_device_arrays()
        return [
            jax.make_array_from_single_device_arrays(aval.shape, s, pieces)
            for pieces, aval, s in zip(shards, self.out_avals, self.out_shardings)
        ]


def _flags(values: Sequence[bool]) -> str:
    if len(values) == 1:
        return str(values[0]).lower()
    return "{" + ",".join(str(v).lower() for v in values) + "}"


def _propagation_flags(in_shardings, out_shardings, pass_options) -> dict:
    """Where jax leaves a parameter's or an output's sharding to the compiler (it compiles
    with XLA's `allow_spmd_sharding_propagation_to_parameters/output` then), Tessera's
    propagation may choose it too; options the caller gave win."""
    if isinstance(pass_options, dict):
        out = dict(pass_options)
    else:
        out = dict(o.split("=", 1) for o in (pass_options or []))
    free_in = [not _is_sharding(s) for s in in_shardings]
    free_out = [not _is_sharding(s) for s in out_shardings]
    if free_in and any(free_in):
        out.setdefault("sharding-propagation.propagate_to_parameters", _flags(free_in))
    if free_out and any(free_out):
        out.setdefault("sharding-propagation.propagate_to_output", _flags(free_out))
    return out


def _static_positions(static_argnums) -> tuple[int, ...]:
    if static_argnums is None:
        return ()
    if isinstance(static_argnums, int):
        return (static_argnums,)
    return tuple(static_argnums)


def _leaf_key(x: Any):
    if isinstance(x, jax.Array):
        return (x.shape, x.dtype, x.weak_type, x.sharding)
    if isinstance(x, np.ndarray):
        return (x.shape, x.dtype, False, None)
    return (type(x), np.shape(x), np.result_type(x), None)


class Jitted:
    """The callable ``tessera.jax.jit`` returns: ``__call__`` runs, ``lower`` compiles only."""

    def __init__(
        self,
        fun: Callable,
        in_shardings: Any,
        out_shardings: Any,
        static_argnums,
        static_argnames,
        compile_options: dict,
    ):
        if compile_options.get("dedup"):
            raise tessera.TesseraError(
                "tessera.jax.jit: dedup=True changes the parameter list; the bridge passes "
                "arguments one to one (use tessera.compile on the lowered text instead)"
            )
        if "num_partitions" in compile_options:
            raise tessera.TesseraError(
                "tessera.jax.jit: num_partitions comes from the lowering's devices; do not "
                "give it"
            )
        kw: dict[str, Any] = {"keep_unused": True}
        if in_shardings is not UNSPECIFIED:
            kw["in_shardings"] = in_shardings
        if out_shardings is not UNSPECIFIED:
            kw["out_shardings"] = out_shardings
        if static_argnums is not None:
            kw["static_argnums"] = static_argnums
        if static_argnames is not None:
            kw["static_argnames"] = static_argnames
        self._fun = fun
        self._jit = jax.jit(fun, **kw)
        self._static = _static_positions(static_argnums)
        self._static_names = (
            (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames or ())
        )
        self._options = compile_options
        self._cache: dict[Any, tuple[Lowered, _Executable]] = {}
        self._lock = threading.Lock()
        self.__wrapped__ = fun
        self.__name__ = getattr(fun, "__name__", "tessera_jit")
        self.__doc__ = getattr(fun, "__doc__", None)

    def _split(self, args, kwargs):
        dyn_args = tuple(a for i, a in enumerate(args) if i not in self._static)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_names}
        static = (
            tuple((i, args[i]) for i in self._static if i < len(args)),
            tuple(sorted((k, v) for k, v in kwargs.items() if k in self._static_names)),
        )
        return dyn_args, dyn_kwargs, static

    def lower(self, *args, **kwargs) -> Lowered:
        """Lowers with jax and compiles with Tessera for these arguments (nothing runs)."""
        jl = self._jit.lower(*args, **kwargs)
        text = jl.as_text(dialect="hlo")
        devices = jl._lowering._device_list
        if devices is None:
            devices = _xc.DeviceList(tuple(jax.devices()[:1]))
        module = tessera.Module.parse(text)
        args = jl._lowering.compile_args
        options = dict(self._options)
        options["pass_options"] = _propagation_flags(
            args["in_shardings"], args["out_shardings"], options.get("pass_options")
        )
        result = tessera.compile(module, num_partitions=len(devices), **options)
        return Lowered(jl, text, result, devices)

    def _entry(self, args, kwargs):
        dyn_args, dyn_kwargs, static = self._split(args, kwargs)
        leaves, tree = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
        key = (tree, tuple(_leaf_key(x) for x in leaves), static)
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                entry = self._cache.get(key)
                if entry is None:
                    lowered = self.lower(*args, **kwargs)
                    entry = (lowered, lowered.compile())
                    self._cache[key] = entry
        return entry, leaves

    def __call__(self, *args, **kwargs):
        (lowered, exe), leaves = self._entry(args, kwargs)
        outs = exe(list(exe.const_args) + list(leaves))
        return jax.tree_util.tree_unflatten(lowered.jax_lowered.out_tree, outs)

    def cache_size(self) -> int:
        """Input signatures compiled so far."""
        return len(self._cache)


def jit(
    fun: Optional[Callable] = None,
    *,
    in_shardings: Any = UNSPECIFIED,
    out_shardings: Any = UNSPECIFIED,
    static_argnums=None,
    static_argnames=None,
    **compile_options,
):
    """Like ``jax.jit(fun, in_shardings=..., out_shardings=..., static_argnums=...,
    static_argnames=...)``, with the program compiled by Tessera. ``compile_options`` go to
    ``tessera.compile``: ``memory_limit`` (bytes per device), ``pass_options``
    (``{"PASS.KEY": value}``), ``num_replicas``. Usable as a decorator, with or without
    arguments."""
    if fun is None:
        return lambda f: Jitted(
            f, in_shardings, out_shardings, static_argnums, static_argnames, compile_options
        )
    return Jitted(fun, in_shardings, out_shardings, static_argnums, static_argnames, compile_options)
