"""The contract every side shares: the accelerator config, the ISA (formats, opcodes, launch
registers, arithmetic limits), the assembler, the ISA doc generator, the integer reference ops,
one spec per IR op beside its evaluator (``arch.ops``), the graph evaluator, and the executable
format. Builds no hardware; imports nothing of the project above it (``hdl_gen``, ``compiler``,
``sim``)."""
