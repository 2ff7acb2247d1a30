"""Running executables: :mod:`sim.run` (steps in order, every layer checked against the
reference), the backends (:mod:`sim.backends`: ISA simulator, RTL under cocotb, RTL through
pyverilator), the Verilator build layer (:mod:`sim.verilate`), waveforms (:mod:`sim.waves`),
reports, the command line (``make sim``, ``cosim``) and the Python API. Reads executables only,
never the compiler's IR or plan."""
