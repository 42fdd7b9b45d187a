"""HeldObservation without Spark: what is final when, for a Connect-shaped observation (the
client updates its result dict in place) and a classic-shaped one (first action, for good)."""

from __future__ import annotations

import gc
import json
from typing import Any

from asyncio_lookup.spark.observations import OBSERVED_TASKS, HeldObservation, HeldResult


class ConnectShaped:
    """As ``pyspark.sql.connect.observation.Observation`` after ``_on``: ``_result`` is ``{}``
    until an action's metrics are written into it."""

    def __init__(self) -> None:
        self._name = "o"
        self._result: dict[str, Any] = {}


class _Try:  # scala.util.Try, through py4j
    def __init__(self, failed: bool) -> None:
        self.failed = failed

    def isFailure(self) -> bool:  # py4j's names, from here on
        return self.failed

    def get(self) -> _Try:
        return self


class _Future:
    def __init__(self, completed: bool, failed: bool) -> None:
        self.completed = completed
        self.failed = failed

    def isCompleted(self) -> bool:
        return self.completed

    def value(self) -> _Try:
        return _Try(self.failed)


class _JavaObservation:
    def __init__(self, completed: bool, failed: bool) -> None:
        self._future = _Future(completed, failed)

    def future(self) -> _Future:
        return self._future


class ClassicShaped:
    """As a classic ``Observation``: ``get`` is its first action's metrics, or raises the
    failure it was completed with."""

    def __init__(self, trailers: list[str], *, completed: bool = True, failed: bool = False):
        self._name = "c"
        self._jo = _JavaObservation(completed, failed)
        self.trailers = trailers

    @property
    def get(self) -> dict[str, Any]:
        if self._jo.future().failed:
            raise RuntimeError("the observation's action failed")
        return {OBSERVED_TASKS: self.trailers}


def test_a_connect_observation_is_final_once_gone_with_its_last_action_s_trailers() -> None:
    observation = ConnectShaped()
    held = HeldObservation(observation)
    assert held.read(0.0) == (None, False)  # no action yet
    observation._result.update({OBSERVED_TASKS: ["a"]})
    assert held.read(0.0) == (["a"], False)  # another action may replace them
    observation._result.update({OBSERVED_TASKS: ["b", "c"]})
    del observation
    gc.collect()
    assert held.read(0.0) == (["b", "c"], True)


def test_a_connect_observation_gone_before_any_action_is_final_without_trailers() -> None:
    observation = ConnectShaped()
    held = HeldObservation(observation)
    del observation
    gc.collect()
    assert held.read(0.0) == (None, True)


def test_a_replaced_result_dict_holds_the_observation_for_good() -> None:
    observation = ConnectShaped()
    held = HeldObservation(observation)
    observation._result = {OBSERVED_TASKS: ["new"]}  # a client that rebinds, not updates
    assert held.read(0.0) == (["new"], False)
    observation._result = {OBSERVED_TASKS: ["newer"]}
    del observation
    gc.collect()
    assert held.read(0.0) == (["newer"], False)  # still readable, never final


def test_a_classic_observation_is_final_at_its_first_action() -> None:
    assert HeldObservation(ClassicShaped(["t"])).read(0.0) == (["t"], True)


def test_a_classic_observation_before_its_first_action_is_not_final() -> None:
    assert HeldObservation(ClassicShaped(["t"], completed=False)).read(0.0) == (None, False)


def test_a_classic_observation_completed_with_a_failure_is_final_without_trailers() -> None:
    assert HeldObservation(ClassicShaped(["t"], failed=True)).read(0.0) == (None, True)


class _Info:  # Connect's ExecutionInfo: (name, observed values) per observation
    def __init__(self, trailers: list[str]) -> None:
        self.flows = [("other", {OBSERVED_TASKS: ["x"]}), ("n", {OBSERVED_TASKS: trailers})]


class ConnectResult:
    """As a Connect DataFrame: each action rebinds ``_execution_info``."""

    __module__ = "pyspark.sql.connect.dataframe"

    def __init__(self) -> None:
        self._execution_info: _Info | None = None


def test_a_sql_result_s_latest_action_is_final_once_the_dataframe_is_gone() -> None:
    df = ConnectResult()
    held = HeldResult(df, "n")
    assert held.read() == (None, False) and not held.gone()
    df._execution_info = _Info(["a"])
    assert held.read() == (["a"], False)
    df._execution_info = _Info(["b"])  # a second action replaces the first's
    del df
    gc.collect()
    assert held.gone() and held.read() == (["b"], True)


class _Found:  # scala.Option[Row] of observedMetrics().get(name), through py4j
    def __init__(self, trailers: list[str]) -> None:
        self.trailers = trailers

    def isEmpty(self) -> bool:
        return False

    def get(self) -> _Found:
        return self

    def json(self) -> str:
        return json.dumps({OBSERVED_TASKS: self.trailers})


class _QueryExecution:
    def __init__(self, trailers: list[str]) -> None:
        self.trailers = trailers

    def queryExecution(self) -> _QueryExecution:
        return self

    def observedMetrics(self) -> dict[str, _Found]:
        return {"n": _Found(self.trailers)}


class ClassicResult:
    """As a classic DataFrame: what its Dataset observed, readable through ``_jdf``."""

    __module__ = "pyspark.sql.classic.dataframe"

    def __init__(self, trailers: list[str]) -> None:
        self._jdf = _QueryExecution(trailers)


class SlottedConnectResult:
    """A Connect-shaped DataFrame without a ``__dict__``."""

    __module__ = "pyspark.sql.connect.dataframe"
    __slots__ = ("_execution_info",)

    def __init__(self) -> None:
        self._execution_info = _Info(["s"])


def test_a_classic_sql_result_is_held_for_good() -> None:
    """Its Dataset can run jobs without the Python object (toLocalIterator, its rdd)."""
    held = HeldResult(ClassicResult(["c"]), "n")
    gc.collect()
    assert held.read() == (["c"], False) and not held.gone()


def test_a_result_without_a_dict_is_held_for_good_and_still_read() -> None:
    held = HeldResult(SlottedConnectResult(), "n")
    gc.collect()
    assert held.read() == (["s"], False) and not held.gone()
