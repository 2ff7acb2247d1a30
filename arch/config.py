"""The accelerator configuration: one frozen dataclass that every other part is built from.

The RTL generator, compiler, ISA simulator, tests and reports all take an :class:`AccelConfig`.
Named presets live in :data:`PRESETS`; any config round-trips through JSON
(:meth:`AccelConfig.to_json` / :meth:`AccelConfig.from_json`), and :attr:`AccelConfig.name` is the
short canonical name used for build and artifact folders.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ISA_ADDRESS_LIMIT = 1 << 16  # local-memory addresses are 16-bit fields in the ISA (lines)
# Upper bounds that keep RTL generation (hdl_gen) to seconds or a minute, measured on 2 shared
# cores: beyond them a config generated for hours. The read delay line of the DRAM model has one
# register stage per cycle of latency; queues are FIFO memories; generation time grows with the
# bits of every memory (~35 s per MiB), so each on-chip memory is bounded in KiB.
LIMITS = {
    "dram_latency": 1024,  # cycles (tiny: 5 s -> 7 s to generate)
    "queue_depth": 1024,  # instructions per queue (tiny: 6 s; 16384 took 31 s, 100000 hours)
    "token_depth": 1024,  # tokens per queue pair
    "watchdog_cycles": 1 << 32,  # cycles
    "dram_mib": 4096,  # MiB (32-bit DRAM addresses)
}
MAX_MEMORY_KIB = 512  # each of ACT, WGT, ACC and PARAM (param_lines x cols x 16 bytes)
DATAFLOWS = ("weight_stationary",)


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and the numbers."""


def _is_pow2(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


@dataclass(frozen=True)
class AccelConfig:
    """Parameters of one accelerator instance (sizes in lines are derived properties)."""

    rows: int = 16  # array rows: reduction (K) elements consumed per pass
    cols: int = 16  # array columns: output channels produced per pass
    in_bits: int = 8  # activation element width, signed
    w_bits: int = 8  # weight element width, signed
    acc_bits: int = 32  # accumulator width, signed, wraps around
    act_kib: int = 128  # activation scratchpad, lines of `rows` activations
    wgt_kib: int = 64  # weight buffer, lines of `cols` weights (a tile is `rows` lines)
    acc_kib: int = 128  # accumulator memory, lines of `cols` accumulators
    param_lines: int = 256  # post-processing parameter lines, one ParamEntry per column
    dram_bytes_per_cycle: int = 16  # DRAM bus width
    dram_latency: int = 32  # cycles from a DRAM read request to its first data
    dram_mib: int = 256  # simulated DRAM size
    queue_depth: int = 16  # instructions buffered per load / compute / store queue
    token_depth: int = 8  # dependency tokens a queue pair can hold before a push stalls
    watchdog_cycles: int = 1 << 20  # cycles without progress before the RTL stops with WATCHDOG
    dataflow: str = "weight_stationary"
    norm_unit: bool = False  # the row unit beside the array: LayerNorm, RMSNorm, Softmax

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(value, int) or isinstance(value, bool)):
                raise ConfigError(f"{f.name} must be an integer, not {value!r}")
        if not _is_pow2(self.rows) or not 2 <= self.rows <= 64:
            raise ConfigError(f"rows must be a power of two in 2..64, not {self.rows}")
        if self.cols != self.rows:
            raise ConfigError(
                f"only square arrays are supported: rows={self.rows}, cols={self.cols} "
                "(an output line must be an input line of the next layer)"
            )
        if (self.in_bits, self.w_bits, self.acc_bits) != (8, 8, 32):
            raise ConfigError(
                "supported widths are in_bits=8, w_bits=8, acc_bits=32, not "
                f"in_bits={self.in_bits}, w_bits={self.w_bits}, acc_bits={self.acc_bits}"
            )
        if not isinstance(self.norm_unit, bool):
            raise ConfigError(f"norm_unit must be true or false, not {self.norm_unit!r}")
        if self.dataflow not in DATAFLOWS:
            raise ConfigError(f"dataflow must be one of {DATAFLOWS}, not {self.dataflow!r}")
        if not _is_pow2(self.dram_bytes_per_cycle) or not 4 <= self.dram_bytes_per_cycle <= 128:
            raise ConfigError(
                f"dram_bytes_per_cycle must be a power of two in 4..128, "
                f"not {self.dram_bytes_per_cycle}"
            )
        for name, most in LIMITS.items():
            value = getattr(self, name)
            if not 1 <= value <= most:
                raise ConfigError(f"{name} must be in 1..{most}, not {value}")
        memories = {
            "act_kib": (self.act_kib * 1024, self.act_line_bytes, 2 * self.rows),
            "wgt_kib": (self.wgt_kib * 1024, self.wgt_line_bytes, 2 * self.rows),
            "acc_kib": (self.acc_kib * 1024, self.acc_line_bytes, 2 * self.rows),
        }
        for name, (size, line, minimum) in memories.items():
            lines = size // line
            if size <= 0 or size % line or not _is_pow2(lines):
                raise ConfigError(
                    f"{name}={getattr(self, name)} must hold a power-of-two number of "
                    f"{line}-byte lines"
                )
            if not minimum <= lines <= ISA_ADDRESS_LIMIT:
                raise ConfigError(
                    f"{name}={getattr(self, name)} gives {lines} lines; need {minimum}.."
                    f"{ISA_ADDRESS_LIMIT} (16-bit ISA addresses)"
                )
            if size > MAX_MEMORY_KIB * 1024:
                raise ConfigError(
                    f"{name} must be at most {MAX_MEMORY_KIB}, not {getattr(self, name)} "
                    "(larger memories make RTL generation take minutes)"
                )
        param_line = self.cols * 16  # bytes of one PARAM line (arch.isa.PARAM_ENTRY_BYTES each)
        most = min(ISA_ADDRESS_LIMIT, MAX_MEMORY_KIB * 1024 // param_line)
        if not _is_pow2(self.param_lines) or not 1 <= self.param_lines <= most:
            raise ConfigError(
                f"param_lines must be a power of two in 1..{most} ({param_line}-byte lines, "
                f"at most {MAX_MEMORY_KIB} KiB), not {self.param_lines}"
            )

    # --- derived sizes -------------------------------------------------------------------------
    @property
    def act_line_bytes(self) -> int:
        return self.rows * self.in_bits // 8

    @property
    def wgt_line_bytes(self) -> int:
        return self.cols * self.w_bits // 8

    @property
    def acc_line_bytes(self) -> int:
        return self.cols * self.acc_bits // 8

    @property
    def out_line_bytes(self) -> int:
        """Bytes one post-processed accumulator line occupies in DRAM (int8 per column)."""
        return self.cols * self.in_bits // 8

    @property
    def act_lines(self) -> int:
        return self.act_kib * 1024 // self.act_line_bytes

    @property
    def wgt_lines(self) -> int:
        return self.wgt_kib * 1024 // self.wgt_line_bytes

    @property
    def acc_lines(self) -> int:
        return self.acc_kib * 1024 // self.acc_line_bytes

    @property
    def wgt_tiles(self) -> int:
        return self.wgt_lines // self.rows

    @property
    def dram_bytes(self) -> int:
        return self.dram_mib << 20

    @property
    def macs_per_cycle(self) -> int:
        return self.rows * self.cols

    # --- naming and serialisation --------------------------------------------------------------
    @property
    def name(self) -> str:
        """Short canonical name, e.g. ``16x16_i8w8a32_s128k_w64k_c128k_b16_3f2a91c0``.

        The readable part names the main sizes; the 8-hex suffix hashes every field, so two
        configs that differ anywhere never share a build or artifact folder.
        """
        digest = hashlib.sha256(self.to_json().encode()).hexdigest()[:8]
        return (
            f"{self.rows}x{self.cols}_i{self.in_bits}w{self.w_bits}a{self.acc_bits}"
            f"_s{self.act_kib}k_w{self.wgt_kib}k_c{self.acc_kib}k_b{self.dram_bytes_per_cycle}"
            f"_{digest}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field; ``norm_unit`` only when set, so configs without it keep their names."""
        values = dataclasses.asdict(self)
        if not self.norm_unit:
            del values["norm_unit"]
        return values

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> AccelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown config field(s) {unknown}; known: {sorted(known)}")
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> AccelConfig:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config is not valid JSON: {exc}") from None
        if not isinstance(values, dict):
            raise ConfigError(f"config JSON must be an object, not {type(values).__name__}")
        return cls.from_dict(values)

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")


PRESETS: dict[str, AccelConfig] = {
    # 4x4 array with small memories: fast RTL tests.
    "tiny": AccelConfig(
        rows=4,
        cols=4,
        act_kib=8,
        wgt_kib=4,
        acc_kib=16,
        param_lines=64,
        dram_bytes_per_cycle=8,
        dram_latency=8,
        dram_mib=64,
        queue_depth=8,
        token_depth=4,
        watchdog_cycles=1 << 16,
    ),
    # 16x16 int8 x int8 -> int32: the product's reference configuration.
    "default": AccelConfig(),
}


# Named variants of a preset: loaded by name like a preset, but without committed RTL in rtl/
# (the first run generates it into build/gen/), so `make rtl`, `make synth` and CI stay as they are.
VARIANTS: dict[str, AccelConfig] = {
    # the 16x16 default with the norm unit: a transformer as one device program (docs/norm_unit.md)
    "default_norm": dataclasses.replace(PRESETS["default"], norm_unit=True),
}


def config_names() -> list[str]:
    """Every name :func:`load_config` accepts: the presets, then their variants."""
    return sorted(PRESETS) + sorted(VARIANTS)


def load_config(spec: str | Path) -> AccelConfig:
    """A preset or variant name (``tiny``, ``default``, ``default_norm``) or a JSON file's path."""
    text = str(spec)
    if text in PRESETS:
        return PRESETS[text]
    if text in VARIANTS:
        return VARIANTS[text]
    path = Path(text)
    if path.suffix == ".json":
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} cannot be read as text: {exc}") from None
        return AccelConfig.from_json(text)
    raise ConfigError(f"unknown config {text!r}; use one of {config_names()} or a .json file")
