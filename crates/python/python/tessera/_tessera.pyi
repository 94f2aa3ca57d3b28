"""Type stubs of tessera._tessera, the Rust half of the tessera package."""

from typing import Any, Mapping, Optional, Sequence, Union

ModuleLike = Union["Module", str, bytes]
PassOptions = Union[Mapping[str, Any], Sequence[str], None]
Triple = tuple[str, list[int], bytes]

class TesseraError(Exception):
    """An error of Tessera; the message names the place, `place` holds it (or None)."""

    place: Optional[str]

class Module:
    """A parsed HLO module."""

    @staticmethod
    def parse(text: str) -> Module:
        """Parses HLO text; raises TesseraError at the `line:col` of the first error."""
    @staticmethod
    def from_proto(data: bytes) -> Module:
        """Reads a serialized xla.HloModuleProto."""
    def to_text(self, short: bool = False) -> str:
        """Canonical HLO text (short: no `%`, operands without shapes)."""
    def to_proto(self) -> bytes:
        """A serialized xla.HloModuleProto."""
    def verify(self) -> None:
        """Runs the verifier; raises TesseraError listing every finding."""
    @property
    def name(self) -> str: ...
    @property
    def num_partitions(self) -> int: ...
    @property
    def instruction_count(self) -> int: ...
    @property
    def sharding_device_count(self) -> int: ...
    def parameter_shardings(self) -> list[Optional[str]]:
        """The entry parameters' shardings in XLA's text, None where there is none."""
    def output_shardings(self) -> list[Optional[str]]:
        """The root's sharding per output, in XLA's text, None where there is none."""

class CompileResult:
    """The result of `compile`."""

    @property
    def module(self) -> Module:
        """The program every device runs."""
    @property
    def sharded(self) -> Module:
        """The input after sharding propagation, before partitioning."""
    @property
    def report(self) -> dict[str, Any]:
        """passes, peak_memory, collectives (collective, instruction, bytes, reason),
        collective_totals, warnings, undecided, text."""
    @property
    def argument_map(self) -> Optional[list[int]]: ...
    def per_device_proto(self) -> bytes:
        """The per-device program with MANUAL shardings on its parameters and root, as a
        serialized HloModuleProto for a PJRT client."""

def compile(
    module: ModuleLike,
    num_partitions: int = 8,
    num_replicas: int = 1,
    memory_limit: Optional[int] = None,
    dedup: bool = False,
    pass_options: PassOptions = None,
) -> CompileResult:
    """Compiles a sharded module into the program every device runs."""

def explain(module: ModuleLike, num_partitions: int = 8, pass_options: PassOptions = None) -> str:
    """Why each collective of the partitioned program exists, with its bytes."""

def memory(module: ModuleLike, scheduler: Optional[str] = None) -> dict[str, Any]:
    """Peak memory along the schedule: peak_bytes, output_bytes, parameter_bytes, peak_at,
    live_at_peak."""

def _run(
    module: ModuleLike, inputs: Any, devices: int = 1, per_device: bool = False
) -> list[list[Triple]]: ...
def _compare(
    original: ModuleLike,
    partitioned: ModuleLike,
    devices: int,
    inputs: Optional[Sequence[Triple]] = None,
    seed: int = 0,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    reference: str = "auto",
    native: bool = False,
) -> tuple[bool, str, list[tuple[int, str, bool, float, float, int]], str]: ...
