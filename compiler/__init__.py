"""Compiler front end: ONNX model -> program, DMA descriptors and DRAM image (the bundle)."""
