"""A curated mutant: one exact source snippet and its replacement, applied to a copy of a tree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class MutantError(ValueError):
    """A mutant that cannot be applied (its snippet is missing or ambiguous), or an unknown id."""


@dataclass(frozen=True)
class Mutant:
    """One semantic mutant.

    Parameters
    ----------
    id : str
        Short unique name, e.g. ``"requant-neg-tie-away"``.
    file : str
        Path relative to the checkout.
    original, replacement : str
        ``original`` must occur exactly once in ``file``; it is replaced by ``replacement``.
    why : str
        The bug it stands for.
    equivalent : str
        Empty, or one line saying why no test can kill it (then it is expected to survive).
    known_gap : str
        Empty, or a survivor that is *not* equivalent and still needs a test: `make mutate`
        fails on it, the CI slice reports it without failing.
    """

    id: str
    file: str
    original: str
    replacement: str
    why: str
    equivalent: str = ""
    known_gap: str = ""

    @property
    def where(self) -> str:
        return f"{self.file}: {self.original.strip().splitlines()[0][:60]}"

    def apply(self, root: Path) -> None:
        """Edit ``root / file`` in place (a copy of the checkout, never the checkout)."""
        path = root / self.file
        text = path.read_text()
        found = text.count(self.original)
        if found != 1:
            raise MutantError(
                f"mutant {self.id}: its snippet occurs {found} times in {self.file}, not once"
            )
        path.write_text(text.replace(self.original, self.replacement))


def select(mutants: list[Mutant], ids: list[str]) -> list[Mutant]:
    """The mutants named by ``ids`` (all when empty); an unknown id is an error."""
    if not ids:
        return list(mutants)
    by_id = {m.id: m for m in mutants}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise MutantError(
            f"unknown mutant id {', '.join(unknown)}; `python -m mutation --list` lists them"
        )
    return [by_id[i] for i in ids]
