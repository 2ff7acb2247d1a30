"""Unit tests of config, ISA encoding and assembler, op specs, integer reference ops, the
executable file."""
