"""The harness core: results, repeated measurements, and the run context scenarios share.

A scenario is a function ``run(ctx) -> ScenarioResult``. It measures every variant and its
baselines in the same run through :meth:`Context.measure` (median of ``ctx.repeats`` runs) and
states its targets as :class:`Target` ratios. It raises :class:`Skipped` when something it needs
is missing; the harness records the reason and carries on with the next scenario.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.paths import REPO_ROOT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.progress import Progress, TaskID

    from benchmarks.servers import LatencyServer

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: A run's own wall time, when it returns one (it measures around its action, untimed).
WALL_S = "wall_s"


class Skipped(Exception):
    """Raised by a scenario that cannot run here; the message says why."""


@dataclasses.dataclass
class Measurement:
    """Wall times of repeated runs of one variant processing ``rows`` rows each."""

    label: str
    rows: int
    runs: list[float]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs)

    @property
    def rate(self) -> float:
        """Rows per second at the median run time."""
        return self.rows / self.median_s if self.median_s > 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "rows": self.rows,
            "runs_s": [round(r, 6) for r in self.runs],
            "median_s": round(self.median_s, 6),
            "rows_per_s": round(self.rate, 3),
            **({"extra": self.extra} if self.extra else {}),
        }


@dataclasses.dataclass
class Target:
    """An acceptance target: ``value`` (a ratio) must be ``>= minimum`` or ``<= maximum``."""

    name: str
    value: float
    minimum: float | None = None
    maximum: float | None = None
    detail: str = ""

    @property
    def met(self) -> bool:
        if self.minimum is not None and not self.value >= self.minimum:
            return False
        return not (self.maximum is not None and not self.value <= self.maximum)

    @property
    def bound(self) -> str:
        parts = []
        if self.minimum is not None:
            parts.append(f">= {self.minimum:g}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum:g}")
        return " and ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": round(self.value, 4),
            "minimum": self.minimum,
            "maximum": self.maximum,
            "met": self.met,
            "detail": self.detail,
        }


@dataclasses.dataclass
class ScenarioResult:
    """What one scenario reports: a table (list of rows over ``columns``), targets, plots."""

    name: str
    title: str
    status: str = "ok"  # "ok", "skipped: <reason>" or "failed: <error>"
    columns: list[str] = dataclasses.field(default_factory=list)
    table: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    targets: list[Target] = dataclasses.field(default_factory=list)
    plots: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    measurements: list[Measurement] = dataclasses.field(default_factory=list)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    started_at: str = ""
    duration_s: float = 0.0
    quick: bool = False

    def add_row(self, **row: Any) -> None:
        for column in row:
            if column not in self.columns:
                self.columns.append(column)
        self.table.append(row)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 2),
            "quick": self.quick,
            "columns": self.columns,
            "table": self.table,
            "targets": [t.to_json() for t in self.targets],
            "plots": self.plots,
            "notes": self.notes,
            "measurements": [m.to_json() for m in self.measurements],
            "data": self.data,
        }


@dataclasses.dataclass
class Variant:
    """One thing to time: ``run()`` processes ``rows`` rows (``setup()`` before each run and
    ``warmup()`` once, both untimed)."""

    label: str
    rows: int
    run: Callable[[], dict[str, Any] | None]
    warmup: Callable[[], object] | None = None
    setup: Callable[[], object] | None = None


class Context:
    """What a scenario gets: settings, shared services (started lazily) and the progress bar."""

    def __init__(self, *, quick: bool, repeats: int, out_dir: Path, progress: Progress) -> None:
        self.quick = quick
        self.repeats = repeats
        self.out_dir = out_dir
        self.progress = progress
        self._task: TaskID | None = None
        self._spark: SparkSession | None = None
        self._server: LatencyServer | None = None

    # -- progress ------------------------------------------------------------------------------

    def begin(self, description: str, steps: int) -> None:
        """Start a progress bar of ``steps`` steps for the current scenario."""
        if self._task is not None:
            self.progress.update(self._task, visible=False)
        self._task = self.progress.add_task(description, total=max(steps, 1))

    def advance(self, what: str = "") -> None:
        if self._task is None:
            return
        task = self.progress.tasks[self._task]
        if task.total is not None and task.completed + 1 > task.total:
            self.progress.update(self._task, total=task.completed + 1)
        self.progress.update(self._task, advance=1)
        if what:
            self.progress.update(self._task, description=what)

    def finish(self) -> None:
        if self._task is not None:
            task = self.progress.tasks[self._task]
            self.progress.update(self._task, completed=task.total)
            self._task = None

    def log(self, message: str) -> None:
        self.progress.console.print(message, highlight=False)

    # -- measuring -----------------------------------------------------------------------------

    def measure(
        self,
        label: str,
        rows: int,
        run: Callable[[], dict[str, Any] | None],
        *,
        repeats: int | None = None,
        warmup: Callable[[], object] | None = None,
    ) -> Measurement:
        """Time ``run()`` ``repeats`` times (after an optional untimed ``warmup()``).

        ``run`` may return a dict of extra figures (e.g. call counts); the last one is kept.
        Its :data:`WALL_S`, when given, is the run's time instead of the whole call's.
        """
        (measurement,) = self.measure_all([Variant(label, rows, run, warmup)], repeats=repeats)
        return measurement

    def measure_all(
        self, variants: list[Variant], *, repeats: int | None = None
    ) -> list[Measurement]:
        """Time every variant ``repeats`` times, interleaved (v1, v2, ..., v1, v2, ...), so a
        change in the machine's load hits all variants alike. Warm-ups run first, untimed."""
        for variant in variants:
            if variant.warmup is not None:
                variant.warmup()
        runs: list[list[float]] = [[] for _ in variants]
        extras: list[dict[str, Any]] = [{} for _ in variants]
        for i in range(repeats or self.repeats):
            for index, variant in enumerate(variants):
                if variant.setup is not None:
                    variant.setup()
                start = time.perf_counter()
                returned = dict(variant.run() or {})
                elapsed = time.perf_counter() - start
                # a variant that measures around its action times only the action (its
                # measuring, before and after, is no part of the job): its own wall_s
                runs[index].append(float(returned.pop(WALL_S, elapsed)))
                extras[index] = returned
                self.advance(f"{variant.label} [{i + 1}]")
        measurements = []
        for index, variant in enumerate(variants):
            m = Measurement(variant.label, variant.rows, runs[index], extras[index])
            self.log(
                f"  {m.label:<52} {m.rows:>9,} rows  median {m.median_s:8.3f} s  "
                f"{m.rate:>12,.0f} rows/s"
            )
            measurements.append(m)
        return measurements

    # -- shared services -----------------------------------------------------------------------

    def spark(self) -> SparkSession:
        if self._spark is None:
            from benchmarks.spark_env import spark_session

            self.log("  starting local Spark (local[2]) ...")
            self._spark = spark_session()
        return self._spark

    def stop_spark(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None

    def server(self) -> LatencyServer:
        if self._server is None:
            from benchmarks.servers import LatencyServer

            self._server = LatencyServer(n_customers=100_000).start()
            self.log(f"  latency server on {self._server.base_url}")
        return self._server

    def close(self) -> None:
        self.stop_spark()
        if self._server is not None:
            self._server.stop()
            self._server = None


def machine_info() -> dict[str, Any]:
    """Where and when the run happened (the 2 cores may be shared: load average included)."""
    import platform
    import subprocess
    import sys

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=10,
        ).stdout.strip()
    except OSError:
        commit = ""
    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        spark_version = None
    from asyncio_lookup._native import compiled_modules

    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "pyspark": spark_version,
        "platform": platform.platform(),
        "git_commit": commit,
        "executable": sys.executable,
        # the HTTP client's modules as this process (and Spark's workers, same venv and
        # environment) import them: mypyc's build or the .py sources (asyncio_lookup/_native.py)
        "http_client_compiled": all(compiled_modules().values()),
    }
