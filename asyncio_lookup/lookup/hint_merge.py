"""Several LOOKUP hints for one join, merged option by option (Flink's ``QueryHintsResolver``).

Flink merges the key-value options of every LOOKUP hint that names the join's dim table: an
option given in one hint only is taken from it, so ``LOOKUP('table'='D', 'async'='true'),
LOOKUP('table'='D', 'retry-predicate'=...)`` runs async *and* retries. Where two hints give one
option different values, Flink keeps the first value silently; here that is an error naming the
option and both values (as every other hint mistake is). Equal values are no conflict; the
``table`` option may be the table's name in one hint and its alias in another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any, Protocol, TypeVar

from asyncio_lookup.errors import HintError
from asyncio_lookup.masking import mask_text


class _Hint(Protocol):
    @property
    def table(self) -> str: ...

    def to_text(self) -> str: ...


H = TypeVar("H", bound=_Hint)


def _option(field: str) -> str:
    """A hint field's option name: ``output_mode`` -> ``output-mode``, ``async_`` -> ``async``."""
    return field.rstrip("_").replace("_", "-")


def _disagree(name: str, value: Any, table: Any, first: str, other: str) -> HintError:
    """Two LOOKUP hints of ``table`` give ``name`` two values (shown as ``first``, ``other``,
    their secrets masked: equal texts say the secrets differ)."""
    hidden = " (in their secrets)" if first == other else ""
    return HintError(
        name,
        value,
        f"one value for {name!r} across the LOOKUP hints of table {table!r} (or the same value "
        "in each)",
        reason=f"{first} and {other} disagree{hidden}",
    )


def merge_lookup_hints(hints: Sequence[H]) -> H | None:
    """One :class:`~asyncio_lookup.lookup.hints.LookupHint` with every option any of ``hints``
    gives (``None`` for no hints); the first hint's ``table``."""
    if not hints:
        return None
    merged: dict[str, Any] = {}
    source: dict[str, H] = {}
    shared: dict[str, str] = {}  # the lookup.shared-cache.* options, merged one by one
    table = hints[0].table
    for hint in hints:
        for item in fields(hint):  # type: ignore[arg-type]
            value = getattr(hint, item.name)
            if item.name == "shared_cache":
                for name, text in value or ():
                    if name in shared and shared[name] != text:
                        first, other = mask_text(shared[name]), mask_text(text)
                        raise _disagree(name, other, table, repr(first), repr(other))
                    shared.setdefault(name, text)
                continue
            if value is None or item.name == "table":
                continue
            if item.name in merged and merged[item.name] != value:
                first, other = mask_text(source[item.name].to_text()), mask_text(hint.to_text())
                raise _disagree(_option(item.name), value, table, first, other)
            merged.setdefault(item.name, value)
            source.setdefault(item.name, hint)
    if shared:
        merged["shared_cache"] = tuple(shared.items())
    return replace(hints[0], **merged)  # type: ignore[type-var]
