"""A SELECT's hints: ours (LOOKUP, SHUFFLE_HASH on lookup tables) apart from Spark's, each
LOOKUP hint matched to the lookup join it names (by the table's name or its alias)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from asyncio_lookup.lookup import LookupHint, ShuffleHashHint, parse_hints
from asyncio_lookup.lookup.hint_merge import merge_lookup_hints
from asyncio_lookup.spark.sql.parse import SqlError

DIALECT = "spark"

SQL_ERROR_FIELD = "lookup_error"
"""With ``'on-error'='keep'``, the dim alias's field with a row's failure (``c.lookup_error``)."""


def _sql(node: exp.Expr) -> str:
    return node.sql(dialect=DIALECT)


@dataclass
class SelectHints:
    """A SELECT's hints, split into ours (LOOKUP, SHUFFLE_HASH on lookup tables) and Spark's."""

    lookup: list[LookupHint] = field(default_factory=list)
    shuffle: list[str] = field(default_factory=list)
    spark: list[exp.Expr] = field(default_factory=list)
    spark_shuffle: list[str] = field(default_factory=list)
    used_lookup: set[int] = field(default_factory=set)
    used_shuffle: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, select: exp.Select, lookup_names: set[str]) -> SelectHints:
        hints = cls()
        hint = select.args.get("hint")
        for item in hint.expressions if hint is not None else []:
            name = str(item.this if isinstance(item, (exp.JoinHint, exp.Anonymous)) else "")
            text = item if isinstance(item, str) else _sql(item)
            if name.upper() == "LOOKUP" or text.upper().startswith("LOOKUP"):
                for parsed in parse_hints(text):
                    assert isinstance(parsed, LookupHint)
                    hints.lookup.append(parsed)
            elif name.upper() == "SHUFFLE_HASH":
                others = []
                for target in item.expressions:
                    if target.name.lower() in lookup_names:
                        hints.shuffle.append(target.name)
                    else:
                        others.append(target)
                        hints.spark_shuffle.append(target.name)
                if others:
                    hints.spark.append(exp.JoinHint(this="SHUFFLE_HASH", expressions=others))
            else:
                hints.spark.append(item)
        return hints

    def for_join(self, names: tuple[str, str]) -> list[LookupHint | ShuffleHashHint]:
        wanted = {n.lower() for n in names}
        out: list[LookupHint | ShuffleHashHint] = []
        for index, hint in enumerate(self.lookup):
            if hint.table.lower() in wanted:
                self.used_lookup.add(index)
                out.append(hint)
        for name in self.shuffle:
            if name.lower() in wanted:
                self.used_shuffle.add(name.lower())
                out.append(ShuffleHashHint((name,)))
        return out

    def check_used(self, joined: list[str], spark_sources: set[str]) -> None:
        allowed = "a lookup table (or alias) joined in this SELECT: " + (
            ", ".join(repr(j) for j in joined) or "none"
        )
        for index, hint in enumerate(self.lookup):
            if index not in self.used_lookup:
                raise SqlError(
                    "LOOKUP",
                    hint.table,
                    allowed,
                    reason="the hint names no lookup join of its SELECT",
                )
        for name in self.shuffle + self.spark_shuffle:
            if name.lower() not in self.used_shuffle and name.lower() not in spark_sources:
                raise SqlError(
                    "SHUFFLE_HASH",
                    name,
                    allowed,
                    reason="the hint names no lookup join of its SELECT",
                )


def keeps_failures(hints: list[LookupHint | ShuffleHashHint]) -> bool:
    """True when the join's LOOKUP hints (merged, as in resolution) keep failed rows."""
    lookup = merge_lookup_hints([h for h in hints if isinstance(h, LookupHint)])
    return lookup is not None and lookup.on_error == "keep"
