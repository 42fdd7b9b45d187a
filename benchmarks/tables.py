"""The library's API as the scenarios use it, imported lazily.

A piece that has not landed (or does not import) raises :class:`Skipped` with the reason, so its
scenario is reported as skipped while the others run.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.data import CUSTOMER_SCHEMA
from benchmarks.harness import Skipped


def require(module: str, *names: str) -> tuple[Any, ...]:
    """Import ``names`` from ``module`` or raise :class:`Skipped` saying what is missing."""
    try:
        loaded = importlib.import_module(module)
    except ImportError as error:
        raise Skipped(f"{module} is not available ({error})") from error
    missing = [name for name in names if not hasattr(loaded, name)]
    if missing:
        raise Skipped(f"{module} does not provide {', '.join(missing)} yet")
    return tuple(getattr(loaded, name) for name in names)


def lookup_table(
    name: str,
    connector: Any,
    options: Mapping[str, str] | None = None,
    *,
    schema: str = CUSTOMER_SCHEMA,
) -> Any:
    """``LookupTable(name, schema, connector, options)``, by default over the customers schema."""
    (table_cls,) = require("asyncio_lookup.spark", "LookupTable")
    return table_cls(name=name, schema=schema, connector=connector, options=dict(options or {}))


def lookup_join(
    frame: Any,
    table: Any,
    *,
    how: str = "inner",
    hint: str | None = None,
    left_key: str = "customer_id",
) -> Any:
    """``lookup_join(frame, table, on=[(left_key, "id")], how, hints=[hint])``."""
    (join,) = require("asyncio_lookup.spark", "lookup_join")
    hints: Sequence[str] | None = [hint] if hint else None
    return join(frame, table, on=[(left_key, "id")], how=how, hints=hints)


def lookup_hint(table: str, **options: object) -> str:
    """``LOOKUP('table'='T', 'k'='v', ...)`` with ``snake_case`` keys written as ``kebab-case``."""
    pairs = [("table", table), *((k.replace("_", "-"), v) for k, v in options.items())]
    return "LOOKUP(" + ", ".join(f"'{k}'='{v}'" for k, v in pairs) + ")"


def http_connector(
    base_url: str, *, batch: bool = False, scan: bool = False, connections: int = 100
) -> Any:
    """The library's ``HttpConnector`` in front of :class:`benchmarks.servers.LatencyServer`.

    ``connections`` is the connection-pool size per worker (100, like the baselines' limit).
    """
    (connector_cls,) = require("asyncio_lookup.connectors", "HttpConnector")
    kwargs: dict[str, Any] = {"max_connections": connections}
    if batch:
        kwargs.update(batch_url=f"{base_url}/customers:batchGet", batch_mode="post_json")
    if scan:
        kwargs.update(
            scan_url=f"{base_url}/customers?offset=0&limit=5000",
            scan_rows_field="rows",
            next_field="next",
        )
    return connector_cls(f"{base_url}/customers/{{id}}", ["id"], **kwargs)


def redis_connector(url: str, key_template: str, connections: int = 100) -> Any:
    """``RedisConnector`` over JSON strings; ``connections`` per worker (>= the capacity)."""
    (connector_cls,) = require("asyncio_lookup.connectors", "RedisConnector")
    return connector_cls(url, key_template, ["id"], key_types={"id": int},
                         max_connections=connections)


def postgres_connector(dsn: str, table: str, connections: int = 16) -> Any:
    """``PostgresConnector`` on ``table``; ``connections`` in each worker's asyncpg pool."""
    (connector_cls,) = require("asyncio_lookup.connectors", "PostgresConnector")
    return connector_cls(dsn, table, ["id"], pool_size=connections)
