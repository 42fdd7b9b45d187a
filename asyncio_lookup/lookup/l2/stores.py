"""The shared stores there are, by URL scheme, opened for the tier and the driver."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from asyncio_lookup.lookup.l2.store import SharedStore, SharedStoreAdmin


def _redis(url: str, timeout: float) -> SharedStore:
    from asyncio_lookup.lookup.l2.redis_store import RedisStore

    return RedisStore(url, timeout)


def _redis_admin(url: str, timeout: float) -> SharedStoreAdmin:
    from asyncio_lookup.lookup.l2.redis_store import RedisAdmin

    return RedisAdmin(url, timeout)


_FACTORIES: dict[str, tuple[Callable[[str, float], SharedStore], Callable[..., SharedStoreAdmin]]]
_FACTORIES = {scheme: (_redis, _redis_admin) for scheme in ("redis", "rediss", "unix")}


def store_schemes() -> tuple[str, ...]:
    """The URL schemes a shared store exists for."""
    return tuple(_FACTORIES)


def scheme_of(url: str) -> str:
    try:
        return urlsplit(url).scheme.lower()
    except ValueError:
        return ""


def open_store(url: str, timeout: float) -> SharedStore:
    """The store ``url`` names (connecting lazily, on first use); ``timeout`` bounds a
    connect and each command."""
    return _FACTORIES[scheme_of(url)][0](url, timeout)


def open_admin(url: str, timeout: float) -> SharedStoreAdmin:
    """The driver's handle on the store ``url`` names."""
    return _FACTORIES[scheme_of(url)][1](url, timeout)
