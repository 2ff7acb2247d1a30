"""The executable: what the compiler writes and the simulators run (:mod:`.format`), and its
file, a zip of a JSON manifest and ``.npy`` arrays (:mod:`.archive`)."""

from arch.executable.archive import (
    FORMAT_VERSION,
    SUFFIX,
    ExecutableError,
    check_config,
    check_images,
    load,
    save,
)
from arch.executable.format import (
    HOST_OPS,
    DeviceProgram,
    DramTensor,
    Executable,
    HostStep,
    LayerEntry,
    ReferenceGraph,
    RefNode,
    Region,
    TensorSpec,
    is_path_name,
    path_name,
)

__all__ = [
    "FORMAT_VERSION",
    "HOST_OPS",
    "SUFFIX",
    "DeviceProgram",
    "DramTensor",
    "Executable",
    "ExecutableError",
    "HostStep",
    "LayerEntry",
    "RefNode",
    "ReferenceGraph",
    "Region",
    "TensorSpec",
    "check_config",
    "check_images",
    "is_path_name",
    "load",
    "path_name",
    "save",
]
