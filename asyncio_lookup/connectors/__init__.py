"""Connectors: HTTP (aiohttp), Redis (redis.asyncio), PostgreSQL (asyncpg), in memory."""

from asyncio_lookup.connectors.memory import InMemoryConnector

__all__ = ["InMemoryConnector"]
