"""The accelerator's hardware: Amaranth components (fetch, the load / compute / store units and
their engines, the systolic array, DMA and DRAM links), one per file, and the tools that turn them
into files: ``generate`` (the simulation Verilog in ``rtl/<config>/``), ``synth`` (the area
estimate) and ``emit`` (Verilog conversion). The sizes come from the config (:mod:`arch.config`);
instruction formats, encodings and every ISA-visible width (fields, local and DRAM addresses,
launch registers, program indices) from :mod:`arch.isa`."""
