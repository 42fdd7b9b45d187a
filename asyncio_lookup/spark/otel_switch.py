"""The switch of the OpenTelemetry export: the Spark conf ``asyncio_lookup.otel.enabled``.

Read on the driver when ``lookup_join`` / ``async_map`` builds its task (as every
``asyncio_lookup.*`` and ``table.exec.async-lookup.*`` key is), so it works the same on a classic
and a Spark Connect session and can change between jobs (``spark.conf.set``); the task carries
the answer to the executors. Where the executors send the metrics is theirs to say, with the
standard ``OTEL_*`` variables (docs/reference.md "Exporting to OpenTelemetry").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup import otel_names  # noqa: F401 (its PROCESS_START_NS: at unpickling)
from asyncio_lookup.spark.conf import library_conf
from asyncio_lookup.validation import parse_bool

if TYPE_CHECKING:
    from asyncio_lookup.runtime.sketch import LatencySketch

CONF_OTEL_ENABLED = "asyncio_lookup.otel.enabled"
OTEL_EXTRA = "pip install 'asyncio-lookup[otel]'"


def otel_from_conf(conf: Any) -> bool:
    """Whether ``conf`` (``spark.conf``) turns the export on (``asyncio_lookup.otel.enabled``,
    or ``spark.asyncio_lookup.otel.enabled`` as ``spark-submit --conf`` passes it); with it on,
    the ``[otel]`` extra must import here (ConfigurationError naming it otherwise)."""
    option, value = library_conf(conf, CONF_OTEL_ENABLED)
    if value is None or (isinstance(value, str) and not value.strip()):
        return False
    enabled = parse_bool(option, value)
    if enabled:
        require_otel()
    return enabled


def require_otel() -> None:
    """Raise ConfigurationError, naming the extra, unless the exporter imports."""
    try:
        import asyncio_lookup.lookup.otel  # noqa: F401
    except ImportError as error:
        raise ConfigurationError(
            CONF_OTEL_ENABLED,
            "true",
            f"'false', or 'true' with the OpenTelemetry extra installed ({OTEL_EXTRA}) on the "
            "driver and the executors",
            reason=f"{error}",
        ) from None


def export_otel(
    table: str,
    kind: str,
    counters: Mapping[str, float],
    latency: Mapping[str, LatencySketch | None],
) -> None:
    """A task's counters and latency sketches to the process's OpenTelemetry exporter (called
    where a task ends, only with the switch on: opentelemetry is imported here, not before)."""
    from asyncio_lookup.lookup.otel import export_task

    export_task(table, kind, counters, {k: s for k, s in latency.items() if s is not None})
