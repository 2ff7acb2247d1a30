"""The backends that run device programs: the numpy ISA simulator, the RTL under cocotb and the
RTL driven in-process by pyverilator."""
