"""In-process access to the simulated DRAM (the DPI storage in sim/csrc/cosim_dram.cpp).

Only usable inside the simulator process (a cocotb test or the pyverilator backend). Loading an
image or reading results is a memcpy through ctypes; :attr:`DpiDram.array` is a numpy view of the
same bytes. numpy is imported only when that view is used, so the cocotb job starts fast.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any


class DpiDram:
    """The DRAM buffer of the running simulator."""

    def __init__(self, size: int, lib: ctypes.CDLL | None = None) -> None:
        """``lib``: the library holding the model (a pyverilator model is a shared object loaded
        with ctypes); by default the symbols of this process (the cocotb simulator executable)."""
        lib = ctypes.CDLL(None) if lib is None else lib
        try:
            buffer = lib.cosim_dram_buffer
        except AttributeError:
            raise RuntimeError(
                "cosim_dram_buffer not found: the model was built without sim/csrc/cosim_dram.cpp"
            ) from None
        buffer.restype = ctypes.c_void_p
        buffer.argtypes = [ctypes.c_uint64]
        lib.cosim_dram_size.restype = ctypes.c_uint64
        lib.cosim_dram_watch.argtypes = [ctypes.c_uint64]
        lib.cosim_dram_stray_bytes.restype = ctypes.c_uint64
        lib.cosim_dram_stray_first.restype = ctypes.c_uint64
        self._lib = lib
        # A new buffer is zero-filled; one of this size may be left over from an earlier model of
        # the same library in this process (pyverilator), with its contents.
        reused = lib.cosim_dram_size() == size
        self.size = size
        self.address: int = buffer(size)
        self._zero = not reused

    @property
    def array(self) -> Any:
        """A writable numpy uint8 view of the whole DRAM."""
        import numpy as np

        pointer = ctypes.cast(self.address, ctypes.POINTER(ctypes.c_uint8))
        return np.ctypeslib.as_array(pointer, shape=(self.size,))

    def load_bytes(self, image: bytes | bytearray | memoryview) -> None:
        """Zero the DRAM and copy ``image`` to address 0."""
        if len(image) > self.size:
            raise ValueError(f"DRAM image of {len(image)} bytes exceeds the {self.size}-byte DRAM")
        if not self._zero:
            ctypes.memset(self.address, 0, self.size)
        ctypes.memmove(self.address, bytes(image), len(image))
        self._zero = False

    def load_file(self, path: Path | str) -> None:
        self.load_bytes(Path(path).read_bytes())

    def load(self, image: Any) -> None:
        """Zero the DRAM and copy ``image`` (a numpy uint8 array) to address 0."""
        self.load_bytes(memoryview(image).cast("B"))

    def watch(self, start: int) -> None:
        """From now on count the bytes written at ``start`` or above (past the read-back
        window: anywhere else in DRAM, or past its end)."""
        self._lib.cosim_dram_watch(start)

    def stray(self) -> tuple[int, int]:
        """(bytes written at or above the watched address since :meth:`watch`, the lowest of
        those addresses; -1 when there is none)."""
        count = int(self._lib.cosim_dram_stray_bytes())
        return count, int(self._lib.cosim_dram_stray_first()) if count else -1

    def read_bytes(self, offset: int, size: int) -> bytes:
        if offset < 0 or offset + size > self.size:
            raise ValueError(f"read of {size} bytes at {offset} outside the {self.size}-byte DRAM")
        return ctypes.string_at(self.address + offset, size)

    def dump(self, path: Path | str, size: int) -> None:
        """Write the first ``size`` bytes to ``path``."""
        Path(path).write_bytes(self.read_bytes(0, size))

    def read(self, size: int) -> Any:
        """The first ``size`` bytes as a numpy uint8 array (a copy)."""
        return self.array[:size].copy()
