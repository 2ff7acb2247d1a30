"""Dask preload of the LocalCluster's workers (``preload=[__name__]``): a worker leaves Ctrl-C
to the CLI that started it. The terminal sends SIGINT to its whole process group, workers
included; the CLI closes the cluster, and a worker that also took it would print a
KeyboardInterrupt traceback of its own. (The workers start with SIGINT blocked - see
``cluster._ctrl_c_held_from_workers`` - which covers their imports; ignoring it here also
drops the one held meanwhile.) A worker also keeps quiet about losing the scheduler: the
scheduler lives in the CLI's process, so a lost heartbeat means the CLI is ending (a Ctrl-C
while it closes the cluster) and reports for itself."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

HEARTBEAT_LOST = "Failed to communicate with scheduler during heartbeat"


class HeartbeatLossFilter(logging.Filter):
    """Drops a worker's record of a heartbeat the scheduler did not answer (and its
    traceback); every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(HEARTBEAT_LOST)


def dask_setup(worker: Any) -> None:
    """Ignore SIGINT in this worker process (Dask calls this on the worker's main thread) and
    drop its lost-heartbeat records."""
    logging.getLogger("distributed.worker").addFilter(HeartbeatLossFilter())
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
