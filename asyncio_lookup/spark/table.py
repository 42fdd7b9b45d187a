"""``LookupTable``: a dim table a DataFrame can be joined with by lookups."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from pyspark import SparkContext
from pyspark.sql.types import StructType

from asyncio_lookup.errors import ConfigurationError, LookupFailedError
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.retry import FailureRetry
from asyncio_lookup.spark.metrics import table_metrics
from asyncio_lookup.spark.schema import SCHEMA_ALLOWED, parse_schema
from asyncio_lookup.validation import parse_bool


class LookupTable:
    """A named dim table: its schema, the connector that looks rows up, its ``lookup.*`` options.

    ``schema`` is a :class:`StructType` or a DDL string (``'id INT, name STRING'``); a DDL
    string is parsed when a SparkContext is active (at the latest by ``lookup_join``).
    ``connector`` is a built-in connector, a FLIP-221 provider, or any object with
    ``lookup_function()`` / ``async_lookup_function()`` / ``scan()``. Everything is validated
    on the driver. The table's cache is per Python worker process and shared by every task that
    joins through this object (a copy made by pickling keeps its ``table_id``, hence its cache).

    For a hash lookup join (``SHUFFLE_HASH``) a connector may route keys itself by offering
    ``partitioner(key_columns) -> KeyPartitioner | None`` (see
    :mod:`asyncio_lookup.lookup.partitioning`): ``partition(key, n)`` for the dim side, and
    optionally ``spark_column(columns, n)`` computing the same for the probe side.

    With ``verify_target`` (the default) the first join through the table checks, on the
    driver, what the connector can check cheaply against the declared schema — for
    :class:`PostgresConnector` the relation, its columns and whether their types convert to the
    declared ones without loss (one catalog query) — so a mismatch fails before any task.
    Pass ``verify_target=False`` when the driver cannot reach the service.
    """

    def __init__(
        self,
        name: str,
        schema: str | StructType,
        connector: Any,
        options: Mapping[str, Any] | LookupOptions | None = None,
        *,
        verify_target: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("name", name, "a non-empty table name")
        if not isinstance(schema, (str, StructType)):
            raise ConfigurationError("schema", schema, SCHEMA_ALLOWED)
        self.name = name.strip()
        self._schema_source = schema
        self._schema: StructType | None = None
        if isinstance(schema, StructType) or SparkContext._active_spark_context is not None:
            self._schema = parse_schema(schema)
        if isinstance(options, LookupOptions):
            self.options = options
        elif options is None or isinstance(options, Mapping):
            self.options = LookupOptions.from_dict(dict(options or {}))
        else:
            raise ConfigurationError(
                "options", options, "a mapping of lookup.* options or a LookupOptions"
            )
        if connector is None:
            raise ConfigurationError(
                "connector",
                connector,
                "a connector or provider with lookup_function(), async_lookup_function() or scan()",
            )
        self.connector = connector
        self.verify_target = parse_bool("verify_target", verify_target)
        self._target_checked = False
        self.table_id = uuid.uuid4().hex
        # Checks the connector's capabilities against the options, opening nothing. A join
        # checks again with its real key columns; a FULL cache only needs some here.
        LookupChain.validate(
            connector,
            self.options,
            prefer_async=True,
            key_columns=tuple(getattr(connector, "key_columns", ()) or ("key",)),
        )

    @property
    def schema(self) -> StructType:
        """The dim schema (parsed on first use when given as DDL)."""
        if self._schema is None:
            self._schema = parse_schema(self._schema_source)
        return self._schema

    def check_target(self) -> None:
        """Check the connector's target against the schema (once; see ``verify_target``)."""
        check = getattr(self.connector, "check_schema", None)
        if not self.verify_target or self._target_checked or check is None:
            return
        fields = [(field.name, field.dataType) for field in self.schema.fields]
        # Transient failures are retried as a lookup's are (lookup.max-retries and backoff).
        retry = FailureRetry(self.options.max_retries, self.options.max_retry_backoff)
        try:
            retry.call(("schema check",), lambda: check(fields), sleep=time.sleep)
        except LookupFailedError as error:
            raise ConfigurationError(
                "verify_target",
                True,
                "a service the driver can reach, or LookupTable(..., verify_target=False)",
                reason=f"lookup table {self.name!r}: {error.__cause__}",
            ) from error
        except ConfigurationError as error:
            reason = f"lookup table {self.name!r}" + (f": {error.reason}" if error.reason else "")
            raise type(error)(error.option, error.value, error.allowed, reason) from None
        self._target_checked = True

    def metrics(self) -> dict[str, float]:
        """Cache and operator metrics summed over every finished task that used this table.

        Counters are summed, gauges (``numCachedRecords``, latencies...) are the maximum over
        tasks. Like any Spark accumulator updated in a transformation, a task that Spark runs
        again (a retry, a recomputed stage) counts again.
        """
        return table_metrics(self.table_id)

    def __repr__(self) -> str:
        schema = self._schema.simpleString() if self._schema is not None else self._schema_source
        return (
            f"LookupTable(name={self.name!r}, schema={schema!r}, connector={self.connector!r}, "
            f"cache={self.options.cache.name})"
        )
