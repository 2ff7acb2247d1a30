"""Fuzz: random executable mutations (:mod:`tests.fuzz.executable_mutations`) through the load
path of ``--bundle`` (:func:`sim.app.session.load_executable`).

Each mutated file must be refused with one line naming the file (:class:`ExecutableError`:
exit 2), or load; one that loads without its digest recomputed must hold exactly what the
original holds (the damage was in no content), and one whose digests were all recomputed (a
deliberate edit) runs through the CLI, which must end without an internal error (exit 4) or a
traceback. ``COSIM_FUZZ_CASES`` mutations (default 50: ``make test``'s sample; ``make fuzz``:
1,000) in chunks of :data:`CHUNK`, seeded by ``COSIM_FUZZ_SEED`` (default 44), taking turns
between two originals: the MLP and a hybrid model whose reference graph holds the map <-> tokens
views and a selected token (format 6)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arch import executable
from arch.config import PRESETS
from arch.executable import DeviceProgram, Executable, ExecutableError
from sim.app.cli import main
from sim.app.session import Request, load_executable
from tests.executable_files import reseal
from tests.fuzz.executable_mutations import members_of, mutate, zip_of

CASES = int(os.environ.get("COSIM_FUZZ_CASES", "50"))
SEED = int(os.environ.get("COSIM_FUZZ_SEED", "44"))
CHUNK = 50
REPO = Path(__file__).resolve().parents[2]
#: Deliberately edited files that load are run by the CLI (about 1.5 s each): at most this many
#: per chunk, so the sample stays a few seconds.
RUNS_PER_CHUNK = int(os.environ.get("COSIM_FUZZ_RUNS", "2"))


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, Executable]]:
    """The files the cases mutate, in turn: the MLP, and a model of the map/tokens views."""
    import onnx

    from compiler.compile import compile_model
    from tests import token_graphs

    folder = tmp_path_factory.mktemp("fuzz")
    views = folder / "views.onnx"
    onnx.save(token_graphs.map_token_round_trip(size=3, dim=8, seed=5, head=True), views)
    files = []
    for model in ("mlp", views):
        compiled = compile_model(model, PRESETS["tiny"])
        path = executable.save(compiled.executable, folder / f"{Path(str(model)).stem}.cosim")
        files.append((path, executable.load(path)))
    return files


@pytest.fixture(scope="module")
def original(originals: list[tuple[Path, Executable]]) -> tuple[Path, Executable]:
    return originals[0]


def content(exe: Executable) -> tuple:
    """What an executable holds, comparable with ``==`` (arrays as bytes)."""
    steps = [
        (dataclasses.replace(s, image=None), s.image.tobytes())
        if isinstance(s, DeviceProgram)
        else s
        for s in exe.steps
    ]
    nodes = [
        (n.name, n.op, n.inputs, n.output, n.attrs, {k: (v.dtype, v.shape, v.tobytes())
                                                      for k, v in n.params.items()})
        for n in exe.reference.nodes
    ]  # fmt: skip
    ref = exe.reference
    return exe.model, exe.config, steps, nodes, ref.tensors, ref.inputs, ref.outputs


def load_as_the_cli_does(path: Path) -> Executable:
    request = Request(bundle=path)
    return load_executable(request)[0]


@pytest.mark.parametrize("chunk", range(max(1, -(-CASES // CHUNK))))
def test_random_mutations_are_refused_or_harmless(
    originals, chunk: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [(path.read_bytes(), content(exe)) for path, exe in originals]
    rng = np.random.default_rng([SEED, chunk])
    runs = 0
    for case in range(chunk * CHUNK, min(CASES, (chunk + 1) * CHUNK)):
        data, want = files[case % len(files)]
        mutation = mutate(rng, data, members_of(data))
        where = tmp_path / f"m{case}.cosim"
        where.write_bytes(mutation.data)
        what = f"case {case} (seed {SEED}): {mutation.kind} {mutation.detail} [{mutation.sealing}]"
        try:
            loaded = load_as_the_cli_does(where)
        except ExecutableError as exc:
            text = str(exc)
            assert text.startswith(f"{where}") and "\n" not in text and len(text) < 1000, what
            continue
        if mutation.sealing != "all":
            assert content(loaded) == want, f"{what}: loaded with other content"
        elif runs < RUNS_PER_CHUNK and content(loaded) != want:
            runs += 1
            assert_cli_ends_cleanly(capsys, where, tmp_path / f"o{case}", what)


def assert_cli_ends_cleanly(
    capsys: pytest.CaptureFixture[str], bundle: Path, out: Path, what: str
) -> None:
    code = main(["--backend", "isa", "--bundle", str(bundle), "--out", str(out)])
    err = capsys.readouterr().err
    assert code != 4 and "Traceback" not in err, f"{what}: exit {code}\n{err}"


if CASES > CHUNK:  # the campaign (make fuzz) only: a process start costs seconds

    def test_the_cli_process_exits_2_on_damaged_files(original, tmp_path: Path) -> None:
        """End to end, as a user runs it: ``python -m sim.app.cli --bundle`` on a damaged and
        on an edited file: exit 2, one ``error:`` line naming the file, no traceback."""
        path, _exe = original
        data = bytearray(path.read_bytes())
        data[len(data) // 3] ^= 0x5A
        damaged = tmp_path / "damaged.cosim"
        damaged.write_bytes(bytes(data))
        members = members_of(path.read_bytes())
        info = json.loads(members["manifest.json"])
        info["config"]["dram_latency"] += 1
        edited = tmp_path / "edited.cosim"
        members["manifest.json"] = json.dumps(info).encode()
        edited.write_bytes(zip_of(reseal(members, root=False)))
        for bundle in (damaged, edited):
            result = subprocess.run(
                [sys.executable, "-m", "sim.app.cli", "--backend", "isa", "--bundle",
                 str(bundle), "--out", str(tmp_path / "o")],
                capture_output=True, text=True, timeout=300, cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )  # fmt: skip
            errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
            assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
            assert len(errors) == 1 and str(bundle) in errors[0], result.stderr
