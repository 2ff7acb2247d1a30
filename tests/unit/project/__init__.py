"""Unit tests of the project's own contracts: layering, environment knobs, mutation tables."""
