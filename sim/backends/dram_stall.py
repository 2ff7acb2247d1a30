"""The hostile DRAM's profiles: how often the testbench's DRAM model (hdl_gen/dram_model.py)
drops ``ready`` on its read and write channels, in bursts or alone, and how much extra latency
a read gets - the seeded generator of sim/csrc/cosim_dram_pause.cpp, set per run.

Chosen by ``DRAM_STALL=profile`` (``make sim``/``make test``), ``--dram-stall`` or the knob
``COSIM_DRAM_STALL`` (``profile`` or ``profile:seed``), which the cocotb job and the pyverilator
backend read. Outputs are bit-exact under every profile; only the cycles differ. Pure Python
with no imports beyond the standard library, so the simulator process stays light.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from sim import knobs


@dataclass(frozen=True)
class StallProfile:
    """Probabilities in permille per cycle (per read for the extra latency)."""

    name: str
    read_stall: int = 0  # a read-request cycle paused on its own
    write_stall: int = 0  # a write cycle paused on its own
    burst: int = 0  # a cycle that starts a burst of paused cycles (each channel on its own)
    burst_cycles: tuple[int, int] = (1, 1)  # a burst's length: lowest, highest
    extra: int = 0  # a read with extra latency
    extra_max: int = 0  # its extra cycles: 1..extra_max (at most 255)

    def config_args(self, seed: int) -> tuple[int, ...]:
        """The arguments of ``cosim_dram_pause_config``."""
        low, high = self.burst_cycles
        return (
            self.read_stall,
            self.write_stall,
            self.burst,
            low,
            high,
            self.extra,
            self.extra_max,
            seed & (2**64 - 1),
        )


PROFILES: dict[str, StallProfile] = {
    p.name: p
    for p in (
        StallProfile("none"),
        StallProfile("light", read_stall=100, write_stall=100, extra=100, extra_max=8),
        StallProfile("heavy", read_stall=500, write_stall=500, extra=500, extra_max=40),
        StallProfile("bursty", burst=20, burst_cycles=(8, 64), extra=50, extra_max=100),
    )
}
NAMES = tuple(PROFILES)


@dataclass(frozen=True)
class Stalls:
    """A profile and its seed: what one run's DRAM does."""

    profile: StallProfile
    seed: int = 0

    def __str__(self) -> str:
        return f"{self.profile.name}:{self.seed}"


def parse(text: str) -> Stalls:
    """``profile`` or ``profile:seed``; ValueError naming the value and the profiles."""
    name, _, seed = text.strip().partition(":")
    if name not in PROFILES or (seed and not seed.isdigit()):
        raise ValueError(
            f"DRAM stall profile {text!r}: expected one of {', '.join(NAMES)}, "
            "optionally with :seed (e.g. heavy:7)"
        )
    return Stalls(PROFILES[name], int(seed or 0))


def from_env(text: str | None = None) -> Stalls:
    """``text``, else the profile of ``COSIM_DRAM_STALL`` (unset: none)."""
    return parse(text or knobs.DRAM_STALL.checked() or "none")


def apply(lib: ctypes.CDLL, stalls: Stalls) -> None:
    """Set the running model's generator (``lib``: the library holding the model)."""
    try:
        config = lib.cosim_dram_pause_config
    except AttributeError:
        raise RuntimeError(
            "cosim_dram_pause_config not found: the model was built without "
            "sim/csrc/cosim_dram_pause.cpp"
        ) from None
    config.restype = None
    config.argtypes = [ctypes.c_uint] * 7 + [ctypes.c_uint64]
    config(*stalls.profile.config_args(stalls.seed))


COUNTS = ("read_paused_cycles", "write_paused_cycles", "extra_latency_draws", "extra_cycles")


def report(lib: ctypes.CDLL, stalls: Stalls) -> dict[str, object]:
    """The profile, its seed and what the generator did since :func:`apply` (cycles offered,
    whether or not a request came: the run's own cycles tell what the accelerator waited)."""
    out = (ctypes.c_uint64 * len(COUNTS))()
    lib.cosim_dram_pause_counts.restype = None
    lib.cosim_dram_pause_counts(out)
    return {
        "profile": stalls.profile.name,
        "seed": stalls.seed,
        **dict(zip(COUNTS, list(out), strict=True)),
    }
