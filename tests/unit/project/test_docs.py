"""README.md and the site's pages (docs/*.md) against what they name: every `make <target>` in
their code is a Makefile target, every `VAR=` a variable of `make help` or an environment variable
of `sim/knobs.py`, every relative link reaches a file (and a heading of it), and every page is in
mkdocs.yml's nav. `make docs` builds the site itself with warnings as errors (CI); these checks
need no mkdocs."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path

import pytest
import yaml

from sim import knobs

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
# The lab notebook, kept as written: it names Verilator's own make variables (OPT_FAST=) and
# commands of its time; its links are checked like every page's.
ARCHIVE = DOCS / "performance-history.md"

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
# An inline code span, which may wrap onto the next line of its paragraph.
_SPAN = re.compile(r"`(?:[^`\n]|\n(?![ \t]*\n))+`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# `make x` where a command starts: a line, a code span, after && ; | or VAR=value settings.
_MAKE = re.compile(r"(?:^|`|&&|;|\|)\s*(?:[A-Z][A-Z0-9_]*=\S*\s+)*make\s+([a-z][a-z-]*)", re.M)
_VAR = re.compile(r"(?<![\w$.-])([A-Z][A-Z0-9_]*)=")
_TARGET = re.compile(r"^([a-z][a-z-]*):", re.M)


def code_of(text: str) -> list[str]:
    """The fenced blocks and inline code spans of a Markdown text: where commands are written."""
    blocks = _FENCE.findall(text)
    return blocks + _SPAN.findall(_FENCE.sub("", text))


def prose_of(text: str) -> str:
    """The text without its code, where links are."""
    return _SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as Python-Markdown's toc writes it (its default ``slugify``)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors_of(page: Path) -> set[str]:
    """The anchors of a page's headings (those in code blocks are no headings)."""
    lines = _FENCE.sub("", page.read_text()).splitlines()
    return {slug(line.lstrip("#").strip()) for line in lines if re.match(r"#{1,6} ", line)}


@cache
def make_targets() -> frozenset[str]:
    return frozenset(_TARGET.findall((ROOT / "Makefile").read_text()))


@cache
def make_help_variables() -> frozenset[str]:
    out = subprocess.run(
        ["make", "-s", "--no-print-directory", "help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    variables = out.split("Variables", 1)[1]
    return frozenset(_VAR.findall(variables))


def unknown_names(text: str) -> list[str]:
    """The make targets and VAR= of a page's code that neither the Makefile nor the knobs know."""
    known_vars = make_help_variables() | {k.name for k in knobs.KNOBS}
    wrong = []
    for code in code_of(text):
        wrong += [f"make {t}" for t in _MAKE.findall(code) if t not in make_targets()]
        wrong += [f"{v}=" for v in _VAR.findall(code) if v not in known_vars]
    return sorted(wrong)


def broken_links(page: Path) -> list[str]:
    """A page's relative links whose file or heading does not exist."""
    broken = []
    for link in _LINK.findall(prose_of(page.read_text())):
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(link)
            continue
        if anchor and (target.suffix != ".md" or anchor not in anchors_of(target)):
            broken.append(link)
    return broken


@pytest.mark.parametrize("page", [p for p in PAGES if p != ARCHIVE], ids=lambda p: p.name)
def test_every_make_target_and_variable_named_exists(page: Path) -> None:
    assert unknown_names(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_site_pages_stay_inside_docs() -> None:
    """mkdocs serves only docs/: a page's link out of it would break the site."""
    for page in DOCS.glob("*.md"):
        for link in _LINK.findall(prose_of(page.read_text())):
            if not re.match(r"[a-z]+:", link) and link.partition("#")[0]:
                assert (DOCS / link.partition("#")[0]).resolve().parent == DOCS, (page, link)


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    def files(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [f for value in node.values() for f in files(value)]
        assert isinstance(node, list)
        return [f for item in node for f in files(item)]

    nav = files(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))


def test_the_readme_is_a_quick_start() -> None:
    """Under 200 lines, the two commands, the system packages line .ci/run installs from."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    assert "make sim MODEL=resnet" in readme and "make test " in readme
    ci_packages = re.search(r"packages=\(([^)]*)\)", (ROOT / ".ci" / "run").read_text())
    assert ci_packages is not None
    apt = re.search(r"apt-get install -y ([^\n]*)", readme)
    assert apt is not None and set(ci_packages.group(1).split()) <= set(apt.group(1).split())


def test_the_docs_extra_and_the_lock_pin_the_same_versions() -> None:
    """`make docs` installs pyproject's docs extra at requirements.lock's pins: they agree."""
    extra = re.search(r"^docs = \[([^\]]*)\]", (ROOT / "pyproject.toml").read_text(), re.M)
    assert extra is not None
    pins = re.findall(r'"([^"]+)"', extra.group(1))
    lock = set((ROOT / "requirements.lock").read_text().lower().splitlines())
    assert pins and all(pin.lower() in lock for pin in pins), pins


# The checks themselves, on pages made up here: each kind of mistake is caught.
def test_the_checks_catch_unknown_targets_variables_and_links(tmp_path: Path) -> None:
    text = "Run `make simulate MODEL=cnn` or\n```sh\nWAVE_LAYR=fc make sim\nmake test\n```\n"
    assert unknown_names(text) == ["WAVE_LAYR=", "make simulate"]
    assert unknown_names("`apt-get install -y g++ make perl`") == []
    assert unknown_names("a span that wraps: `make\nsimulate`") == ["make simulate"]
    assert unknown_names("`COSIM_KEEP_RUNS=3 make sim CALIB=x.npy` and `make docs`") == []
    (tmp_path / "a.md").write_text("# A page\n\n## Its `make sim` part\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md) [ok](a.md#its-make-sim-part) [ok](#b) [web](https://x.org/y.md)\n"
        "[gone](c.md) [no heading](a.md#nope) [gone](c.md#b) `[code](c.md)`\n\n# B\n"
    )
    assert broken_links(page) == ["c.md", "a.md#nope", "c.md#b"]
    assert slug("Shards on two cores (issue #17)") == "shards-on-two-cores-issue-17"
    assert slug("The next layer's first loads") == "the-next-layers-first-loads"
