"""Unit tests of the compiler front end: ONNX import, canonicalize, quantize, calibration,
placement, the zoo."""
