"""The OpenTelemetry names, units and attributes of the library's metrics (no ``opentelemetry``
import: the driver and the docs test read them without the extra).

Names follow the OpenTelemetry semantic conventions: a namespace (``asyncio_lookup.``), counters
named by what they count in the plural with the unit in curly braces (``{lookup}``), durations
as histograms named ``*.duration`` in seconds (``s``, as ``http.client.request.duration``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class OtelMetric:
    """One exported metric: its OpenTelemetry name, unit and description."""

    name: str
    unit: str
    description: str


#: The instrumentation scope of every exported metric.
SCOPE = "asyncio_lookup"
#: When this process first imported this module: the start of its series. An executor imports it
#: when it unpickles a task (spark/otel_switch.py imports it), before the task's work, so
#: cumulative points start before the first event they count.
PROCESS_START_NS = time.time_ns()
#: Attribute: the lookup table's name (``LookupTable.name``), or ``async_map``'s name.
TABLE = "asyncio_lookup.table"
#: Attribute: ``lookup_join`` or ``async_map``.
TABLE_KIND = "asyncio_lookup.operation"

#: Counters, by the name ``metrics()`` gives them.
COUNTERS: dict[str, OtelMetric] = {
    "numLookups": OtelMetric("asyncio_lookup.lookups", "{lookup}", "Lookups asked of the table"),
    "numExternalCalls": OtelMetric(
        "asyncio_lookup.calls", "{call}", "Calls made to the connector (a batch is one call)"
    ),
    "numExternalKeys": OtelMetric(
        "asyncio_lookup.call.keys", "{key}", "Keys sent in the calls to the connector"
    ),
    "hitCount": OtelMetric("asyncio_lookup.cache.hits", "{lookup}", "Lookups the cache answered"),
    "missCount": OtelMetric(
        "asyncio_lookup.cache.misses", "{lookup}", "Lookups the cache did not answer"
    ),
    "numCoalescedLookups": OtelMetric(
        "asyncio_lookup.coalesced_lookups",
        "{lookup}",
        "Lookups that shared the result of a call already in flight for their key",
    ),
    "numCompleted": OtelMetric(
        "asyncio_lookup.records", "{record}", "Records whose final outcome is a result"
    ),
    "numRetries": OtelMetric("asyncio_lookup.retries", "{retry}", "Retry attempts started"),
    "numFailureRetries": OtelMetric(
        "asyncio_lookup.failure_retries", "{retry}", "Lookups retried after a transient error"
    ),
    "numLookupMissRetries": OtelMetric(
        "asyncio_lookup.miss_retries", "{retry}", "Lookups retried after an empty result"
    ),
    "numThrottledCalls": OtelMetric(
        "asyncio_lookup.throttled_calls", "{call}", "Calls answered 429 / 503 or Retry-After"
    ),
    "numTimeouts": OtelMetric(
        "asyncio_lookup.timeouts", "{record}", "Records whose deadline expired"
    ),
    "numErrors": OtelMetric("asyncio_lookup.errors", "{record}", "Records that failed"),
    "numFailedRows": OtelMetric(
        "asyncio_lookup.failed_rows", "{row}", "Rows output as failures (on_error='keep')"
    ),
}

#: Histograms, by the key of the latency sketch they come from.
HISTOGRAMS: dict[str, OtelMetric] = {
    "record": OtelMetric(
        "asyncio_lookup.record.duration",
        "s",
        "A record's latency, from admission to its final result, retries included",
    ),
    "call": OtelMetric(
        "asyncio_lookup.call.duration", "s", "The latency of one call to the connector"
    ),
}
