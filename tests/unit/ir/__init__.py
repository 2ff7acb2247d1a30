"""Unit tests of the compiler's IR and its verifier."""
