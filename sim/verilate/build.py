"""Content-cached Verilator builds and cocotb runs, on top of ``cocotb_tools.runner``.

One build directory per (design, config, flags): ``build/verilator/<design>-<config>-<key>``,
where ``key`` hashes the sources, flags, public-signal list and toolchain. A directory holding
a finished build is reused without running Verilator or make again.

Unlike cocotb's stock Verilator runner this layer never passes ``--public-flat-rw`` (which makes
the model 6-15x slower and the C++ compile much longer): only what the testbench touches is made
public, through a generated ``.vlt`` control file (:attr:`BuildSpec.public`).

A build with :attr:`BuildSpec.clock` uses our harness (sim/csrc/cocotb_main.cpp) instead of
cocotb's: it toggles the clock in C++ and, while no cocotb trigger is due, clocks the model without
going through VPI at all, so a cocotb test that awaits ``done`` runs at raw Verilator speed
(``make bench``, docs/performance-history.md). The compiled Verilator runtime objects are shared
between builds (sim/verilate/runtime.py).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO
from xml.etree import ElementTree

import cocotb_tools.config
from cocotb_tools.runner import Verilator as _CocotbVerilator

from sim import knobs
from sim.verilate import assertions
from sim.verilate.build_progress import watch
from sim.verilate.clibs import fst_args
from sim.verilate.instrument import (
    ASSERT_ARGS,
    COVERAGE_ARGS,
    assertions_on,
    coverage_dir,
    coverage_plusargs,
)
from sim.verilate.lifeline import ChildStuck, run_child
from sim.verilate.toolchain import find_toolchain

log = logging.getLogger("cosim.build")
#: Build directories whose cache hit this process has reported.
_ANNOUNCED: set[str] = set()

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages, installed)
SIM_ROOT = REPO_ROOT / "sim"  # its testbench and C++ harness sources (sim/hdl, sim/csrc)


def _work_root() -> Path:
    """Where outputs go (build/, waves/): ``$COSIM_HOME``; else the checkout when running from
    one; else, for an installed package, the current directory."""
    if knobs.HOME.is_set():
        return Path(knobs.HOME.get()).resolve()
    if (REPO_ROOT / "pyproject.toml").is_file():
        return REPO_ROOT
    return Path.cwd()


WORK_ROOT = _work_root()
BUILD_ROOT = WORK_ROOT / "build" / "verilator"
_STAMP = "cosim-build.json"

# Flags every build gets: optimised verilated code, fast X handling, C++ split into files of
# ~3000 statements (both cores compile the model in parallel: cold default build 60-66 s ->
# 51-52 s, simulation speed unchanged; docs/performance-history.md); lint warnings are fatal
# except the waivers in sim/hdl/waivers.vlt.
VERILATOR_FLAGS = ("-O3", "--x-assign", "fast", "--x-initial", "fast", "--output-split", "3000")
MAKE_FLAGS = ("OPT_FAST=-O2", "OPT_SLOW=-O1", "OPT_GLOBAL=-O2")
WAIVERS = SIM_ROOT / "hdl" / "waivers.vlt"
COCOTB_HARNESS = cocotb_tools.config.share_dir / "lib" / "verilator" / "verilator.cpp"
CLOCKED_HARNESS = SIM_ROOT / "csrc" / "cocotb_main.cpp"


class BuildError(RuntimeError):
    """Verilator or the C++ compile failed; the message names the log to read."""


class SimulationFailed(RuntimeError):
    """A cocotb run ended with failing tests or a crashed simulator."""


@dataclass(frozen=True)
class BuildSpec:
    """What to build.

    Parameters
    ----------
    design : str
        Short design name, used in the build directory name.
    config_name : str
        Canonical accelerator-config name (or any tag), also in the directory name.
    sources : tuple of Path
        Verilog sources.
    toplevel : str
        Top module name.
    public : tuple of str
        Lines of a Verilator control file making testbench-visible signals public, e.g.
        ``'public_flat_rw -module "top" -var "start"'``.
    control : tuple of str
        More control-file lines that shape the model rather than what the testbench sees (e.g.
        ``split_var``, sim/backends/array_flags.py); kept by every harness.
    waves : str or None
        ``None`` (no tracing compiled in), ``"fst"`` or ``"vcd"``.
    timing : bool
        Build with ``--timing`` (needed when the HDL generates its own clock with delays).
    extra_args : tuple of str
        More Verilator arguments.
    cpp_sources : tuple of Path
        C++ files compiled into the model (e.g. DPI implementations); their symbols are exported
        (``-rdynamic``) so Python can reach them with ``ctypes.CDLL(None)``.
    clock : str or None
        A top-level input the simulator itself toggles every half ``clock_period_ns``
        (sim/csrc/cocotb_main.cpp, first rising edge at half a period), so Python never wakes
        for the clock; the testbench must then not drive it (:func:`run_cocotb` tells it through
        ``COSIM_HARNESS_CLOCK``). ``None``: the testbench drives the clock (cocotb ``Clock``)
        and the build uses cocotb's own Verilator harness.
    clock_period_ns : int
        Period of ``clock`` in ns.
    trace_gate : str or None
        With ``waves``: a 1-bit top-level output; the trace file is written only while it is
        high (one window; sim/csrc/cocotb_main.cpp). ``None``: the whole run is traced.
    main : Path or None
        A C++ ``main`` replacing the cocotb harness: a plain Verilator executable that cannot
        run cocotb tests (e.g. sim/csrc/bench_main.cpp for ``make bench``).
    coverage : bool
        Line and toggle coverage compiled in; each run writes its counts
        (sim/verilate/instrument.py). :func:`build` sets it from ``COSIM_COVERAGE``.
    assertions : bool
        The RTL's assertions compiled in (``--assert``). :func:`build` sets it from
        ``COSIM_ASSERT``.
    """

    design: str
    config_name: str
    sources: tuple[Path, ...]
    toplevel: str
    public: tuple[str, ...] = ()
    control: tuple[str, ...] = ()
    waves: str | None = None
    timing: bool = False
    extra_args: tuple[str, ...] = ()
    cpp_sources: tuple[Path, ...] = ()
    clock: str | None = None
    clock_period_ns: int = 10
    trace_gate: str | None = None
    main: Path | None = None
    coverage: bool = False
    assertions: bool = False

    def __post_init__(self) -> None:
        if self.waves not in (None, "fst", "vcd"):
            raise ValueError(f"waves must be None, 'fst' or 'vcd', not {self.waves!r}")
        if self.clock is not None and not self.clock.isidentifier():
            raise ValueError(f"clock must be a top-level port name, not {self.clock!r}")
        if self.trace_gate is not None and (self.waves is None or self.clock is None):
            raise ValueError("trace_gate needs waves and a harness clock")
        if self.clock_period_ns <= 0:
            raise ValueError(f"clock_period_ns must be positive, not {self.clock_period_ns}")
        for src in (*self.sources, *self.cpp_sources, *([self.main] if self.main else [])):
            if not Path(src).is_file():
                raise FileNotFoundError(f"Verilog source {src} does not exist (run `make rtl`?)")


@dataclass(frozen=True)
class BuiltModel:
    """A finished Verilator build."""

    spec: BuildSpec
    build_dir: Path
    key: str
    cached: bool
    seconds: float
    stats: dict = field(default_factory=dict)

    @property
    def executable(self) -> Path:
        return self.build_dir / self.spec.toplevel


def _vlt_text(spec: BuildSpec) -> str:
    lines = [
        "`verilator_config",
        "// generated by sim/verilate/build.py: testbench-visible signals",
    ]
    return "\n".join([*lines, *spec.public, *spec.control]) + "\n"


def harness(spec: BuildSpec) -> Path:
    """The C++ main of the executable: ``spec.main``, our clocked cocotb harness, or cocotb's."""
    if spec.main is not None:
        return Path(spec.main)
    return CLOCKED_HARNESS if spec.clock is not None else COCOTB_HARNESS


def uses_cocotb(spec: BuildSpec) -> bool:
    return spec.main is None


def _verilator_args(spec: BuildSpec) -> list[str]:
    tc = find_toolchain()
    args = [*VERILATOR_FLAGS, *tc.verilator_args, *spec.extra_args]
    if spec.cpp_sources:
        args += ["-LDFLAGS", "-rdynamic", *(str(src) for src in spec.cpp_sources)]
    if spec.timing:
        args.append("--timing")
    if spec.waves == "fst":
        args += ["--trace-fst", "--trace-structs", *fst_args(WORK_ROOT / "build" / "clibs")]
    elif spec.waves == "vcd":
        args += ["--trace", "--trace-structs"]
    if spec.coverage:
        args += COVERAGE_ARGS
    if spec.assertions:
        args += ASSERT_ARGS
    return args


def cache_key(spec: BuildSpec) -> str:
    """Hash of everything that changes the built simulator."""
    tc = find_toolchain()
    h = hashlib.sha256()
    for src in (*spec.sources, *spec.cpp_sources):
        h.update(Path(src).name.encode() + b"\0" + Path(src).read_bytes() + b"\0")
    if WAIVERS.exists():
        h.update(WAIVERS.read_bytes())
    # Sources and the C++ main enter by content; the clock fields only when a clock is set, so
    # the keys of builds without one did not change when the fields were added.
    skip = {"sources", "cpp_sources", "main"}
    if spec.clock is None:
        skip |= {"clock", "clock_period_ns"}
    if spec.trace_gate is None:
        skip.add("trace_gate")
    skip |= {name for name in ("coverage", "assertions", "control") if not getattr(spec, name)}
    spec_fields = {k: v for k, v in asdict(spec).items() if k not in skip}
    parts = {
        "spec": spec_fields,
        "vlt": _vlt_text(spec),
        "args": _verilator_args(spec),
        "make": [*MAKE_FLAGS, *tc.make_args],
        "toolchain": tc.fingerprint,
        "cocotb_libs": str(cocotb_tools.config.libs_dir) if uses_cocotb(spec) else None,
        "harness": hashlib.sha256(harness(spec).read_bytes()).hexdigest(),
    }
    h.update(json.dumps(parts, sort_keys=True, default=str).encode())
    return h.hexdigest()[:12]


class CosimVerilator(_CocotbVerilator):
    """cocotb's Verilator runner without ``--public-flat-rw``, with our flags and make fixes."""

    def __init__(self, spec: BuildSpec, vlt: Path) -> None:
        super().__init__()
        self._spec = spec
        self._vlt = vlt
        self.lock_fd: int | None = None  # the build lock, handed down to every command
        self._build_steps: list[list[str]] = []  # the build's commands (:meth:`_build_command`)

    def _execute_cmds(
        self,
        cmds: Sequence[Sequence[str]],
        cwd: os.PathLike[str] | str,
        stdout: IO[str] | None = None,
    ) -> None:
        """cocotb's runner's, plus the build lock passed to each command (and so to make's
        and the compiler's processes), which then hold it until they end; each command runs
        through :func:`~sim.verilate.lifeline.run_child`."""
        for cmd in cmds:
            # (a killed CLI takes the child with it; a simulator stuck after a fatal error ends)
            returncode = run_child(
                cmd,
                cwd=cwd,
                env=self.env,
                stdout=stdout,
                pass_fds=() if self.lock_fd is None else (self.lock_fd,),
                group=any(cmd is step for step in self._build_steps),  # make's compilers too
            )
            if returncode != 0:
                raise RuntimeError(f"Command failed with return code: {returncode}")

    def _harness_source(self) -> Path:
        """The C++ main to compile; for a clocked build a file in the build directory that
        defines the clock and includes sim/csrc/cocotb_main.cpp (defines kept out of -CFLAGS so
        the Verilator runtime objects compile the same for every design and can be shared)."""
        spec = self._spec
        if spec.main is not None or spec.clock is None:
            return harness(spec)
        source = Path(self.build_dir) / "cosim_main.cpp"
        source.write_text(
            "// generated by sim/verilate/build.py\n"
            f"#define COSIM_CLOCK {spec.clock}\n"
            f"#define COSIM_CLOCK_PERIOD_NS {spec.clock_period_ns}\n"
            + (f"#define COSIM_TRACE_GATE {spec.trace_gate}\n" if spec.trace_gate else "")
            + f'#include "{CLOCKED_HARNESS}"\n'
        )
        return source

    def _build_command(self) -> list[list[str]]:
        spec = self._spec
        tc = find_toolchain()
        libs = cocotb_tools.config.libs_dir
        link = ["-LDFLAGS", f"-Wl,-rpath,{libs} -L{libs} -lcocotbvpi_verilator"]
        verilate = [
            str(tc.verilator),
            "-cc",
            "--exe",
            "-Mdir",
            str(self.build_dir),
            "--top-module",
            spec.toplevel,
            "--vpi",
            "--prefix",
            "Vtop",
            "-o",
            spec.toplevel,
            *(link if uses_cocotb(spec) else []),
            *_verilator_args(spec),
            str(self._harness_source()),
            *([str(WAIVERS)] if WAIVERS.exists() else []),
            str(self._vlt),
            *[str(s) for s in spec.sources],
        ]
        jobs = str(max(1, os.cpu_count() or 1))
        compile_ = ["make", "-j", jobs, "-C", str(self.build_dir), "-f", "Vtop.mk"]
        make_args = [*MAKE_FLAGS, *tc.make_args, f"VM_TRACE={int(spec.waves is not None)}"]
        compile_ += make_args
        # Reuse the compiled Verilator runtime of an earlier build with the same flags.
        runtime = [sys.executable, str(Path(__file__).with_name("runtime.py"))]
        cache = [str(self.build_dir), str(Path(self.build_dir).parent / ".runtime")]
        restore = [*runtime, "restore", *cache, *make_args]
        save = [*runtime, "save", *cache, *make_args]
        self._build_steps = [verilate, restore, compile_, save]
        return self._build_steps


#: Variables cocotb reads under generic names (``WAVES`` as a yes/no flag, ``GUI``, ...) and the
#: outer make's command-line variables (``MAKEFLAGS``): a ``make sim WAVES=vcd`` or a user's shell
#: must not reach the runner, the Verilator make or the simulator with them.
FOREIGN_ENV: tuple[str, ...] = ("WAVES", "GUI", "RANDOM_SEED", "COVERAGE", "COVERAGE_RCFILE")
FOREIGN_ENV += ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


@contextmanager
def cocotb_environ() -> Iterator[None]:
    """Hide :data:`FOREIGN_ENV` from this process's environment while cocotb's runner builds or
    runs (it copies ``os.environ`` into the simulator's); restore them after."""
    saved = {name: os.environ.pop(name) for name in FOREIGN_ENV if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


@contextmanager
def _locked(path: Path) -> Iterator[int]:
    """Serialise builds of one directory across processes (pytest-xdist workers, two runs).

    Yields the lock's file descriptor: the build's commands inherit it
    (:meth:`CosimVerilator._execute_cmds`), so the lock outlives this process while any of its
    make or compiler processes still writes (a killed run's orphans): the next build waits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(
                "waiting for %s: another build of this model is running (or the make and "
                "compiler processes of a killed one are finishing)",
                path.name,
            )
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield fh.fileno()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _last_build(root: Path, spec: BuildSpec) -> str:
    """How long the newest earlier build of this design and config took, as a hint."""
    stamps = sorted(
        root.glob(f"{spec.design}-{spec.config_name}-*/{_STAMP}"), key=lambda p: p.stat().st_mtime
    )
    for stamp in reversed(stamps):
        try:
            seconds = json.loads(stamp.read_text())["build_seconds"]
            return f"the last build of it took {seconds:.0f} s"
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return "no earlier build of it here"


def instrumented(spec: BuildSpec) -> BuildSpec:
    """``spec`` with coverage (``COSIM_COVERAGE``) and assertions (``COSIM_ASSERT``) switched on
    as the environment asks; builds with their own C++ main (``make bench``) stay plain."""
    if not uses_cocotb(spec):
        return spec
    return replace(
        spec,
        coverage=spec.coverage or coverage_dir() is not None,
        assertions=spec.assertions or assertions_on(),
    )


def build(
    spec: BuildSpec,
    root: Path = BUILD_ROOT,
    runner_class: type[CosimVerilator] = CosimVerilator,
) -> BuiltModel:
    """Build ``spec`` with Verilator, or reuse the cached build with the same content key.

    ``runner_class`` may add build steps (sim/verilate/pyverilator_build.py); what it builds
    must differ in ``spec`` (hence in the key) from a plain build. A cocotb build is instrumented
    when the environment asks for it (:func:`instrumented`)."""
    spec = instrumented(spec)
    start = time.perf_counter()
    tc = find_toolchain()
    tc.apply_to_environ()
    key = cache_key(spec)
    build_dir = root / f"{spec.design}-{spec.config_name}-{key}"
    stamp = build_dir / _STAMP
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in [root, *root.parents] if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file, not a directory" if blocker else exc.strerror or str(exc)
        raise BuildError(f"cannot create the build directory {root}: {why}") from None
    with _locked(root / f".{build_dir.name}.lock") as lock_fd:
        if stamp.exists() and (build_dir / spec.toplevel).exists():
            stats = json.loads(stamp.read_text())
            seconds = time.perf_counter() - start
            if build_dir.name not in _ANNOUNCED:  # once per process: a generation launches
                _ANNOUNCED.add(build_dir.name)  # the same build once per character
                log.info("verilator build cached: %s (%.2f s)", build_dir.name, seconds)
            return BuiltModel(spec, build_dir, key, True, seconds, stats)
        build_dir.mkdir(parents=True, exist_ok=True)
        vlt = build_dir / "public.vlt"
        vlt.write_text(_vlt_text(spec))
        runner = runner_class(spec, vlt)
        runner.lock_fd = lock_fd
        build_log = build_dir / "build.log"
        log.info(
            "building the Verilator model %s for config %s (%s; log: %s)",
            spec.design,
            spec.config_name,
            _last_build(root, spec),
            build_log,
        )
        try:
            with cocotb_environ(), watch(build_dir):
                runner.build(
                    sources=[*spec.sources],
                    hdl_toplevel=spec.toplevel,
                    build_dir=build_dir,
                    log_file=build_log,
                    waves=spec.waves is not None,
                )
        except (RuntimeError, SystemExit) as exc:
            tail = "\n".join(build_log.read_text(errors="replace").splitlines()[-25:])
            raise BuildError(
                f"Verilator build of {spec.design} ({spec.config_name}) failed: {exc}\n"
                f"--- last lines of {build_log} ---\n{tail}"
            ) from None
        seconds = time.perf_counter() - start
        stats = {"key": key, "build_seconds": round(seconds, 2), "toolchain": tc.fingerprint}
        stamp.write_text(json.dumps(stats, indent=2))
        log.info("verilator build done: %s in %.1f s", build_dir.name, seconds)
        return BuiltModel(spec, build_dir, key, False, seconds, stats)


#: Free space below which an unreadable results file is taken for a full disk.
NEARLY_FULL_BYTES = 1 << 20


def _nearly_full(folder: Path) -> bool:
    try:
        info = os.statvfs(folder)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < NEARLY_FULL_BYTES


def _failures(results_xml: Path) -> list[str]:
    """One line per failed or erroring test case; a file with no test case at all is a failure
    too (a renamed or undecorated cocotb test must not turn a regression green)."""
    failed = []
    try:
        cases = list(ElementTree.parse(results_xml).getroot().iter("testcase"))
    except ElementTree.ParseError as exc:
        if _nearly_full(results_xml.parent):  # (cocotb could not write it: a full disk)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(results_xml)) from None
        return [f"the results file {results_xml} is not readable XML ({exc})"]
    if all(case.find("skipped") is not None for case in cases):
        return [
            f"no cocotb test ran ({len(cases)} test cases in {results_xml}, all skipped): "
            "is the test decorated with @cocotb.test?"
        ]
    for case in cases:
        for bad in (*case.findall("failure"), *case.findall("error")):
            message = (bad.get("message") or bad.text or "").strip().splitlines()
            failed.append(f"{case.get('name')}: {message[0] if message else 'failed'}")
    return failed


def run_cocotb(
    model: BuiltModel,
    test_module: str,
    test_dir: Path,
    *,
    testcase: str | Sequence[str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    trace_file: Path | None = None,
    trace_select: Path | None = None,
    plusargs: Sequence[str] = (),
    seed: int | None = None,
    clock_period_ns: float | None = None,
) -> Path:
    """Run cocotb test module(s) against a built model; raise :class:`SimulationFailed` on failure.

    Returns the results XML path. ``trace_file`` turns tracing on (the model must be built with
    ``waves``); ``trace_select``: the signals written (``LEVEL NAME`` lines,
    :mod:`sim.waves.selection`; ``None``: all); ``plusargs`` (``+name=value``) reach the
    HDL's ``$value$plusargs``. When the model generates its clock (``BuildSpec.clock``), the
    test sees ``COSIM_HARNESS_CLOCK=<port>`` and ``COSIM_CLOCK_PERIOD_NS`` in its environment
    and must not drive that port. A failed RTL assertion (a build with ``assertions``) is named
    in the failure, with its cycle when the clock period is known (the harness clock's, else
    ``clock_period_ns``).
    """
    if trace_file is not None and model.spec.waves is None:
        raise ValueError(f"{model.spec.design} was built without waves; build with waves='fst'")
    if not uses_cocotb(model.spec):
        raise ValueError(f"{model.spec.design} was built with its own main ({model.spec.main})")
    find_toolchain().apply_to_environ()
    test_dir.mkdir(parents=True, exist_ok=True)
    results = test_dir / "results.xml"
    runner = CosimVerilator(model.spec, model.build_dir / "public.vlt")
    test_args = ["--trace", "--trace-file", str(trace_file)] if trace_file else []
    if trace_file and trace_select:
        test_args += ["--trace-select", str(trace_select)]
    env = {knobs.PYTHONWARNINGS.name: knobs.PYTHONWARNINGS.get(), **(extra_env or {})}
    if model.spec.clock is not None:
        env[knobs.HARNESS_CLOCK.name] = model.spec.clock
        env[knobs.CLOCK_PERIOD_NS.name] = str(model.spec.clock_period_ns)
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)  # we check the results ourselves
    try:
        with cocotb_environ():
            runner.test(
                test_module=test_module,
                hdl_toplevel=model.spec.toplevel,
                hdl_toplevel_lang="verilog",
                build_dir=model.build_dir,
                test_dir=test_dir,
                testcase=testcase,
                extra_env=env,
                test_args=test_args,
                plusargs=[*plusargs, *coverage_plusargs(model.spec.coverage)],
                results_xml=str(results),
                seed=seed,
                log_file=test_dir / "sim.log",
            )
    except ChildStuck as exc:  # (the simulator hung after a fatal error and was killed)
        raise SimulationFailed(_describe_failure(test_dir, [str(exc)], 0)) from None
    except (SystemExit, RuntimeError) as exc:
        # SystemExit: cocotb's runner saw failing tests; RuntimeError: the simulator itself
        # stopped (e.g. Verilator's $stop on a failed assertion).
        problems = _failures(results) if results.exists() else []
        period = model.spec.clock_period_ns if model.spec.clock else clock_period_ns
        failed = assertions.find(_log_text(test_dir), period)
        if failed is not None:
            problems.insert(0, failed.describe())
        code = exc.code if isinstance(exc, SystemExit) else str(exc)
        raise SimulationFailed(_describe_failure(test_dir, problems, code)) from None
    finally:
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved
    problems = (
        _failures(results)
        if results.exists()
        else [f"no cocotb test ran: no results file written (does {test_module} define one?)"]
    )
    if problems:
        raise SimulationFailed(_describe_failure(test_dir, problems, 0))
    return results


def _log_text(test_dir: Path) -> str:
    try:
        return (test_dir / "sim.log").read_text(errors="replace")
    except OSError:
        return ""


def _describe_failure(test_dir: Path, problems: list[str], code: object) -> str:
    head = f"simulation failed (exit {code})" if code else "simulation failed"
    lines = [head, *(f"  {p}" for p in problems[:10]), f"  log: {test_dir / 'sim.log'}"]
    return "\n".join(lines)
