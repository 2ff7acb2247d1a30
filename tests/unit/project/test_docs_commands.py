"""Every `make sim` command written in README.md and the site's pages expands, through the
Makefile itself (`make -n`), into a `python -m sim.app.cli` command line the CLI accepts: options
and choices its parser knows, a zoo model or an .onnx file, a preset config or a .json file, a
calibration method the calibration knows. No simulator runs here: what such a run does is tested
by the network tests. `make docs-check` (marker ``docs_run``, not in `make test`: the RTL
ResNets and ViT take hours) runs each command for real and expects exit code 0; a command that
names a file of the reader's own (``model.onnx``, ``cat.png``) is skipped, saying which."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import zoo
from arch.config import config_names
from compiler.calib_methods import parse_method
from sim.app.cli import parse

from .test_docs import ARCHIVE, PAGES, code_of

ROOT = Path(__file__).resolve().parents[3]
# `make sim` and the VAR=value settings after it, on one line (a comment or && ends it).
_SETTING = r"[A-Z][A-Z0-9_]*=\S*"
_SIM = re.compile(
    rf"(?:^|&&|;)[ \t]*(?:{_SETTING}[ \t]+)*make[ \t]+sim(?![^\s])((?:[ \t]+{_SETTING})*)", re.M
)


def sim_commands(text: str) -> list[str]:
    """The settings of each complete `make sim` command in a page's code (placeholders such as
    `MODEL=...` are not commands)."""
    found = []
    for code in code_of(text):
        lines = code if code.startswith("```") else " ".join(code.strip("`").split())
        for match in _SIM.finditer(lines):
            settings = " ".join(match.group(1).split())
            if "..." not in settings and "[" not in settings:
                found.append(settings)
    return found


def cli_argv(settings: str) -> list[str]:
    """The arguments `make sim <settings>` passes to ``python -m sim.app.cli``."""
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "sim", *shlex.split(settings)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    command = dry.split("-m sim.app.cli", 1)[1].replace("\\\n", " ").split("\n", 1)[0]
    return shlex.split(command)


def refusal(settings: str) -> str | None:
    """Why the CLI would refuse `make sim <settings>` before running anything, or None."""
    try:
        args = parse(cli_argv(settings))
    except SystemExit:
        return "the CLI's parser refuses it"
    if args.model is not None and args.model not in zoo.MODELS and not args.model.endswith(".onnx"):
        return f"no model {args.model!r}"
    known = config_names()
    if args.config is not None and args.config not in known and not args.config.endswith(".json"):
        return f"no config {args.config!r}"
    try:
        if args.calib_method is not None:  # None: the run's default method
            parse_method(args.calib_method)
    except ValueError as exc:
        return str(exc)
    return None


COMMANDS = sorted(
    {
        (page.name, settings)
        for page in PAGES
        if page != ARCHIVE
        for settings in sim_commands(page.read_text())
    }
)


def test_the_pages_hold_commands_to_check() -> None:
    assert len(COMMANDS) >= 30 and ("README.md", "MODEL=resnet") in COMMANDS


@pytest.mark.parametrize(("page", "settings"), COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_every_documented_make_sim_command_is_accepted(page: str, settings: str) -> None:
    assert refusal(settings) is None


def test_the_check_refuses_what_the_cli_refuses() -> None:
    """Made-up commands, each wrong in one way."""
    assert sim_commands("```sh\nmake sim MODEL=cnn BACKEND=isa   # fine\n```") == [
        "MODEL=cnn BACKEND=isa"
    ]
    assert sim_commands("`make sim BUNDLE=...` and `make sim/test HOOKS=`") == []
    assert sim_commands("`make sim\nMODEL=cnn`, `make sim`") == ["MODEL=cnn", ""]
    assert refusal("MODEL=cnn BACKEND=isa") is None
    assert refusal("MODEL=cnn BACKEND=verilog") == "the CLI's parser refuses it"
    assert refusal("MODEL=resnet101") == "no model 'resnet101'"
    assert refusal("MODEL=cnn CONFIG=huge") == "no config 'huge'"
    assert refusal("MODEL=cnn CALIB_METHOD=kl") is not None
    assert refusal("MODEL=cnn WAVES=png") == "the CLI's parser refuses it"


def test_the_zoo_table_names_every_zoo_model() -> None:
    text = (ROOT / "docs" / "models-and-inputs.md").read_text()
    table = text.split("## The model zoo", 1)[1].split("\n## ", 1)[0]
    assert sorted(set(re.findall(r"`([a-z0-9]+)`", table)) & set(zoo.MODELS)) == sorted(zoo.MODELS)


#: Files the docs name as the reader's own (a command with one of them cannot run here).
PLACEHOLDERS = ("path/to/", "model.onnx", "x.onnx", "cat.png", "photos/", "calib/", "batch.npy")
PLACEHOLDERS += ("ids.npy", "BUNDLE=file")
#: build/runs/latest is whatever ran last (under pytest-xdist: not a known model's run)
PLACEHOLDERS += ("build/runs/latest/",)


def placeholder(settings: str) -> str | None:
    return next((name for name in PLACEHOLDERS if name in settings), None)


@pytest.mark.docs_run
@pytest.mark.parametrize(("page", "settings"), COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_every_documented_make_sim_command_runs(page: str, settings: str, tmp_path: Path) -> None:
    """`make sim <settings>` as the CLI it expands to, in a fresh run directory: exit code 0."""
    name = placeholder(settings)
    if name is not None:
        pytest.skip(f"names a file of the reader's own ({name})")
    argv = [*cli_argv(settings), "--out", str(tmp_path / "run")]
    done = subprocess.run(
        [sys.executable, "-m", "sim.app.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
    assert done.returncode == 0, f"{page}: make sim {settings} exited {done.returncode}\n{tail}"


def test_placeholders_are_recognised() -> None:
    assert placeholder("MODEL=path/to/model.onnx IMAGE=cat.png") == "path/to/"
    assert placeholder("MODEL=cnn CONFIG=tiny") is None
