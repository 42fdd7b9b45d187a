"""Failures, retries and timeouts counted by cause (docs/semantics.md "Causes").

A *cause* names what went wrong without the details of one occurrence: ``HTTP 503`` for an
answer with a status, else the innermost exception class of the error's chain
(``ConnectionRefusedError`` under a connector's ``TransientError``), else the library error's
class. Each cause keeps the first message seen for it, secrets masked.

:class:`Causes` is small and mergeable: at most :data:`MAX_CAUSES` causes, kept by name order
(the smallest names), the rest counted under :data:`OTHER`; a merge sums the counts and keeps
the smaller of two messages, so merging is associative and commutative. Only failure paths
call :meth:`Causes.record`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from asyncio_lookup.errors import error_text
from asyncio_lookup.masking import mask_text

FAILURES = "failures"  # final errors (the record or lookup failed for good)
RETRIES = "retries"  # retry attempts started after an error of this cause
RETRIED = "retried"  # records or lookups whose first retry followed this cause
TIMEOUTS = "timeouts"  # deadlines ('timeout') that expired
KINDS = (FAILURES, RETRIES, RETRIED, TIMEOUTS)

OTHER = "other"
TIMEOUT_CAUSE = "TimeoutError"  # the operator's deadline ('timeout'): the error it fails with
MAX_CAUSES = 16  # distinct causes per table: a job rarely has more than a few; bounds the trailer
MAX_MESSAGE = 300  # characters of a first message: enough for a URL and the error's text
_CHAIN_DEPTH = 8  # errors followed through __cause__ / __context__ (connectors wrap 2-3 deep)


def cause_of(error: BaseException) -> str:
    """The cause of ``error``: ``HTTP <status>``, else the innermost exception class of its
    chain that is neither the library's nor a ``BaseException`` only, else its own class."""
    from asyncio_lookup.errors import AsyncLookupError

    chain = _chain(error)
    for link in chain:
        status = getattr(link, "status", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return f"HTTP {status}"
    for link in reversed(chain):
        # a CancelledError is how a timeout stops a call (its context), not what went wrong
        if isinstance(link, Exception) and not isinstance(link, AsyncLookupError):
            return type(link).__name__
    return type(error).__name__


def _chain(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(chain) < _CHAIN_DEPTH and current not in chain:
        chain.append(current)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return chain


def mask(text: str) -> str:
    """``text`` with its secrets masked (:func:`~asyncio_lookup.masking.mask_text`), cut to
    :data:`MAX_MESSAGE` characters."""
    text = mask_text(text)
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def message_of(error: BaseException) -> str:
    """``Type: message`` of ``error``, masked."""
    text = error_text(error)
    return mask(f"{type(error).__name__}: {text}" if text else type(error).__name__)


class Causes:
    """Counts per cause and kind (:data:`KINDS`), with each cause's first message.

    Thread-safe: chains of one table may record from several threads (sync lookups)."""

    __slots__ = ("_by_cause", "_lock")

    def __init__(self) -> None:
        self._by_cause: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def record(self, kind: str, error: BaseException | None, cause: str | None = None) -> None:
        """Count one ``kind`` of ``error`` (its cause, or ``cause`` when given)."""
        name = cause if cause is not None else cause_of(error) if error is not None else OTHER
        message = "" if error is None else message_of(error)
        self.add(name, {kind: 1}, message)

    def add(self, cause: str, counts: Mapping[str, int], message: str = "") -> None:
        """Add ``counts`` (by kind) to ``cause``; ``message`` if the cause has none yet."""
        with self._lock:
            _add(self._by_cause, cause, counts, message, first=True)
            _cap(self._by_cause)

    def __getstate__(self) -> dict[str, Any]:
        return self.to_json()  # a lock does not pickle

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._by_cause = merge({}, state)
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._by_cause)

    def count(self, cause: str, kind: str) -> int:
        entry = self._by_cause.get(cause)
        return 0 if entry is None else int(entry.get(kind, 0))

    def take(self) -> Causes:
        """The causes recorded so far, leaving this one empty (a task's share)."""
        taken = Causes()
        with self._lock:
            taken._by_cause, self._by_cause = self._by_cause, {}
        return taken

    def to_json(self) -> dict[str, dict[str, Any]]:
        """``{cause: {"failures": n, "retries": n, "retried": n, "timeouts": n, "message": s}}``."""
        with self._lock:
            return {name: dict(entry) for name, entry in self._by_cause.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Mapping[str, Any]]) -> Causes:
        causes = cls()
        causes._by_cause = merge({}, data)
        return causes

    def __repr__(self) -> str:
        return f"Causes({self.to_json()})"


def _entry() -> dict[str, Any]:
    return {**dict.fromkeys(KINDS, 0), "message": ""}


def _add(
    into: dict[str, dict[str, Any]],
    cause: str,
    counts: Mapping[str, Any],
    message: str,
    *,
    first: bool,
) -> None:
    entry = into.get(cause)
    if entry is None:
        entry = into[cause] = _entry()
    for kind in KINDS:
        entry[kind] += int(counts.get(kind, 0))
    if message and (not entry["message"] or (not first and message < entry["message"])):
        entry["message"] = message


def _cap(causes: dict[str, dict[str, Any]]) -> None:
    """Keep the :data:`MAX_CAUSES` smallest names; count the others under :data:`OTHER`."""
    names = sorted(name for name in causes if name != OTHER)
    for name in names[MAX_CAUSES:]:
        entry = causes.pop(name)
        _add(causes, OTHER, entry, entry["message"], first=False)


def merge(
    a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Two :meth:`Causes.to_json` values as one: counts summed, the smaller first message
    kept, capped. Associative and commutative; the driver's merge function for the section."""
    merged: dict[str, dict[str, Any]] = {}
    for data in (a, b):
        for cause, entry in data.items():
            _add(merged, str(cause), entry, str(entry.get("message") or ""), first=False)
    _cap(merged)
    return merged


def total(causes: Mapping[str, Mapping[str, Any]], kind: str) -> int:
    """The count of ``kind`` over every cause."""
    return sum(int(entry.get(kind, 0)) for entry in causes.values())


__all__ = [
    "FAILURES",
    "KINDS",
    "MAX_CAUSES",
    "OTHER",
    "RETRIED",
    "RETRIES",
    "TIMEOUTS",
    "TIMEOUT_CAUSE",
    "Causes",
    "cause_of",
    "mask",
    "merge",
    "message_of",
    "total",
]
