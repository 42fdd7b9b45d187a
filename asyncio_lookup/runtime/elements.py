"""Stream elements besides records: the output mode and the watermark marker."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OutputMode(enum.Enum):
    """How the operator orders its outputs (Flink's ``AsyncDataStream.OutputMode``)."""

    ORDERED = "ordered"
    """Outputs in input order; a slow record holds back every record behind it."""
    UNORDERED = "unordered"
    """Outputs in completion order, but never across a :class:`Watermark`."""


@dataclass(frozen=True, order=True)
class Watermark:
    """A marker in the input stream: passes through the operator as itself.

    In unordered mode every record before a watermark is emitted before it, and every record
    after it is emitted after it.
    """

    timestamp: float
