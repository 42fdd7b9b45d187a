"""Reading a batch :class:`~pyspark.sql.Observation` of the metrics trailers, on a classic and a
Spark Connect session alike, and whether the session that made it still runs."""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Callable
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


class HeldObservation:
    """A batch :class:`Observation` the driver reads (:meth:`read`), and whether what it read
    is final, so the trailers can be folded and the observation let go.

    Classic: an observation keeps its first action's metrics, final once there. Connect: each
    action updates the observation's result dict in place, so the observation is held weakly
    beside that dict: once no DataFrame holds it, no action can change it, and its last
    action's trailers are final. (Were a PySpark version to replace the dict instead, the
    observation is held for good from the first read that sees it.)"""

    __slots__ = ("_observation", "_ref", "_result", "name")

    def __init__(self, observation: Any) -> None:
        self.name: str = observation._name
        self._observation: Any = observation
        self._ref: weakref.ref[Any] | None = None
        self._result: dict[str, Any] | None = None
        result = getattr(observation, "_result", None)
        if getattr(observation, "_jo", None) is None and type(result) is dict:
            self._observation = None
            self._ref = weakref.ref(observation)
            self._result = result

    def read(self, deadline: float) -> tuple[list[str] | None, bool]:
        """The trailers of the finished action (None before one; :func:`trailers_of`), and
        whether they are final."""
        observation = self._observation
        if observation is not None:
            try:
                trailers = trailers_of(observation, deadline)
            except Exception:
                if _failed(observation):  # classic: no metrics, ever; nothing to hold
                    return None, True
                raise
            return trailers, trailers is not None and getattr(observation, "_jo", None) is not None
        assert self._ref is not None and self._result is not None
        observation = self._ref()
        if observation is None:  # gone: what its last action left is final
            if OBSERVED_TASKS not in self._result:
                return None, True  # never acted on
            return list(self._result[OBSERVED_TASKS] or []), True
        if getattr(observation, "_result", None) is not self._result:
            self._observation = observation  # the client replaced the dict: hold it for good
        return trailers_of(observation, deadline), False

    def poll(self) -> tuple[list[str] | None, bool]:
        """:meth:`read` without waiting."""
        return self.read(deadline=0.0)


def _failed(observation: Any) -> bool:
    """Whether a classic observation was completed with a failure (``get`` raises it)."""
    jo = getattr(observation, "_jo", None)
    if jo is None:
        return False
    future = jo.future()
    return bool(future.isCompleted() and future.value().get().isFailure())


class HeldResult:
    """A DataFrame ``LookupSQL.sql()`` returned, whose actions report its joins' metrics
    under ``name`` (:meth:`read`; its latest action counts).

    Connect: every action goes through the DataFrame object and leaves what it observed in
    its ``_execution_info`` attribute, so the DataFrame is held weakly beside its attributes
    (``vars(df)``): once no one holds it, no action can follow, its latest action's trailers
    are final and the DataFrame is not kept alive. Classic: the Dataset behind it can still run
    jobs once the Python object is gone (``toLocalIterator()``, its ``rdd``), so it is held
    for good (until its session stops)."""

    __slots__ = ("_attrs", "_connect", "_df", "_ref", "name")

    def __init__(self, df: Any, name: str) -> None:
        self.name = name
        self._connect = type(df).__module__.startswith("pyspark.sql.connect")
        self._df: Any = df
        self._ref: weakref.ref[Any] | None = None
        self._attrs: dict[str, Any] = {}
        if self._connect and hasattr(df, "__dict__"):
            try:
                self._ref = weakref.ref(df)
            except TypeError:  # no weak references: held for good
                return
            self._attrs = vars(df)
            self._df = None

    def read(self, deadline: float = 0.0) -> tuple[list[str] | None, bool]:
        """The trailers of the DataFrame's latest action (None before one), and whether they
        are final (``deadline``: for the same call as :meth:`HeldObservation.read`; this read
        does not wait)."""
        df = self._df
        if df is not None:
            return _observed_in(
                lambda attr: getattr(df, attr, None), self._connect, self.name
            ), False
        gone = self.gone()  # first: once gone, nothing can change them
        return _observed_in(self._attrs.get, self._connect, self.name), gone

    def gone(self) -> bool:
        """Whether no one holds the DataFrame any more (its trailers are final)."""
        return self._ref is not None and self._ref() is None

    def poll(self) -> tuple[list[str] | None, bool]:
        """The final trailers once the DataFrame is gone, else ``(None, False)`` without
        reading (on classic a read builds the physical plan)."""
        return self.read() if self.gone() else (None, False)


def _observed_in(attr: Callable[[str], Any], connect: bool, name: str) -> list[str] | None:
    """The trailers the latest action of a DataFrame (``attr``: its attributes by name)
    observed under ``name``, None before one."""
    if connect:
        info = attr("_execution_info")
        for flow, pairs in info.flows if info is not None else ():
            if flow == name:
                return list(pairs.get(OBSERVED_TASKS) or [])
        return None
    found = attr("_jdf").queryExecution().observedMetrics().get(name)
    if found.isEmpty():
        return None
    return list(json.loads(found.get().json()).get(OBSERVED_TASKS) or [])
