"""``LookupTable``: a dim table a DataFrame can be joined with by lookups."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from asyncio_lookup.connectors._secrets import redact
from asyncio_lookup.errors import ConfigurationError, LookupFailedError, error_text
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.chain_build import shared_namespace_of
from asyncio_lookup.lookup.l2.settings import namespace_pattern
from asyncio_lookup.lookup.l2.stores import open_admin
from asyncio_lookup.lookup.option_names import SHARED_URL
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.retry import FailureRetry
from asyncio_lookup.masking import mask_text, mask_url
from asyncio_lookup.spark.job_metrics import JobMetrics
from asyncio_lookup.spark.metrics import (
    observation_name,
    progress_metrics,
    query_metrics,
    table_metrics,
)
from asyncio_lookup.spark.schema import SCHEMA_ALLOWED, parse_schema
from asyncio_lookup.validation import parse_bool


class LookupTable:
    """A named dim table: its schema, the connector that looks rows up, its ``lookup.*`` options.

    ``schema`` is a :class:`StructType` or a DDL string (``'id INT, name STRING'``); a DDL
    string is parsed when a Spark session (classic or Connect) is active (at the latest by
    ``lookup_join``).
    ``connector`` is a built-in connector, a FLIP-221 provider, or any object with
    ``lookup_function()`` / ``async_lookup_function()`` / ``scan()``. Everything is validated
    on the driver. The table's cache is per Python worker process and shared by every task that
    joins through this object (a copy made by pickling keeps its ``table_id``, hence its cache).
    Its name, schema, connector and options are fixed: a new setting is a new ``LookupTable``.

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
        self._name = name.strip()
        self._schema_source = schema
        self._schema: StructType | None = None
        if isinstance(schema, StructType) or _session_active():
            self._schema = parse_schema(schema)
        if isinstance(options, LookupOptions):
            self._options = options
        elif options is None or isinstance(options, Mapping):
            self._options = LookupOptions.from_dict(dict(options or {}))
        else:
            raise ConfigurationError(
                "options", options, "a mapping of lookup.* options or a LookupOptions"
            )
        if connector is None or isinstance(connector, type):
            raise ConfigurationError(
                "connector",
                connector,
                "a connector or provider with lookup_function(), async_lookup_function() or scan()",
                reason=f"the class {connector.__name__}, not one of its instances: call it"
                if isinstance(connector, type)
                else None,
            )
        self._connector = connector
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

    # Name, connector, options and schema are fixed for the table's life: the workers keep its
    # chains (open clients, caches) by its id, so a change would not reach them. A new setting
    # is a new LookupTable.

    @property
    def name(self) -> str:
        """The table's name (in hints, metrics and errors)."""
        return self._name

    @property
    def connector(self) -> Any:
        """The connector (or provider) the table looks rows up with."""
        return self._connector

    @property
    def options(self) -> LookupOptions:
        """The table's ``lookup.*`` options."""
        return self._options

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
        except Exception as error:  # the driver's own (asyncpg's: no such database or role)
            secrets = getattr(self.connector, "secrets", None)
            text = f"{type(error).__name__}: {error_text(error)}"
            raise ConfigurationError(
                "verify_target",
                True,
                "a target the driver can reach and read (its DSN, database, role and options), "
                "or LookupTable(..., verify_target=False)",
                reason=f"lookup table {self.name!r}: "
                + (redact(text, secrets()) if callable(secrets) else text),
            ) from None
        self._target_checked = True

    @property
    def shared_namespace(self) -> str:
        """The shared cache's namespace: ``lookup.shared-cache.namespace``, else a digest of
        the table's name, its connector's ``cache_identity`` (everything its answers depend on)
        and its declared schema (so a changed schema never reads entries written under the old
        one); ConfigurationError for a connector without ``cache_identity`` and no namespace."""
        given = self.options.shared_namespace
        if given is not None:
            return given
        return shared_namespace_of(self.name, self.connector, self.schema.simpleString())

    def invalidate_shared_cache(self) -> int:
        """Delete every entry of this table's namespace from the shared cache (on the driver,
        ``SCAN`` + ``UNLINK``); returns how many keys were deleted. Processes keep what their
        own (L1) caches hold until it expires; a job running meanwhile may write entries again.
        """
        url = self.options.shared_url
        if url is None:
            raise ConfigurationError(
                SHARED_URL, None, "a store URL", reason=f"lookup table {self.name!r} has none"
            )
        pattern = namespace_pattern(self.shared_namespace)
        try:
            admin = open_admin(url, self.options.shared_timeout or 5.0)
            try:
                return admin.clear(pattern)
            finally:
                admin.close()
        except ConfigurationError:
            raise
        except Exception as error:  # the store's own (redis-py's) errors name no table
            raise ConfigurationError(
                SHARED_URL,
                mask_url(url),
                "a shared-cache store the driver can reach",
                reason=f"lookup table {self.name!r}: clearing its entries failed: "
                f"{type(error).__name__}: {mask_text(error_text(error))}",
            ) from error

    def metrics(self) -> JobMetrics:
        """Cache, operator and latency metrics of the tasks that joined through this table,
        over the finished actions on the DataFrames ``lookup_join`` returned (batch queries):
        a dict of name -> int | float (docs/reference.md "Metrics") with ``latency`` (merged
        sketches), ``tasks`` and ``partial``.

        Counters are summed, gauges merged as documented, latency quantiles computed from the
        merged sketches of every task. Each successful task counts once: an attempt that failed
        and was run again does not count. A task whose output was not read to its end
        (``limit``, ``show``, ``take``) reports the batches Spark read from it, and ``partial``
        says so; before any action it is empty, and ``partial`` says why. Each returned
        DataFrame reports one action: on a classic session its first, on Spark Connect its
        latest. For a streaming query see :meth:`progress_metrics` and :meth:`query_metrics`.
        """
        return table_metrics(self.table_id).titled(self.name)

    @property
    def observation_name(self) -> str:
        """The name a streaming query's progress reports this table's metrics under
        (``query.lastProgress['observedMetrics'][name]``); a later streaming join of the table
        in the same driver reports under ``<name>#<n>`` (:meth:`progress_metrics` and
        :meth:`query_metrics` read them all)."""
        return observation_name(self.table_id)

    def progress_metrics(self, progress: Any) -> JobMetrics:
        """This table's metrics in one micro-batch of a streaming query: ``progress`` is
        ``query.lastProgress`` or a ``StreamingQueryListener`` event's ``progress``."""
        return progress_metrics(progress, self.table_id).titled(self.name)

    def query_metrics(self, query: Any) -> JobMetrics:
        """This table's metrics over a whole streaming query (classic or Connect), from the
        micro-batches of ``query.recentProgress``, each folded once and remembered across
        calls. Spark keeps the last ``spark.sql.streaming.numRecentProgressUpdates`` (100)
        reports: call this at least that often, or ``partial`` says reports were missed."""
        return query_metrics(query, self.table_id).titled(self.name)

    def __repr__(self) -> str:
        schema = self._schema.simpleString() if self._schema is not None else self._schema_source
        return (
            f"LookupTable(name={self.name!r}, schema={schema!r}, connector={self.connector!r}, "
            f"cache={self.options.cache.name})"
        )


def _session_active() -> bool:
    try:
        return SparkSession.getActiveSession() is not None
    except Exception:  # a Connect client whose session is gone
        return False
