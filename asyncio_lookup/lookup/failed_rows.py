"""Error output: rows whose lookup failed, kept and marked instead of failing the job
(docs/semantics.md §2.10).

``on_error='fail'`` (the default) fails the job at a row's first final error, as Flink does.
``on_error='keep'`` emits that row once with its dim columns NULL and a :class:`RowFailure`
saying why: the table, the key, the error's class and message, and the calls made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

from asyncio_lookup.errors import (
    AsyncLookupError,
    ConfigurationError,
    LookupFailedError,
    error_text,
)

ON_ERROR_ALLOWED = "'fail' (the default: a failed row fails the job) or 'keep' (kept and marked)"


class OnError(Enum):
    """What a join does with a row whose lookup failed for good."""

    FAIL = "fail"
    KEEP = "keep"

    @classmethod
    def of(
        cls,
        value: Any,
        option: str = "on_error",
        error: type[ConfigurationError] = ConfigurationError,
    ) -> OnError:
        """Parse ``'fail'`` / ``'keep'`` (case-insensitive) or an :class:`OnError`."""
        if isinstance(value, OnError):
            return value
        if isinstance(value, str):
            lowered = value.strip().lower()
            for member in cls:
                if member.value == lowered:
                    return member
        raise error(option, value, ON_ERROR_ALLOWED)


def error_class(error: BaseException) -> str:
    """The class a failed row reports: the error's, or for a connector's own exception that the
    chain wrapped into ``LookupFailedError`` (asyncpg, redis-py, a user's function), the
    original's, which says more (``UndefinedTableError``, ``ResponseError``)."""
    cause = error.__cause__
    if (
        type(error) is LookupFailedError
        and cause is not None
        and not isinstance(cause, AsyncLookupError)
    ):
        return type(cause).__name__
    return type(error).__name__


@dataclass(frozen=True, slots=True)
class RowFailure:
    """Why one row failed: ``key`` is the lookup key as JSON text (for ``async_map``, the
    input row), ``attempts`` the calls made for it (retries included)."""

    table: str
    key: str
    error_class: str
    message: str
    attempts: int

    @classmethod
    def of(cls, table: str, key: Any, error: BaseException, attempts: int = 1) -> RowFailure:
        return cls(
            table=table,
            key=key_text(key),
            error_class=error_class(error),
            message=error_text(error) or repr(error),
            attempts=max(attempts, attempts_of(error)),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "key": self.key,
            "error_class": self.error_class,
            "message": self.message,
            "attempts": self.attempts,
        }


def key_text(key: Any) -> str:
    """A key (a tuple of values) or a row (a dict) as JSON; values JSON lacks become text."""
    value = list(key) if isinstance(key, tuple) else key
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(key)


def attempts_of(error: BaseException) -> int:
    """The calls an error says were made (``LookupFailedError.attempts``), else 1."""
    attempts = getattr(error, "attempts", 1)
    return attempts if isinstance(attempts, int) and attempts > 0 else 1
