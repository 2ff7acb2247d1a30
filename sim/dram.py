"""In-process access to the simulated DRAM (the DPI storage in sim/csrc/cosim_dram.cpp).

Only usable inside the simulator process (a cocotb test or the pyverilator backend): the bytes
are a numpy view of the C++ buffer, so loading an image or reading results is a memcpy.
"""

from __future__ import annotations

import ctypes

import numpy as np


class DpiDram:
    """The DRAM buffer of the running simulator, as a writable numpy uint8 array."""

    def __init__(self, size: int) -> None:
        lib = ctypes.CDLL(None)
        try:
            buffer = lib.cosim_dram_buffer
        except AttributeError:
            raise RuntimeError(
                "cosim_dram_buffer not found: the model was built without sim/csrc/cosim_dram.cpp"
            ) from None
        buffer.restype = ctypes.POINTER(ctypes.c_uint8)
        buffer.argtypes = [ctypes.c_uint64]
        self.array = np.ctypeslib.as_array(buffer(size), shape=(size,))

    def load(self, image: np.ndarray) -> None:
        """Zero the DRAM and copy ``image`` to address 0."""
        if image.size > self.array.size:
            raise ValueError(
                f"DRAM image of {image.size} bytes exceeds the {self.array.size}-byte DRAM"
            )
        self.array[:] = 0
        self.array[: image.size] = image

    def read(self, size: int) -> np.ndarray:
        return self.array[:size].copy()
