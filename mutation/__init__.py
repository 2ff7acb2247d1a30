"""Mutation testing (``make mutate``): do the tests notice a wrong design?

Two kinds of mutant sets, one report (``build/mutation/report.json`` and ``summary.txt``):

* curated sets (:mod:`mutation.rtl_mutants`, :mod:`mutation.harness_mutants`): small reviewable
  source edits, each applied to a temporary copy of the checkout and run against the tests that
  should kill it (for the RTL generator: its ``rtl/tiny/sim_top.v`` regenerated, then the
  instruction-level RTL regression on ``tiny``);
* the Python numeric code, mutated by mutmut (:mod:`mutation.python_set`), each module's mutants
  against the fast unit tests that cover it.
"""
