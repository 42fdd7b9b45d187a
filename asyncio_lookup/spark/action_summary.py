"""The driver's summary after an action: when the first action on a DataFrame that a table was
joined into (or ``async_map`` mapped with a ``metrics_id``) finishes, the driver logs what its
tasks warned about, once, with the job's totals (``JobMetrics.summary()``): at WARN when there
are warnings, at INFO when there are only failures or retries by cause. The executors' own WARN
lines sit in executor logs that a user may never open.

No Spark API tells a Python driver that an action finished in both classic and Connect mode, so
a daemon thread polls the batch observations :func:`watch` is given, every :data:`POLL_S`, and
runs only while some are pending; at most :data:`MAX_PENDING` (the newest) are watched. The SQL
front end's views and streaming queries are not watched: read ``metrics().summary()`` or
``query_metrics(query).summary()`` there.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from asyncio_lookup.spark.job_metrics import fold
from asyncio_lookup.spark.observations import session_stopped, trailers_of

logger = logging.getLogger("asyncio_lookup.summary")

POLL_S = 0.5  # how soon after an action its summary is logged
MAX_PENDING = 64  # observations watched at once: DataFrames built and not acted on age out

_lock = threading.Lock()
_pending: list[tuple[str, Any, Any]] = []  # (title, session, observation)
_thread: threading.Thread | None = None


def watch(title: str, session: Any, observation: Any) -> None:
    """Log the summary of ``observation``'s first action (``title``: the table's name)."""
    global _thread
    with _lock:
        _pending.append((title, session, observation))
        del _pending[:-MAX_PENDING]
        if _thread is None:
            _thread = threading.Thread(target=_poll, name="asyncio-lookup-summary", daemon=True)
            _thread.start()


def _poll() -> None:
    global _thread
    while True:
        time.sleep(POLL_S)
        with _lock:
            if not _pending:
                _thread = None
                return
            entries = list(_pending)
        for entry in entries:
            try:
                done = _summarise(*entry)
            except Exception:  # a summary must never disturb the job; a stopped session...
                logger.debug("no summary for %r", entry[0], exc_info=True)
                done = True
            if done:
                with _lock:
                    if entry in _pending:
                        _pending.remove(entry)


def _summarise(title: str, session: Any, observation: Any) -> bool:
    """Log the summary if the observation's action finished; True when it needs no more
    watching (logged, or its session stopped)."""
    if session_stopped(session):
        return True
    trailers = trailers_of(observation, deadline=0.0)  # no wait: polled again later
    if trailers is None:
        return False
    metrics = fold(trailers).titled(title)
    text = metrics.summary()
    if metrics.warnings:
        logger.warning("%s", text)
    elif text:
        logger.info("%s", text)
    return True


def pending() -> int:
    """How many observations are watched (for tests)."""
    with _lock:
        return len(_pending)
