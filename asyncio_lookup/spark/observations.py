"""Reading a batch :class:`~pyspark.sql.Observation` of the metrics trailers, on a classic and a
Spark Connect session alike, and whether the session that made it still runs."""

from __future__ import annotations

import time
from typing import Any

#: The observed metric holding the list of trailers (one JSON object per report of a task).
OBSERVED_TASKS = "tasks"


def session_stopped(session: Any) -> bool:
    """Whether ``session`` (classic or Connect) has stopped: its observations are gone."""
    if type(session).__module__.startswith("pyspark.sql.connect"):
        return bool(getattr(session, "is_stopped", False))
    context = getattr(session, "_sc", None)
    return context is None or getattr(context, "_jsc", None) is None


def stop_scope(session: Any) -> Any:
    """What stops together with ``session``: its ``SparkContext`` on a classic session (the
    new session object ``foreachBatch`` wraps around each micro-batch shares it), the session
    itself on Connect."""
    if type(session).__module__.startswith("pyspark.sql.connect"):
        return session
    return getattr(session, "_sc", session)


#: How long :func:`table_metrics` waits on a classic session for an observation that has no
#: metrics yet: the session completes it from its listener bus, just after the action returns.
LISTENER_GRACE_S = 0.25


def trailers_of(observation: Any, deadline: float) -> list[str] | None:
    """The trailers an :class:`Observation` got from a finished action, None before one."""
    jo = getattr(observation, "_jo", None)
    if jo is not None:  # classic: the first action's metrics; get blocks until there is one
        future = jo.future()
        while not future.isCompleted():
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)
        return list(observation.get.get(OBSERVED_TASKS) or [])
    result = getattr(observation, "_result", None)  # Connect: the latest action's metrics
    if not result or OBSERVED_TASKS not in result:
        return None
    return list(result[OBSERVED_TASKS] or [])


def keeps_first_action(observation: Any) -> bool:
    """Whether ``observation`` keeps its first action's trailers for good (classic), so they
    can be folded and the observation let go; on Connect each action replaces them."""
    return getattr(observation, "_jo", None) is not None
