"""Amaranth hardware generators for the systolic GEMM accelerator, plus its config and ISA."""
