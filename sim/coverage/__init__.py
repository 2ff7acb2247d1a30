"""Verification depth: code coverage of the RTL (code.py), functional coverage of what the
regression's programs contained (functional.py), and the report that merges both (report.py)."""
