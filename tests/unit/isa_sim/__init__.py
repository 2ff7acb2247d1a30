"""Unit tests of the ISA simulator: every instruction and error, random programs."""
