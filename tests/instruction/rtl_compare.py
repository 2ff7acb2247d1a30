"""Run programs on the RTL and on the ISA simulator and compare DRAM bit for bit, with guard
bands (sim/runtime/guard.py) between the builder's regions and after the image checked on both."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arch.config import AccelConfig
from sim.backends.base import DeviceResult, DeviceRun
from sim.backends.isa_machine import IsaSimError, Machine
from sim.backends.rtl import run_programs
from sim.runtime.guard import Guard, guard_image
from tests.programs import Builder


@dataclass
class Prepared:
    """A builder's program with canaries in its image, already run on the ISA simulator."""

    name: str
    run: DeviceRun
    guard: Guard
    isa: Machine
    isa_error: IsaSimError | None


@dataclass
class Outcome:
    name: str
    rtl: DeviceResult
    isa: Machine | None
    isa_error: IsaSimError | None
    image_size: int
    guard: Guard


def prepare(
    config: AccelConfig, name: str, builder: Builder, max_cycles: int = 2_000_000
) -> Prepared:
    launch = builder.finish()
    image, guard = guard_image(builder.dram[: builder.top], builder.regions)
    dram = builder.dram.copy()
    dram[: image.size] = image
    machine, error = Machine(config, dram), None
    machine.watch_from = guard.size
    try:
        machine.run(launch)
    except IsaSimError as exc:
        error = exc
    run = DeviceRun(image, launch, max_cycles=max_cycles, dump_size=guard.size)
    return Prepared(name, run, guard, machine, error)


def run_both(
    config: AccelConfig, programs: dict[str, Builder], tmp_path, max_cycles: int = 2_000_000
) -> list[Outcome]:
    prepared = [prepare(config, n, b, max_cycles) for n, b in programs.items()]
    results = run_programs(config, [p.run for p in prepared], tmp_path)
    return [
        Outcome(p.name, rtl, p.isa, p.isa_error, p.guard.size, p.guard)
        for p, rtl in zip(prepared, results, strict=True)
    ]


def assert_guards(name: str, guard: Guard, **drams: np.ndarray | DeviceResult | Machine) -> None:
    """Every canary intact in each named DRAM (e.g. ``rtl=..., isa=...``); of a result or an
    ISA machine, also no byte written anywhere past the DRAM read back (``stray_writes``)."""
    for who, dram in drams.items():
        if isinstance(dram, np.ndarray):
            problem = guard.check(dram)
        else:
            problem = guard.check(dram.dram, dram.stray_writes)
        if problem is not None:
            raise AssertionError(f"{name}: {who} wrote outside the program's regions: {problem}")


def assert_same_dram(outcome: Outcome) -> None:
    """Guard bands intact on both sides, then every byte equal (the tail included)."""
    assert outcome.isa is not None
    assert_guards(outcome.name, outcome.guard, rtl=outcome.rtl, isa=outcome.isa)
    expected = outcome.isa.dram[: outcome.image_size]
    diff = np.flatnonzero(expected != outcome.rtl.dram)
    if diff.size:
        first = int(diff[0])
        raise AssertionError(
            f"{outcome.name}: {diff.size} DRAM bytes differ; first at 0x{first:x}: "
            f"expected {int(expected[first])} (ISA simulator), "
            f"got {int(outcome.rtl.dram[first])} (RTL)"
        )


def assert_cases_match(config: AccelConfig, make_case, seed: int, tmp_path, cases: int = 3) -> None:
    """Build ``cases`` programs with ``make_case(config, rng)`` -> (builder, [(DRAM address,
    expected int8 array)]), run them on the RTL and the ISA simulator, and check every expected
    array in the RTL's DRAM and the two DRAMs equal byte for byte (guard bands included)."""
    rng = np.random.default_rng(seed)
    programs, expected = {}, {}
    for case in range(cases):
        programs[f"case{case}"], expected[f"case{case}"] = make_case(config, rng)
    for outcome in run_both(config, programs, tmp_path):
        assert outcome.rtl.done, f"{outcome.name}: {outcome.rtl.error_code}"
        for out, want in expected[outcome.name]:
            got = outcome.rtl.dram[out : out + want.size].view(np.int8).reshape(want.shape)
            np.testing.assert_array_equal(got, want, err_msg=outcome.name)
        assert_same_dram(outcome)


def assert_isa_stops(cases: dict[str, tuple[Builder, str | None]], label: str) -> None:
    """Each ``(program, code)`` stops the ISA simulator with ``code`` at instruction 1, or runs
    to the end when ``code`` is None."""
    for case, (builder, code) in cases.items():
        try:
            builder.run_isa()
        except IsaSimError as exc:
            assert code is not None, f"{label} {case}: {exc}"
            assert exc.code.name == code and exc.insn_index == 1, f"{label} {case}: {exc}"
        else:
            assert code is None, f"{label} {case}: ran, expected {code}"


def assert_rtl_stops_alike(
    config: AccelConfig, cases: dict[str, tuple[Builder, str | None]], tmp_path
) -> None:
    """The RTL stops each program as :func:`assert_isa_stops` expects of the ISA simulator:
    the same code at the same instruction, DRAM outside the guard bands untouched alike; a
    program expected to run leaves the same DRAM."""
    outcomes = run_both(config, {k: b for k, (b, _) in cases.items()}, tmp_path, 200_000)
    for outcome in outcomes:
        assert_stopped_alike(outcome, cases[outcome.name][1])


def assert_stopped_alike(outcome: Outcome, code: str | None) -> None:
    """One outcome of :func:`assert_rtl_stops_alike`."""
    if code is None:
        assert outcome.isa_error is None and outcome.rtl.done, outcome.name
        assert_same_dram(outcome)
        return
    assert outcome.isa_error is not None and outcome.isa_error.code.name == code
    assert outcome.rtl.error and outcome.rtl.error_code == code, (
        f"{outcome.name}: RTL says {outcome.rtl.error_code}"
    )
    assert outcome.rtl.error_index == outcome.isa_error.insn_index == 1, outcome.name
    assert outcome.isa is not None
    assert_guards(outcome.name, outcome.guard, isa=outcome.isa, rtl=outcome.rtl)
