"""The curated mutant sets by name."""

from __future__ import annotations

from mutation.curated import CuratedSet
from mutation.harness_mutants import HARNESS_MUTANTS, KILLERS_OF
from mutation.rtl_mutants import CONFIG, KILLERS, RTL_MUTANTS

CURATED: dict[str, CuratedSet] = {
    "rtl": CuratedSet("rtl", RTL_MUTANTS, KILLERS, regenerate=CONFIG),
    "harness": CuratedSet("harness", HARNESS_MUTANTS, (), killers_of=KILLERS_OF),
}
