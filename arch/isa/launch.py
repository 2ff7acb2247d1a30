"""The accelerator's start registers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from arch.isa.constants import LAUNCH_BITS, IsaError


@dataclass(frozen=True)
class Launch:
    """The accelerator's start registers: where the program and the descriptor table are."""

    insn_base: int  # DRAM byte address of the first instruction
    desc_base: int  # DRAM byte address of descriptor 0
    desc_count: int  # descriptors in the table (LOAD/STORE of a larger index: BAD_DESCRIPTOR)

    #: The registers, in order: the fields of this class, the keys of :meth:`as_dict`, and the
    #: testbench's launch ports.
    FIELDS: ClassVar[tuple[str, ...]] = ("insn_base", "desc_base", "desc_count")

    def __post_init__(self) -> None:
        for name in self.FIELDS:
            value = getattr(self, name)
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or not 0 <= value < 1 << LAUNCH_BITS
            ):
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
                raise IsaError(
                    f"launch register {name} must be an integer in 0..2**{LAUNCH_BITS}-1, "
                    f"not {shown}"
                )

    @classmethod
    def from_dict(cls, data: Any) -> Launch:
        """The registers of ``data`` (an object with exactly the keys of :data:`FIELDS`)."""
        if not isinstance(data, dict) or set(data) != set(cls.FIELDS):
            keys = str(sorted(map(str, data))) if isinstance(data, dict) else type(data).__name__
            keys = keys if len(keys) <= 80 else keys[:77] + "..."
            raise IsaError(f"launch registers must be exactly {list(cls.FIELDS)}, not {keys}")
        return cls(**{name: data[name] for name in cls.FIELDS})

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.FIELDS}
