"""Simulation: toolchain, Verilator build layer, backends (ISA simulator, RTL via cocotb)."""
