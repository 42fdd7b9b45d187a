"""Durations and scalar settings: one parser for each kind of value, used by every layer.

Each parser takes the option's name and the user's value and returns the parsed value or raises
:class:`ConfigurationError` (or the subclass given as ``error``) naming the option, the value and
what is allowed. Imports only the standard library and :mod:`asyncio_lookup.errors`.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import sys
from collections.abc import Iterable
from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from asyncio_lookup.errors import ConfigurationError

_UNIT_SECONDS: dict[str, Decimal] = {}
for _names, _seconds in (
    (("ns", "nano", "nanos", "nanosecond", "nanoseconds"), Decimal("1e-9")),
    (("us", "µs", "micro", "micros", "microsecond", "microseconds"), Decimal("1e-6")),
    (("ms", "milli", "millis", "millisecond", "milliseconds"), Decimal("1e-3")),
    (("s", "sec", "secs", "second", "seconds"), Decimal(1)),
    (("m", "min", "mins", "minute", "minutes"), Decimal(60)),
    (("h", "hour", "hours"), Decimal(3600)),
    (("d", "day", "days"), Decimal(86400)),
):
    for _name in _names:
        _UNIT_SECONDS[_name] = _seconds

_DURATION = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*([a-zµ]*)\s*$", re.IGNORECASE)
#: Java's Duration.parse: [-+]P[nD][T[nH][nM][n[.f]S]], any case
_ISO_DURATION = re.compile(
    r"(?P<sign>[-+]?)P(?:(?P<d>[-+]?[0-9]+)D)?"
    r"(?P<time>T(?:(?P<h>[-+]?[0-9]+)H)?(?:(?P<m>[-+]?[0-9]+)M)?"
    r"(?:(?P<s>[-+]?[0-9]+)(?:[.,](?P<f>[0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")  # ASCII digits: \d takes any script's

DURATION_ALLOWED = (
    "a non-negative duration such as '10s', '10 s', '100ms', '3 min', '1h' (no unit = ms) or "
    "ISO-8601 'PT10S'"
)
POSITIVE_DURATION_ALLOWED = "a duration > 0 such as '10s', '10 s', '100ms', '3 min', '1h'"
BOOL_ALLOWED = "'true' or 'false'"

LONG_MAX_MS = 2**63 - 1
"""Flink's longest duration (``Long.MAX_VALUE`` ms), which Flink's own tests use for "never"."""
NEVER = 100 * 365 * 86400.0
"""100 years, in seconds: a duration this long or longer means "never" where an option allows it
(a timeout, a cache expiry, a reload interval); other durations must be shorter (the runtime's
timers and sleeps cannot hold much longer ones: ``threading`` waits end at about 292 years)."""


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning raised in this package at the user's code: the
    first caller outside it (``lookup_join``, ``LookupSQL.sql`` and the layers under them
    differ in depth)."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def to_seconds(
    option: str,
    value: Any,
    allowed: str = DURATION_ALLOWED,
    *,
    text: bool = True,
    error: type[ConfigurationError] = ConfigurationError,
) -> float:
    """``value`` in seconds: a ``timedelta``, a number of seconds or (when ``text``) Flink's
    duration syntax, where a number with no unit is milliseconds, or ISO-8601's. Any sign (but
    a negative ISO-8601 one, as in Flink); not NaN or a bool."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool):
        raise error(option, value, allowed)
    if isinstance(value, (int, float)):
        if math.isnan(value):
            raise error(option, value, allowed)
        return float(value)
    if text and isinstance(value, str):
        return float(_text_seconds(option, value, allowed, error))
    raise error(option, value, allowed)


def _text_seconds(
    option: str, value: str, allowed: str, error: type[ConfigurationError]
) -> Decimal:
    """A duration's text in seconds, exactly: Flink's ``10 s`` / ``500`` (ms), or, as Flink 2's
    ``TimeUtils.parseDuration`` falls back to Java's ``Duration.parse``, ISO-8601 (``PT1.5S``,
    ``P2DT3H``; a negative one refused, as there)."""
    match = _DURATION.match(value)
    if match:
        number, unit = match.groups()
        unit_seconds = _UNIT_SECONDS.get(unit.lower()) if unit else _UNIT_SECONDS["ms"]
        if unit_seconds is None:
            raise error(option, value, allowed, reason=f"unknown time unit {unit!r}")
        return Decimal(number) * unit_seconds
    iso = _ISO_DURATION.fullmatch(value.strip())
    if iso is None or iso["time"] == "T" or not any(iso[g] for g in ("d", "h", "m", "s")):
        raise error(option, value, allowed)
    days, hours, minutes, whole, fraction = (iso[g] for g in ("d", "h", "m", "s", "f"))
    seconds = Decimal(0)
    for part, scale in ((days, 86400), (hours, 3600), (minutes, 60), (whole, 1)):
        seconds += Decimal(part or 0) * scale
    if fraction:
        nanos = Decimal(fraction.ljust(9, "0")) / 10**9
        seconds += -nanos if whole and whole.startswith("-") else nanos
    if iso["sign"] == "-":
        seconds = -seconds
    if seconds < 0:
        raise error(option, value, allowed, reason="a negative ISO-8601 duration")
    return seconds


def _exact_seconds(
    option: str, value: Any, allowed: str, error: type[ConfigurationError]
) -> Decimal:
    """``value`` (already read by :func:`to_seconds`) in seconds without rounding: a float
    cannot tell Long.MAX_VALUE ms from one more."""
    if isinstance(value, str):
        return _text_seconds(option, value, allowed, error)
    if isinstance(value, timedelta):
        return Decimal(value.days) * 86400 + value.seconds + Decimal(value.microseconds) / 10**6
    return Decimal(value)


def refuse_unitless(
    option: str,
    value: Any,
    allowed: str = DURATION_ALLOWED,
    error: type[ConfigurationError] = ConfigurationError,
) -> None:
    """Refuse a bare number other than 0 for a duration option written as text (``lookup.*``,
    a hint's): ``'500'`` is 500 ms there, so ``500`` is ambiguous; text with a unit or a
    ``timedelta`` says which."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0:
        raise error(
            option,
            value,
            allowed + ", or a timedelta",
            reason="a number has no unit: write it as text with one (e.g. "
            f"'{value}s' or '{value}ms')",
        )


REDIS_URL_ALLOWED = (
    "redis://[user:password@]host[:port][/db], rediss:// (TLS) or unix:///path[?db=N], "
    "db an integer >= 0"
)


#: Redis URL query options redis-py would let win over the library's own settings.
_LIBRARY_REDIS_OPTIONS = frozenset(
    ("max_connections", "socket_timeout", "socket_connect_timeout", "client_name")
)


def redis_url_problem(url: str) -> str | None:
    """What is wrong with a Redis URL, or None. redis-py itself ignores a database number it
    cannot read (``/1x``: database 0), and fails on a bad port or query option only when a
    task connects."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises for a port out of range or not a number)
    except ValueError as error:
        return str(error)
    scheme = url.partition("://")[0] if "://" in url else parts.scheme
    if scheme not in ("redis", "rediss", "unix"):  # redis-py takes them in lower case only
        return f"scheme {scheme!r}"
    databases = parse_qs(parts.query).get("db", [])
    if parts.scheme == "unix":
        if not parts.path:
            return "no socket path"
    else:  # as redis-py reads it: the path without its slashes, percent-decoded
        path = unquote(parts.path).replace("/", "")
        if path:
            databases.append(path)
    for db in databases:
        if not db.isascii() or not db.isdigit():
            return f"database {db!r} is not an integer >= 0"
    overridden = sorted(set(parse_qs(parts.query)) & _LIBRARY_REDIS_OPTIONS)
    if overridden:  # redis-py lets the URL's win: 16 calls at once on a pool of 2
        return (
            f"query option(s) {', '.join(overridden)}: they would override the library's pool "
            "size, timeouts or client name (RedisConnector takes them as its own arguments)"
        )
    # the query's options as redis-py reads them when a task connects (no connection here)
    import redis.asyncio

    try:
        redis.asyncio.ConnectionPool.from_url(url).make_connection()  # type: ignore[no-untyped-call]
    except Exception as error:
        return f"redis-py refuses it: {type(error).__name__}: {error}"
    return None


def parse_duration(
    option: str,
    value: Any,
    *,
    positive: bool = False,
    allowed: str | None = None,
    text: bool = True,
    never: bool = False,
    error: type[ConfigurationError] = ConfigurationError,
) -> float:
    """A finite duration in seconds (see :func:`to_seconds`), ``>= 0``, or ``> 0`` when
    ``positive``; at most ``Long.MAX_VALUE`` ms. With ``never``, :data:`NEVER` or longer is
    returned as :data:`NEVER` ("never"); without, it is an error."""
    allowed = allowed or (POSITIVE_DURATION_ALLOWED if positive else DURATION_ALLOWED)
    seconds = to_seconds(option, value, allowed, text=text, error=error)
    if seconds < 0:
        raise error(option, value, allowed, reason="must not be negative")
    if math.isinf(seconds):
        raise error(option, value, allowed, reason="must be finite")
    if positive and seconds == 0:
        raise error(option, value, allowed, reason="must be greater than 0")
    if _exact_seconds(option, value, allowed, error) * 1000 > LONG_MAX_MS:
        raise error(
            option,
            value,
            allowed,
            reason=f"longer than Flink's longest duration, {LONG_MAX_MS} ms (Long.MAX_VALUE)",
        )
    if seconds >= NEVER:
        if never:
            return NEVER
        raise error(
            option,
            value,
            allowed,
            reason="must be shorter than 100 years (only a timeout, a cache expiry or a reload "
            "interval may be longer, meaning never)",
        )
    return seconds


def format_duration(seconds: float | timedelta) -> str:
    """``'3 s'``, ``'1500 ms'``, ``'0.25 ms'``: whole seconds in s, the rest in ms. The text
    parses back (:func:`parse_duration`) to the same number."""
    value = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)
    if value == int(value):
        return f"{int(value)} s"
    millis = value * 1000
    return f"{int(millis)} ms" if millis == int(millis) else f"{millis!r} ms"


def parse_int(
    option: str,
    value: Any,
    *,
    minimum: int,
    maximum: int | None = None,
    allowed: str | None = None,
    text: bool = True,
    error: type[ConfigurationError] = ConfigurationError,
) -> int:
    """An ``int`` (or, when ``text``, its decimal text) in ``[minimum, maximum]``; never a
    bool or a float."""
    if allowed is None:
        allowed = (
            f"an integer >= {minimum}"
            if maximum is None
            else f"an integer from {minimum} to {maximum:,}".replace(",", "_")
        )
    if isinstance(value, bool):
        raise error(option, value, allowed)
    if isinstance(value, int):
        number = value
    elif text and isinstance(value, str) and _INTEGER.fullmatch(value):
        number = int(value)
    else:
        raise error(option, value, allowed)
    if number < minimum:
        raise error(option, value, allowed, reason=f"must be at least {minimum}")
    if maximum is not None and number > maximum:
        raise error(option, value, allowed, reason=f"must be at most {maximum}")
    return number


def parse_number(
    option: str,
    value: Any,
    *,
    above: float | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    allowed: str,
    error: type[ConfigurationError] = ConfigurationError,
) -> float:
    """A finite ``int`` or ``float`` (not a bool, not text) ``> above``, ``>= minimum`` and
    ``<= maximum`` where given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise error(option, value, allowed)
    if (
        (above is not None and not value > above)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        raise error(option, value, allowed)
    return float(value)


def parse_bool(
    option: str, value: Any, *, error: type[ConfigurationError] = ConfigurationError
) -> bool:
    """A ``bool`` or the text ``'true'`` / ``'false'`` (any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise error(option, value, BOOL_ALLOWED)


def parse_choice(
    option: str,
    value: Any,
    choices: Iterable[str],
    *,
    error: type[ConfigurationError] = ConfigurationError,
) -> str:
    """One of ``choices``, matched case-insensitively; returns the choice as spelled there."""
    choices = tuple(choices)
    if isinstance(value, str):
        wanted = value.strip().lower()
        for choice in choices:
            if choice.lower() == wanted:
                return choice
    raise error(option, value, " or ".join(repr(c) for c in choices) + " (case-insensitive)")


def did_you_mean(name: str, known: Iterable[str], *, prefixes: Iterable[str] = ()) -> str | None:
    """The known name ``name`` most likely misspells, or None: the one it is the last part
    of (``'max-rows'``), else the closest spelling, also with each of ``prefixes`` in front
    (``' lookup.cache'``, ``'lookup-cache'`` and, with prefix ``'lookup.'``, ``'cache'``)."""
    known = tuple(known)
    text = str(name).strip().lower()
    endings = [k for k in known if k.lower().endswith("." + text)]
    if len(endings) == 1:
        return endings[0]
    for candidate in (text, *(prefix + text for prefix in prefixes)):
        match = difflib.get_close_matches(candidate, known, n=1, cutoff=0.75)
        if match:
            return match[0]
    return None


def unknown_option(
    name: Any,
    value: Any,
    known: Iterable[str],
    *,
    kind: str = "option",
    prefixes: Iterable[str] = (),
    error: type[ConfigurationError] = ConfigurationError,
) -> ConfigurationError:
    """The error for an option nobody knows: lists the known ones, suggests the nearest."""
    known = tuple(known)
    reason = f"unknown {kind}"
    suggestion = did_you_mean(str(name), known, prefixes=prefixes)
    if suggestion is not None:
        reason += f"; did you mean {suggestion!r}?"
    return error(str(name), value, "one of " + ", ".join(repr(k) for k in known), reason=reason)
