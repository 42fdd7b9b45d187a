"""Stream elements besides records: the output mode and the watermark marker."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OutputMode(enum.Enum):
    """How the operator orders its outputs (Flink's ``AsyncDataStream.OutputMode``).

    The one name for the output mode in every layer. ``OutputMode(text)`` also accepts the
    spellings users write, case-insensitively: ``'ordered'``, ``'unordered'`` and Flink SQL's
    ``'allow_unordered'`` (the LOOKUP hint's ``'output-mode'`` and
    ``table.exec.async-lookup.output-mode``).
    """

    ORDERED = "ordered"
    """Outputs in input order; a slow record holds back every record behind it."""
    UNORDERED = "unordered"
    """Outputs in completion order, but never across a :class:`Watermark`."""

    @classmethod
    def _missing_(cls, value: object) -> OutputMode | None:
        if isinstance(value, str):
            return _SPELLINGS.get(value.strip().lower())
        return None


_SPELLINGS = {
    "ordered": OutputMode.ORDERED,
    "unordered": OutputMode.UNORDERED,
    "allow_unordered": OutputMode.UNORDERED,
}


@dataclass(frozen=True, order=True)
class Watermark:
    """A marker in the input stream: passes through the operator as itself.

    In unordered mode every record before a watermark is emitted before it, and every record
    after it is emitted after it.
    """

    timestamp: float
