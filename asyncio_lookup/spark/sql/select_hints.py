"""A SELECT's hints: ours (LOOKUP, SHUFFLE_HASH on lookup tables) apart from Spark's, each
LOOKUP hint matched to the lookup join it names (by the table's name or its alias; by the alias
only for a table joined more than once under different aliases, as in Flink)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from asyncio_lookup.errors import HintError
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
    #: lookup tables joined more than once under different aliases (lower case): a LOOKUP hint
    #: matches their joins by alias only, as in Flink
    by_alias_only: set[str] = field(default_factory=set)

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

    def check_joins(self, joins: list[tuple[str, str]]) -> None:
        """Refuse a LOOKUP hint naming a table that ``joins`` (table, alias: the SELECT's
        lookup joins) join more than once under different aliases: it would apply to every one
        of them, where Flink matches an aliased table by its alias only."""
        aliases: dict[str, list[str]] = {}
        for table, alias in joins:
            aliases.setdefault(table.lower(), []).append(alias)
        self.by_alias_only = {t for t, a in aliases.items() if len({x.lower() for x in a}) > 1}
        for hint in self.lookup:
            table = hint.table.lower()
            named = aliases.get(table, [])
            if table in self.by_alias_only and table not in {a.lower() for a in named}:
                raise HintError(
                    "LOOKUP",
                    hint.table,
                    "the alias of the join it is for: " + ", ".join(repr(a) for a in named),
                    reason=f"{hint.table!r} is joined more than once in its SELECT, as "
                    f"{' and '.join(repr(a) for a in named)}; a hint naming the table would "
                    "apply to all of these joins (Flink matches an aliased table by its alias "
                    "only): name the alias, one hint per join",
                )

    def for_join(self, names: tuple[str, str]) -> list[LookupHint | ShuffleHashHint]:
        """The hints of the lookup join of table ``names[0]`` AS ``names[1]``."""
        table, alias = names
        out: list[LookupHint | ShuffleHashHint] = []
        lookup_wanted = {alias.lower()}
        if table.lower() not in self.by_alias_only:
            lookup_wanted.add(table.lower())
        for index, hint in enumerate(self.lookup):
            if hint.table.lower() in lookup_wanted:
                self.used_lookup.add(index)
                out.append(hint)
        wanted = {n.lower() for n in names}
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
