"""The suite's xdist scheduler (tests/conftest.py): the longest units start first on workers of
their own, no worker runs Spark units of both session kinds, and every unit is run, whatever
the number of workers. Simulated workers: the scheduler's decisions only, no test runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import pytest_xdist_make_scheduler, spark_session_kind, xdist_unit

# The Connect unit is the shortest Spark unit here: its worker frees up first.
COLLECTION = [
    "tests/connectors/conformance/test_a.py::test_one",
    "tests/connectors/conformance/test_a.py::test_two",
    "tests/lookup/test_cache.py::test_a",
    "tests/lookup/test_cache.py::test_b",
    "tests/faults/test_outages.py::test_refused[redis]",
    "tests/faults/test_outages.py::test_refused[http]",
    "tests/spark/test_lookup_join.py::test_join[classic]",
    "tests/spark/test_lookup_join.py::test_join[connect]",
    "tests/spark/test_lookup_join.py::test_left[classic]",
    "tests/spark/test_metrics.py::test_sum[classic-2]",
    "tests/spark/test_metrics.py::test_sum[classic-3]",
    "tests/spark/test_shared_cache.py::test_distinct[connect]",
    "tests/test_readme.py::test_snippet",
]


class Worker:
    """What the scheduler sees of an xdist worker: the tests it is sent, run in order."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def run(workers: int) -> list[list[str]]:
    """The tests each worker ran, in order, when every worker runs one test per step."""
    config = SimpleNamespace(
        getvalue=lambda name: [f"{workers}*popen"],
        option=SimpleNamespace(loadscopereorder=True),
    )
    scheduler = pytest_xdist_make_scheduler(config, None)  # type: ignore[arg-type]
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, COLLECTION)
    scheduler.schedule()
    done: dict[Any, int] = {node: 0 for node in nodes}
    for _ in range(10 * len(COLLECTION)):
        if scheduler.tests_finished:
            break
        for node in nodes:
            if done[node] < len(node.sent):
                scheduler.mark_test_complete(node, node.sent[done[node]])
                done[node] += 1
    else:
        pytest.fail("the scheduler never finished: a unit no worker may take")
    return [[COLLECTION[i] for i in node.sent] for node in nodes]


def test_units() -> None:
    assert xdist_unit("tests/spark/test_metrics.py::test_sum[connect-2]") == "spark-connect"
    assert xdist_unit("tests/spark/test_metrics.py::test_sum[classic-2]") == "spark-classic"
    assert xdist_unit("tests/faults/test_outages.py::test_refused[redis]") == "spark-faults"
    assert xdist_unit("tests/spark/test_shared_cache.py::test_distinct[connect]") == (
        "tests/spark/test_shared_cache.py::test_distinct[connect]"
    )
    assert xdist_unit("tests/connectors/conformance/test_a.py::test_one") == "http-conformance"


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_every_test_runs_once_and_no_worker_mixes_session_kinds(workers: int) -> None:
    ran = run(workers)
    assert sorted(t for tests in ran for t in tests) == sorted(COLLECTION)
    if workers == 1:
        return
    for tests in ran:
        kinds = {spark_session_kind(t) for t in tests} - {None}
        assert len(kinds) <= 1, tests


def test_the_longest_units_start_first_on_workers_of_their_own() -> None:
    first = [xdist_unit(tests[0]) for tests in run(3)]
    assert first == ["spark-classic", "spark-connect", "spark-faults"]
