"""Connectors by name, for options such as ``'connector'='postgres'``."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.validation import unknown_option

ConnectorFactory = Callable[..., Any]

_lock = threading.Lock()
_factories: dict[str, ConnectorFactory] = {}


def _builtins() -> dict[str, ConnectorFactory]:
    from asyncio_lookup.connectors.http_connector import HttpConnector
    from asyncio_lookup.connectors.memory import InMemoryConnector
    from asyncio_lookup.connectors.postgres_connector import PostgresConnector
    from asyncio_lookup.connectors.redis_connector import RedisConnector

    return {
        "http": HttpConnector,
        "redis": RedisConnector,
        "postgres": PostgresConnector,
        "memory": InMemoryConnector,
    }


def _registry() -> dict[str, ConnectorFactory]:
    with _lock:
        if not _factories:
            _factories.update(_builtins())
        return _factories


def _normalise(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError("connector", name, "a non-empty connector name")
    return name.strip().lower()


def register_connector(name: str, factory: ConnectorFactory, *, replace: bool = False) -> None:
    """Make ``create_connector(name, **options)`` call ``factory(**options)``.

    Names are case-insensitive. Registering a taken name is an error unless ``replace=True``.
    """
    if not callable(factory):
        raise ConfigurationError("factory", factory, "a callable returning a LookupTableSource")
    key = _normalise(name)
    registry = _registry()
    with _lock:
        if key in registry and not replace and registry[key] is not factory:
            raise ConfigurationError(
                "connector",
                name,
                "a name not yet registered, or replace=True",
                f"{key!r} is already registered to {registry[key]!r}",
            )
        registry[key] = factory


def connector_names() -> list[str]:
    """The registered connector names, sorted."""
    return sorted(_registry())


def connector_factory(name: str) -> ConnectorFactory:
    """The factory registered under ``name`` (for tools that map options onto its parameters)."""
    key = _normalise(name)
    factory = _registry().get(key)
    if factory is None:
        raise ConfigurationError("connector", name, " | ".join(connector_names()))
    return factory


def create_connector(name: str, **options: Any) -> Any:
    """The connector registered under ``name``, built with ``options``."""
    key = _normalise(name)
    factory = _registry().get(key)
    if factory is None:
        raise ConfigurationError("connector", name, " | ".join(connector_names()))
    _check_arguments(key, factory, options)
    return factory(**options)


def _check_arguments(name: str, factory: ConnectorFactory, options: dict[str, Any]) -> None:
    """Refuse an argument ``factory`` does not take, suggesting the nearest it does (a bare
    ``TypeError`` before), and a required one left out."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no signature to read: the factory decides
        return
    parameters = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return
    known = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for option, value in options.items():
        if option not in known:
            raise unknown_option(option, value, known, kind=f"argument of connector {name!r}")
    try:
        signature.bind(**options)
    except TypeError as error:
        raise ConfigurationError(
            "connector arguments",
            sorted(options),
            f"the arguments of {name!r}: {signature}",
            str(error),
        ) from None
