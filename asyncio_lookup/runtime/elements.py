"""Stream elements besides records: the output mode and the watermark marker."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OutputMode(enum.Enum):
    """How the operator orders its outputs (Flink's ``AsyncDataStream.OutputMode``).

    The one name for the output mode in every layer. ``OutputMode(text)`` also accepts the
    spellings users write, case-insensitively: ``'ordered'``, ``'unordered'``, Flink SQL's
    ``'allow_unordered'`` (the LOOKUP hint's ``'output-mode'`` and
    ``table.exec.async-lookup.output-mode``) and ``'key_ordered'``.
    """

    ORDERED = "ordered"
    """Outputs in input order; a slow record holds back every record behind it."""
    UNORDERED = "unordered"
    """Outputs in completion order, but never across a :class:`Watermark`."""
    KEY_ORDERED = "key_ordered"
    """Per key (a key selector's value) outputs in input order, with at most one call in flight
    per key; different keys run concurrently and are emitted as they complete, never across a
    :class:`Watermark` (FLIP-519, Flink's keyed async wait operator)."""

    @classmethod
    def _missing_(cls, value: object) -> OutputMode | None:
        if isinstance(value, str):
            return _SPELLINGS.get(value.strip().lower())
        return None


_SPELLINGS = {
    "ordered": OutputMode.ORDERED,
    "unordered": OutputMode.UNORDERED,
    "allow_unordered": OutputMode.UNORDERED,
    "key_ordered": OutputMode.KEY_ORDERED,
}

OUTPUT_MODES_ALLOWED = (
    "OutputMode.ORDERED, UNORDERED or KEY_ORDERED (with a key), or as text 'ordered', "
    "'unordered' (or 'allow_unordered'), 'key_ordered'"
)
"""What an output mode may be given as, for configuration errors."""


@dataclass(frozen=True, order=True)
class Watermark:
    """A marker in the input stream: passes through the operator as itself.

    In unordered mode every record before a watermark is emitted before it, and every record
    after it is emitted after it.
    """

    timestamp: float
