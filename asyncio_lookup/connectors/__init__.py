"""Connectors: HTTP (aiohttp), Redis (redis.asyncio), PostgreSQL (asyncpg), in memory."""

from asyncio_lookup.connectors.http_connector import HttpConnector, HttpStatusError
from asyncio_lookup.connectors.memory import InMemoryConnector
from asyncio_lookup.connectors.postgres_connector import PostgresConnector
from asyncio_lookup.connectors.redis_connector import RedisConnector
from asyncio_lookup.connectors.registry import (
    connector_names,
    create_connector,
    register_connector,
)

__all__ = [
    "HttpConnector",
    "HttpStatusError",
    "InMemoryConnector",
    "PostgresConnector",
    "RedisConnector",
    "connector_names",
    "create_connector",
    "register_connector",
]
