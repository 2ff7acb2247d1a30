"""The curated mutant sets by name."""

from __future__ import annotations

from mutation import harness_mutants
from mutation.curated import CuratedSet
from mutation.harness_mutants import HARNESS_MUTANTS
from mutation.rtl_mutants import CONFIG, KILLERS, RTL_MUTANTS
from mutation.rtl_mutants_norm import NORM, NORM_KILLERS

CURATED: dict[str, CuratedSet] = {
    "rtl": CuratedSet("rtl", RTL_MUTANTS, KILLERS, regenerate=CONFIG),
    # the norm unit is generated for configs with norm_unit only: no preset RTL to regenerate,
    # its own tests build one
    "norm": CuratedSet("norm", NORM, NORM_KILLERS),
    "harness": CuratedSet("harness", HARNESS_MUTANTS, (), killers_of=harness_mutants.KILLERS_OF),
}
