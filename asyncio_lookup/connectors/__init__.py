"""Connectors: HTTP (own HTTP/1.1 client), Redis (redis.asyncio), PostgreSQL (asyncpg), in memory.

Each implements its lookups (point and batch) and its scan once, asynchronously; its sync
lookup (``'async'='false'``) runs that code through
:class:`~asyncio_lookup.lookup.blocking.BlockingLookupFunction`.
"""

from typing import TYPE_CHECKING

from asyncio_lookup._lazy import lazy_attributes
from asyncio_lookup.connectors.http_connector import HttpConnector
from asyncio_lookup.connectors.keys import KeyTemplate
from asyncio_lookup.connectors.memory import InMemoryConnector
from asyncio_lookup.connectors.registry import (
    connector_names,
    create_connector,
    register_connector,
)
from asyncio_lookup.connectors.scan import Scan
from asyncio_lookup.errors import DataFormatError, HttpStatusError

if TYPE_CHECKING:
    from asyncio_lookup.connectors.postgres_connector import PostgresConnector
    from asyncio_lookup.connectors.redis_connector import RedisConnector

# Imported on first use: redis (with its OpenTelemetry hooks) and asyncpg would add about 80 ms
# of CPU to every Spark Python worker that unpickles another connector.
_LAZY = {
    "PostgresConnector": "asyncio_lookup.connectors.postgres_connector",
    "RedisConnector": "asyncio_lookup.connectors.redis_connector",
}
__getattr__ = lazy_attributes(__name__, globals(), _LAZY)

__all__ = [
    "DataFormatError",
    "HttpConnector",
    "HttpStatusError",
    "InMemoryConnector",
    "KeyTemplate",
    "PostgresConnector",
    "RedisConnector",
    "Scan",
    "connector_names",
    "create_connector",
    "register_connector",
]
