"""Unit tests of Verilator and pyverilator builds, the toolchain, waveform requests, RTL freshness, synthesis."""
