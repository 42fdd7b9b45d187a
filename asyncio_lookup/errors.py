"""One exception hierarchy for the whole library, rooted at :class:`AsyncLookupError`."""

from __future__ import annotations

import copy
from typing import Any


class AsyncLookupError(Exception):
    """Base class of every error this library raises on purpose.

    ``context`` is set once the message names the lookup table, its target and the key
    (:func:`in_lookup_context`).
    """

    context: str | None = None


class ConfigurationError(AsyncLookupError, ValueError):
    """A bad option, hint, argument or schema, raised before any work starts.

    The message names the option, the bad value and what is allowed.
    """

    def __init__(self, option: str, value: Any, allowed: str, reason: str | None = None) -> None:
        self.option = option
        self.value = value
        self.allowed = allowed
        self.reason = reason
        message = f"invalid value {value!r} for {option!r}"
        if reason:
            message += f": {reason}"
        message += f"; allowed: {allowed}"
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.option, self.value, self.allowed, self.reason))


class HintError(ConfigurationError):
    """A LOOKUP / SHUFFLE_HASH hint that does not parse or does not validate."""


class ResultTypeError(AsyncLookupError, TypeError):
    """An async function returned ``None`` or something that is not a collection."""


class TransientError(AsyncLookupError):
    """A connector call failed in a way a retry may fix (connection lost, 429, 503).

    ``retry_after`` (seconds), when set, is the earliest time the server asked to be called again;
    ``status``, when set, the service's answer (429 and 503 slow an adaptive rate limit down).
    Connectors raise it with the underlying error as ``__cause__``.
    """

    def __init__(
        self, message: str, retry_after: float | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.retry_after, self.status))


class LookupFailedError(AsyncLookupError):
    """A connector lookup failed after its failure retries (``lookup.max-retries``) ran out.

    ``attempts`` is the number of calls made (the first one and its retries)."""

    def __init__(self, message: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.attempts))


class CacheLoadError(AsyncLookupError):
    """A full-cache load (scan) failed; lookups raise it rather than serve stale data."""


class DataFormatError(AsyncLookupError, ValueError):
    """A stored value is not what the connector was configured to read (bad JSON, wrong type)."""


class HttpStatusError(AsyncLookupError):
    """The service answered with a status that is neither success, miss nor transient."""

    #: Set on a batch request's error that one of its keys may have caused (a 400): the
    #: batcher sends the keys again in halves (lookup/batch.py).
    split_batch = False

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.status))


class PermanentConnectionError(AsyncLookupError):
    """A service that cannot be reached in a way no retry fixes: its TLS certificate or host
    name is rejected, the TLS handshake fails, or its host name is not known."""


def lookup_context(table: str, key: Any = None, target: str = "") -> str:
    """How a run-time error names where it happened: ``lookup table 'T' (target), key K``."""
    if not table:
        return "lookup" if key is None else f"lookup of key {key!r}"
    text = f"lookup table {table!r}"
    if target:
        text += f" ({target})"
    if key is not None:
        text += f", key {key!r}"
    return text


def error_text(error: BaseException) -> str:
    """``str(error)``, or a stand-in naming its type when its ``__str__`` raises: reporting an
    error must not fail in turn (the record it failed would never be settled)."""
    try:
        return str(error)
    except Exception as broken:
        return f"<str() of {type(error).__name__} raised {type(broken).__name__}>"


def in_lookup_context(error: BaseException, context: str) -> AsyncLookupError:
    """``error`` with ``context`` (:func:`lookup_context`) leading its message.

    One of this library's errors keeps its type (a copy: a batch's error is shared by its
    keys) and its cause; any other error becomes a :class:`LookupFailedError` naming its type,
    with it as the cause. An error that already has a context is returned as it is.
    """
    if isinstance(error, AsyncLookupError) and error.context is not None:
        return error
    named = _rewrapped(error, f"{context}: ")
    named.context = context
    return named


def with_attempts(error: BaseException, attempts: int) -> AsyncLookupError:
    """``error`` saying ``attempts`` calls were made: a copy of one of this library's errors,
    any other wrapped as :func:`in_lookup_context` wraps it (its context comes later)."""
    counted = _rewrapped(error, "")
    counted.attempts = attempts  # type: ignore[attr-defined]
    return counted


def _rewrapped(error: BaseException, prefix: str) -> AsyncLookupError:
    """A copy of one of this library's errors (its attributes and cause kept), ``prefix``
    leading its message; any other error as a :class:`LookupFailedError` naming its type,
    with it as the cause."""
    if isinstance(error, AsyncLookupError):
        named = copy.copy(error)
        named.__dict__.update(error.__dict__)  # a copy is rebuilt from its args alone
        named.args = (f"{prefix}{error_text(error)}",)
        named.__cause__ = error.__cause__
        named.__traceback__ = error.__traceback__
    else:
        named = LookupFailedError(f"{prefix}{type(error).__name__}: {error_text(error)}")
        named.__cause__ = error
    named.__suppress_context__ = True  # raised while handling ``error``: shown once, as cause
    return named
