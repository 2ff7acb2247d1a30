"""The local workers' preload drops Dask's lost-heartbeat record (the scheduler lives in the
CLI's process: losing it means the CLI is ending) and nothing else."""

import logging

import distributed.worker

from sim.scaleout.worker_setup import HEARTBEAT_LOST, HeartbeatLossFilter


def test_the_filter_drops_a_lost_heartbeat_with_its_traceback_and_keeps_other_errors():
    logger = logging.getLogger("test_worker_setup.worker")
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.addFilter(HeartbeatLossFilter())
    try:
        for message in (f"{HEARTBEAT_LOST}.", "Unexpected exception during heartbeat."):
            try:
                raise OSError("Stream is closed")
            except OSError:
                logger.exception(message)
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in seen] == ["Unexpected exception during heartbeat."]


def test_the_message_is_the_one_dask_logs():
    """Dask's own source (the pinned version) logs this exact message from its heartbeat."""
    import inspect

    assert f'logger.exception("{HEARTBEAT_LOST}.")' in inspect.getsource(distributed.worker)
