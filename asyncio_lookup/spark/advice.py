"""A task's warnings and ``causes`` section (:mod:`asyncio_lookup.lookup.advice`) for the Spark
tasks, and the driver's summary of a table's sections."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from asyncio_lookup.lookup.advice import (
    SECTION,
    Advice,
    Facts,
    log_advice,
    missing_columns_advice,
    no_rows_advice,
    task_advice,
)
from asyncio_lookup.spark.metrics import table_metrics
from asyncio_lookup.spark.missing import MissingColumns, describe

if TYPE_CHECKING:
    from asyncio_lookup.lookup.chain import LookupChain
    from asyncio_lookup.lookup.join import LookupJoinRunner
    from asyncio_lookup.lookup.rate import TaskRate

log = logging.getLogger(__name__)


def join_advice(
    chain: LookupChain,
    runner: LookupJoinRunner[Any],
    rate: TaskRate | None,
    metrics: Mapping[str, float],
    found: Mapping[str, Mapping[str, Any]],
    columns: MissingColumns,
    seconds: float,
    *,
    shuffled: bool = False,
    first_key: Any = None,
) -> list[Advice]:
    """A lookup-join task's warnings, logged once each at WARN (``metrics`` and ``found``:
    the task's counters and causes; ``rate``: its share of ``lookup.rate-limit``;
    ``shuffled``: the join is hash-partitioned by key; ``first_key``: the task's first key)."""
    hint, options = runner.hint, chain.options
    facts = Facts(
        table=chain.name,
        target=chain.target,
        capacity=hint.capacity if runner.is_async else None,
        timeout=hint.timeout if runner.is_async else None,
        max_retries=options.max_retries,
        max_rows=options.partial_max_rows,
        rate=rate.rate if rate is not None else None,
        adaptive=rate.adaptive if rate is not None else None,
        shuffled=shuffled,
        filtered=runner.spec.dim_filter is not None or runner.spec.condition is not None,
    )
    advice = task_advice(metrics, found, facts, seconds)
    if not columns.returned:
        no_rows = no_rows_advice(facts, metrics, first_key)
        if no_rows is not None:
            advice.append(no_rows)
    log_advice(advice)  # the missing columns are logged by MissingColumns.report
    missing = columns.missing
    if missing:
        text = describe(chain.name, chain.target, missing, columns.sample)
        advice.append(missing_columns_advice(facts, len(missing), text))
    return advice


def map_advice(
    name: str,
    metrics: Mapping[str, float],
    found: Mapping[str, Mapping[str, Any]],
    capacity: int,
    timeout: float | None,
    seconds: float,
    rate: TaskRate | None = None,
) -> list[Advice]:
    """An ``async_map`` task's warnings, logged once each at WARN (``rate``: its share of
    ``rate_limit``)."""
    facts = Facts(
        table=name,
        capacity=capacity,
        timeout=timeout,
        rate=rate.rate if rate is not None else None,
        adaptive=rate.adaptive if rate is not None else None,
        lookup=False,
    )
    advice = task_advice(metrics, found, facts, seconds)
    log_advice(advice)
    return advice


def table_section(metrics_id: str) -> dict[str, Any]:
    """The merged ``causes`` section of the tasks of every finished action of a table (or an
    ``async_map``'s ``metrics_id``)."""
    return dict(table_metrics(metrics_id).sections.get(SECTION) or {})


def summary(table: Any) -> str:
    """The driver's summary of a :class:`LookupTable` (or a ``metrics_id``): its warnings with
    the job's totals and its failures, retries and timeouts by cause; '' when none."""
    metrics_id = table if isinstance(table, str) else table.table_id
    name = table if isinstance(table, str) else getattr(table, "name", metrics_id)
    return table_metrics(metrics_id).titled(name).summary()


def warnings_of(table: Any) -> list[Advice]:
    """The job's warnings of ``table`` (as in :func:`summary`), with the job's figures."""
    metrics_id = table if isinstance(table, str) else table.table_id
    return table_metrics(metrics_id).advice()


__all__ = ["join_advice", "map_advice", "summary", "table_section", "warnings_of"]
