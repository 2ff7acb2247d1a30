"""What every fuzz module checks, and how many cases it runs.

The contract of a hostile input: the command line ends with exit code 2 (bad input) or 3 (the
tool or the machine) and one ``error:`` line naming what was wrong - never exit 4, never a
traceback, never a hang past a bound - or it runs and its answer is right.

Sizes: ``COSIM_FUZZ_CASES`` (``make fuzz``: FUZZ_CASES, 1,000) is the executable module's
count; a module whose case costs more runs a fixed share of it (:func:`campaign_size`). Without
it (``make test``) each module runs its small sample.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator

import numpy as np

SEED = int(os.environ.get("COSIM_FUZZ_SEED", "44"))


def campaign_size(sample: int, per_thousand: int) -> int:
    """``sample`` cases in ``make test``; ``per_thousand`` of FUZZ_CASES in ``make fuzz``."""
    cases = os.environ.get("COSIM_FUZZ_CASES")
    if cases is None:
        return sample
    return max(sample, int(cases) * per_thousand // 1000)


def rng_for(module: str, case: int) -> np.random.Generator:
    """The generator of one case: the seed, the module's name and the case's index."""
    return np.random.default_rng([SEED, sum(map(ord, module)), case])


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def assert_refused(
    result: subprocess.CompletedProcess[str], what: str, *names: str, codes=(2, 3)
) -> str:
    """Exit code in ``codes`` with one ``error:`` line naming each of ``names``; no traceback,
    no internal error. Returns the line. ``what`` says which case it was."""
    err = result.stderr
    assert "Traceback" not in err and "internal error" not in err, f"{what}\n{err}"
    assert result.returncode in codes, f"{what}: exit {result.returncode}\n{err}"
    lines = error_lines(err)
    assert len(lines) == 1, f"{what}: {len(lines)} error lines\n{err}"
    for name in names:
        assert name in lines[0], f"{what}: {name!r} not in {lines[0]!r}"
    return lines[0]


class Overstayed(Exception):
    """A case ran past its bound (a hang)."""


@contextlib.contextmanager
def time_bound(seconds: float, what: str) -> Iterator[None]:
    """Fail the case with :class:`Overstayed` after ``seconds`` (SIGALRM: pytest and its
    xdist workers run tests on the main thread)."""

    def expire(_signum: int, _frame: object) -> None:
        raise Overstayed(f"{what}: still running after {seconds:g} s (a hang)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
