"""The build layer: the toolchain check, cached Verilator builds (cocotb and pyverilator), the
shared Verilator runtime objects and the pyverilator block handle."""
