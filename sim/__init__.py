"""Running executables, in rooms (``docs/architecture.md``): :mod:`sim.runtime` (the step loop,
every layer checked against the reference), :mod:`sim.backends` (ISA simulator, RTL under
cocotb, RTL through pyverilator, user hooks), :mod:`sim.verilate` (the Verilator build layer),
:mod:`sim.waves`, :mod:`sim.coverage`, :mod:`sim.quality` (int8 against fp32),
:mod:`sim.scaleout` (Dask shards and sweeps), :mod:`sim.app` (``make sim``, ``cosim``, the
Python API, reports) and :mod:`sim.bench` (``make bench``); :mod:`sim.knobs` declares every
environment variable. Reads executables only, never the compiler's IR or plan."""
