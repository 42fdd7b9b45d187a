"""Dim columns that no looked-up row of a task contained, and ``async_map`` schema columns no
row its function returned contained (docs/semantics.md §2.11).

A typo in the declared schema, or a field the service does not have, would otherwise be NULL
on every row, silently. A column counts as missing when the task's lookups returned rows and
none of them had the column as a key (a row holding it with a null value has it). The dim key
columns are not checked: HTTP point rows need not carry them.

The check costs nothing per row once every column has been seen, which on the good path is
the first rows of the first batch; until then each batch is scanned (in C) for the columns not
seen yet.
"""

from __future__ import annotations

import difflib
import logging
import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any

import pyarrow as pa

from asyncio_lookup.errors import DataFormatError
from asyncio_lookup.lookup.option_names import FAIL_ON_MISSING_COLUMN

log = logging.getLogger(__name__)


class MissingColumns:
    """The columns of ``columns`` that no row passed to :meth:`observe` contained, and the
    fields of ``fields`` (a STRUCT column's field names, by column) that no value of their
    column contained, once some row had a value (a dict) there: ``'s.name'``."""

    __slots__ = ("_parents", "_unseen", "_unseen_fields", "returned", "sample")

    def __init__(
        self, columns: Iterable[str], fields: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        self._unseen = list(dict.fromkeys(columns))
        self._unseen_fields = [
            (column, name)
            for column, names in (fields or {}).items()
            for name in dict.fromkeys(names)
        ]
        self._parents: set[str] = set()  # STRUCT columns some returned row had a dict in
        self.returned = False  # some lookup returned a row (an output row has a dim row)
        self.sample: tuple[str, ...] = ()  # the columns of the first returned row

    def observe(self, rows: list[Any], failed: Collection[int] = ()) -> None:
        """Note the columns of ``rows`` (``None``: a NULL-padded row, not a returned one; at
        the positions ``failed``: a failed row's failure, on_error='keep')."""
        if self.returned and not self._unseen and not self._unseen_fields:
            return
        if rows.count(None) + len(failed) >= len(rows):
            return  # no row returned (the failed positions hold failures, never None)
        if failed:
            skip = set(failed)
            rows = [None if i in skip else row for i, row in enumerate(rows)]
        returned = [row for row in rows if row is not None]  # not empty: counted above
        if not self.returned:
            self.returned = True
            self.sample = tuple(returned[0])
        if self._unseen:
            self._unseen = [
                name
                for name in self._unseen
                if not any(map(operator.contains, returned, repeat(name)))
            ]
        if self._unseen_fields:
            self._observe_fields(returned)

    def _observe_fields(self, returned: list[Any]) -> None:
        structs: dict[str, list[Mapping[str, Any]]] = {}
        for column, _ in self._unseen_fields:
            if column not in structs:
                structs[column] = [
                    value
                    for row in returned
                    if isinstance(row, Mapping) and isinstance(value := row.get(column), Mapping)
                ]
                if structs[column] and column not in self._parents:
                    self._parents.add(column)
                    # the struct's fields beside the columns: what a misspelt field is near
                    first = structs[column][0]
                    self.sample += tuple(f"{column}.{name}" for name in first)
        self._unseen_fields = [
            (column, name)
            for column, name in self._unseen_fields
            if not any(name in value for value in structs[column])
        ]

    @property
    def unseen(self) -> bool:
        """Whether some column has not been seen yet (:meth:`observe` has work to do)."""
        return bool(self._unseen or self._unseen_fields)

    @property
    def missing(self) -> list[str]:
        """The columns no returned row had, and the STRUCT fields no value of their column
        had (``'s.name'``); [] when no lookup returned a row."""
        if not self.returned:
            return []
        fields = [f"{c}.{n}" for c, n in self._unseen_fields if c in self._parents]
        return list(self._unseen) + fields

    def report(self, table: str, target: str, *, fail: bool) -> int:
        """Log one warning (or raise, with ``fail``) naming the missing columns; their number."""
        missing = self.missing
        if not missing:
            return 0
        message = describe(table, target, missing, self.sample)
        if fail:
            raise DataFormatError(f"{message} ({FAIL_ON_MISSING_COLUMN}=true)")
        log.warning(
            "%s; NULL in every output row of the task (set %s=true to fail instead)",
            message,
            FAIL_ON_MISSING_COLUMN,
        )
        return len(missing)

    def report_function(self, what: str) -> int:
        """:meth:`report` for the rows a function returned (``what``: ``async_map 'f'``),
        a warning only; the number of missing columns."""
        missing = self.missing
        if missing:
            log.warning(
                "%s: no row the function returned in this task had the %s %s (a returned row "
                "has %s); NULL in every output row of the task: fix the schema or the function",
                what,
                "column" if len(missing) == 1 else "columns",
                _named(missing, self.sample),
                list(self.sample),
            )
        return len(missing)


def describe(table: str, target: str, missing: Sequence[str], sample: Sequence[str]) -> str:
    """``lookup table 'T' (target): no row ... had column 'nmae' (did you mean 'name'?) ...``."""
    noun = "column" if len(missing) == 1 else "columns"
    return (
        f"lookup table {table!r} ({target}): no row the lookups of this task returned had "
        f"the {noun} {_named(missing, sample)} (a returned row has {list(sample)}); fix the "
        "declared schema or the source"
    )


def _named(missing: Sequence[str], sample: Sequence[str]) -> str:
    parts = []
    for name in missing:
        close = difflib.get_close_matches(name, [str(key) for key in sample], n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ", ".join(parts)


def struct_fields(fields: Iterable[tuple[str, pa.DataType]]) -> dict[str, list[str]]:
    """The field names of each STRUCT column of ``fields`` (name, Arrow type)."""
    return {name: [f.name for f in kind] for name, kind in fields if pa.types.is_struct(kind)}
