"""A task's warnings and ``causes`` section (:mod:`asyncio_lookup.lookup.advice`) for the Spark
tasks, and the driver's summary of a table's sections."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from asyncio_lookup.lookup.advice import (
    SECTION,
    Advice,
    Facts,
    driver_summary,
    log_advice,
    merge_sections,
    missing_columns_advice,
    section,
    task_advice,
)
from asyncio_lookup.runtime import causes as causes_
from asyncio_lookup.spark.metrics import table_trailers
from asyncio_lookup.spark.missing import MissingColumns, describe

if TYPE_CHECKING:
    from asyncio_lookup.lookup.chain import LookupChain
    from asyncio_lookup.lookup.join import LookupJoinRunner
    from asyncio_lookup.lookup.rate import TaskRate
    from asyncio_lookup.runtime.metrics import OperatorMetrics

log = logging.getLogger(__name__)


def join_section(
    chain: LookupChain,
    runner: LookupJoinRunner[Any],
    rate: TaskRate | None,
    metrics: Mapping[str, float],
    chain_causes: causes_.Causes,
    columns: MissingColumns,
    seconds: float,
) -> dict[str, Any]:
    """A lookup-join task's warnings, logged once each at WARN, and its section (``rate``:
    the task's share of ``lookup.rate-limit``)."""
    operator = runner.operator
    found = causes_.merge(
        chain_causes.to_json(), operator.metrics.causes.to_json() if operator is not None else {}
    )
    hint, options = runner.hint, chain.options
    facts = Facts(
        table=chain.name,
        target=chain.target,
        capacity=hint.capacity if runner.is_async else None,
        timeout=hint.timeout if runner.is_async else None,
        max_retries=options.max_retries,
        max_rows=options.partial_max_rows,
        rate=rate.rate if rate is not None else None,
    )
    advice = task_advice(metrics, found, facts, seconds)
    log_advice(advice)  # the missing columns are logged by MissingColumns.report
    missing = columns.missing
    if missing:
        text = describe(chain.name, chain.target, missing, columns.sample)
        advice.append(missing_columns_advice(facts, len(missing), text))
    return section(found, advice)


def map_section(
    name: str, operator: OperatorMetrics, capacity: int, timeout: float | None, seconds: float
) -> dict[str, Any]:
    """An ``async_map`` task's warnings, logged once each at WARN, and its section."""
    found = operator.causes.to_json()
    facts = Facts(table=name, capacity=capacity, timeout=timeout, lookup=False)
    advice = task_advice(operator.snapshot(), found, facts, seconds)
    log_advice(advice)
    return section(found, advice)


def table_section(metrics_id: str) -> dict[str, Any]:
    """The merged ``causes`` section of the tasks of every finished action of a table (or an
    ``async_map``'s ``metrics_id``)."""
    merged: dict[str, Any] = {}
    for text in table_trailers(metrics_id):
        if text:
            value = json.loads(text).get(SECTION)
            if isinstance(value, dict):
                merged = merge_sections(merged, value)
    return merged


def summary(table: Any) -> str:
    """The driver's summary of a :class:`LookupTable` (or a ``metrics_id``): its warnings with
    the job's totals and its failures, retries and timeouts by cause; '' when none."""
    metrics_id = table if isinstance(table, str) else table.table_id
    name = table if isinstance(table, str) else getattr(table, "name", metrics_id)
    found = table_section(metrics_id)
    return driver_summary({name: found}) if found else ""


def warnings_of(table: Any) -> list[Advice]:
    """The job's warnings of ``table`` (as in :func:`summary`), job-wide counts."""
    metrics_id = table if isinstance(table, str) else table.table_id
    found = table_section(metrics_id)
    return [Advice.from_json(w) for _, w in sorted(found.get("warnings", {}).items())]


__all__ = ["join_section", "map_section", "summary", "table_section", "warnings_of"]
