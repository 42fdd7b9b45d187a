"""Connectors: HTTP (own HTTP/1.1 client), Redis (redis.asyncio), PostgreSQL (asyncpg), in memory.

Each implements its lookups (point and batch) and its scan once, asynchronously; its sync
lookup (``'async'='false'``) runs that code through
:class:`~asyncio_lookup.lookup.blocking.BlockingLookupFunction`.
"""

from asyncio_lookup.connectors.http_connector import HttpConnector
from asyncio_lookup.connectors.keys import KeyTemplate
from asyncio_lookup.connectors.memory import InMemoryConnector
from asyncio_lookup.connectors.postgres_connector import PostgresConnector
from asyncio_lookup.connectors.redis_connector import RedisConnector
from asyncio_lookup.connectors.registry import (
    connector_names,
    create_connector,
    register_connector,
)
from asyncio_lookup.connectors.scan import Scan
from asyncio_lookup.errors import DataFormatError, HttpStatusError

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
