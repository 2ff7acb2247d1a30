"""The accelerator's hardware: Amaranth components (fetch, the load / compute / store units and
their engines, the systolic array, DMA and DRAM links), one per file, and the tools that turn them
into files: ``generate`` (the simulation Verilog in ``rtl/<config>/``), ``synth`` (the area
estimate) and ``emit`` (Verilog conversion). Nothing here defines a width or an encoding of its
own: the config comes from :mod:`arch.config`, every instruction field, address and register width
from :mod:`arch.isa`."""
