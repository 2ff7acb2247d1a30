"""Dask preload of the LocalCluster's workers (``preload=[__name__]``): a worker leaves Ctrl-C
to the CLI that started it. The terminal sends SIGINT to its whole process group, workers
included; the CLI closes the cluster, and a worker that also took it would print a
KeyboardInterrupt traceback of its own. (The workers start with SIGINT blocked - see
``cluster._ctrl_c_held_from_workers`` - which covers their imports; ignoring it here also
drops the one held meanwhile.)"""

from __future__ import annotations

import signal
import threading
from typing import Any


def dask_setup(worker: Any) -> None:
    """Ignore SIGINT in this worker process (Dask calls this on the worker's main thread)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
