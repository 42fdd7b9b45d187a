"""The ``lookup.shared-cache.*`` options: rows of :data:`asyncio_lookup.lookup.options.OPTIONS`
(the field each sets, what is allowed, its default as shown to users, its parser)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.l2.settings import (
    DEFAULT_LEASE,
    DEFAULT_MAX_VALUE_SIZE,
    DEFAULT_TIMEOUT,
    DEFAULT_TTL,
    SharedCacheSettings,
    mask_password,
)
from asyncio_lookup.lookup.l2.stores import scheme_of, store_schemes
from asyncio_lookup.lookup.option_names import (
    SHARED_CACHE_MISSING_KEY,
    SHARED_LEASE,
    SHARED_MAX_VALUE_SIZE,
    SHARED_NAMESPACE,
    SHARED_TIMEOUT,
    SHARED_TTL,
    SHARED_URL,
)
from asyncio_lookup.validation import (
    BOOL_ALLOWED,
    DURATION_ALLOWED,
    POSITIVE_DURATION_ALLOWED,
    REDIS_URL_ALLOWED,
    format_duration,
    parse_bool,
    parse_duration,
    parse_int,
    redis_url_problem,
)

T = TypeVar("T")

SHARED_URL_ALLOWED = "a store URL: " + ", ".join(f"{scheme}://..." for scheme in store_schemes())
NAMESPACE_ALLOWED = "a non-empty name of letters, digits and . _ - : (at most 128 characters)"
_NAMESPACE_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:")
#: The longest timeout allowed: the shared cache must never hold a lookup up for long.
MAX_TIMEOUT = 5.0


def parse_url(option: str, value: Any) -> str:
    if not isinstance(value, str) or scheme_of(value.strip()) not in store_schemes():
        shown = mask_password(value) if isinstance(value, str) else value
        raise ConfigurationError(option, shown, SHARED_URL_ALLOWED)
    url = value.strip()
    if scheme_of(url) in ("redis", "rediss", "unix"):
        problem = redis_url_problem(url)
        if problem is not None:
            raise ConfigurationError(option, mask_password(url), REDIS_URL_ALLOWED, problem)
    return url


def parse_namespace(option: str, value: Any) -> str:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > 128
        or not set(value) <= _NAMESPACE_CHARS
    ):
        raise ConfigurationError(option, value, NAMESPACE_ALLOWED)
    return value


def parse_timeout(option: str, value: Any) -> float:
    seconds = parse_duration(option, value, positive=True)
    if seconds > MAX_TIMEOUT:
        raise ConfigurationError(
            option,
            value,
            f"a duration > 0 and <= {format_duration(MAX_TIMEOUT)}",
            reason="a lookup must never wait long on the shared cache",
        )
    return seconds


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def shared_options(_option: Callable[..., T]) -> dict[str, T]:
    """The option rows, each built by ``_option(field, allowed, default, parse, text)``."""
    return {
        SHARED_URL: _option("shared_url", SHARED_URL_ALLOWED, "(none: no shared cache)", parse_url),
        SHARED_TTL: _option(
            "shared_ttl",
            POSITIVE_DURATION_ALLOWED,
            format_duration(DEFAULT_TTL),
            lambda o, v: parse_duration(o, v, positive=True),
            format_duration,
        ),
        SHARED_CACHE_MISSING_KEY: _option(
            "shared_cache_missing_key",
            BOOL_ALLOWED,
            "(as 'lookup.partial-cache.cache-missing-key', default true)",
            parse_bool,
            _bool_text,
        ),
        SHARED_NAMESPACE: _option(
            "shared_namespace",
            NAMESPACE_ALLOWED,
            "(a digest of the table's name, target and declared schema)",
            parse_namespace,
        ),
        SHARED_MAX_VALUE_SIZE: _option(
            "shared_max_value_size",
            "an integer >= 1 (bytes of one key's encoded rows; larger ones are not shared)",
            str(DEFAULT_MAX_VALUE_SIZE),
            lambda o, v: parse_int(o, v, minimum=1),
        ),
        SHARED_TIMEOUT: _option(
            "shared_timeout",
            f"a duration > 0 and <= {format_duration(MAX_TIMEOUT)}",
            format_duration(DEFAULT_TIMEOUT),
            parse_timeout,
            format_duration,
        ),
        SHARED_LEASE: _option(
            "shared_lease",
            DURATION_ALLOWED + " (0: no stampede control)",
            format_duration(DEFAULT_LEASE),
            lambda o, v: parse_duration(o, v),
            format_duration,
        ),
    }


__all__ = ["SHARED_URL_ALLOWED", "SharedCacheSettings", "shared_options"]
