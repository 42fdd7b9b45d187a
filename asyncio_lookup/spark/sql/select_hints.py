"""A SELECT's hints: ours (LOOKUP, SHUFFLE_HASH on lookup tables) apart from Spark's, each
matched to the lookup join it names.

A name matches a join as in Flink (``QueryHintsResolver``): by the join's alias, or by its
table's name when it has no alias. A name that matches no join that way may still name an
aliased join by its table's name, when exactly one lookup join of the SELECT is of that table
and no source of the SELECT is called so (a name is never applied to two joins, one by alias and
one by table name)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from asyncio_lookup.errors import HintError
from asyncio_lookup.lookup import LookupHint, ShuffleHashHint, parse_hints
from asyncio_lookup.lookup.hint_merge import merge_lookup_hints
from asyncio_lookup.lookup.hints import unqualified
from asyncio_lookup.spark.sql.parse import SqlError, to_spark_sql

SQL_ERROR_FIELD = "lookup_error"
"""With ``'on-error'='keep'``, the dim alias's field with a row's failure (``c.lookup_error``)."""


def _sql(node: exp.Expr) -> str:
    return to_spark_sql(node)


def _hint_text(item: exp.Expr | str) -> str:
    """A hint as text for :func:`parse_hints`: a quote inside a string is doubled (``'D''x'``),
    as the hint parser reads it, where the Spark generator would write ``'D\\'x'``."""
    if isinstance(item, str):
        return item
    copy = item.copy()
    for literal in [lit for lit in copy.find_all(exp.Literal) if lit.is_string]:
        literal.replace(exp.Var(this="'" + literal.this.replace("'", "''") + "'"))
    return _sql(copy)


@dataclass(frozen=True)
class LookupJoinName:
    """A lookup join of a SELECT as its hints see it: its table's name and its alias (None
    when it has none)."""

    table: str
    alias: str | None

    @property
    def name(self) -> str:
        """What Flink matches a hint with: the alias, else the table's name."""
        return self.alias or self.table


@dataclass
class SelectHints:
    """A SELECT's hints, split into ours (LOOKUP, SHUFFLE_HASH on lookup tables) and Spark's."""

    lookup: list[LookupHint] = field(default_factory=list)
    shuffle: list[str] = field(default_factory=list)
    spark: list[exp.Expr] = field(default_factory=list)
    spark_shuffle: list[str] = field(default_factory=list)
    used_lookup: set[int] = field(default_factory=set)
    used_shuffle: set[str] = field(default_factory=set)
    joins: list[LookupJoinName] = field(default_factory=list)
    #: the names of the SELECT's other sources (its FROM item and joins that are not lookups)
    others: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, select: exp.Select, joins: list[LookupJoinName], others: set[str]) -> SelectHints:
        """``joins``: the SELECT's lookup joins; ``others``: the names of its other sources."""
        hints = cls(joins=joins, others={o.lower() for o in others})
        hint = select.args.get("hint")
        for item in hint.expressions if hint is not None else []:
            name = str(item.this if isinstance(item, (exp.JoinHint, exp.Anonymous)) else "")
            text = _hint_text(item)
            if name.upper() == "LOOKUP" or text.upper().startswith("LOOKUP"):
                for parsed in parse_hints(text):
                    assert isinstance(parsed, LookupHint)
                    hints.lookup.append(parsed)
            elif name.upper() == "SHUFFLE_HASH":
                spark = []
                for target in item.expressions:
                    if hints.matched(target.name):
                        hints.shuffle.append(target.name)
                    else:
                        spark.append(target)
                        hints.spark_shuffle.append(target.name)
                if spark:
                    hints.spark.append(exp.JoinHint(this="SHUFFLE_HASH", expressions=spark))
            else:
                hints.spark.append(item)
        for lookup in hints.lookup:
            hints.matched(lookup.table, "LOOKUP")  # raises for an ambiguous name
        return hints

    def matched(self, name: str, hint: str = "SHUFFLE_HASH") -> list[LookupJoinName]:
        """The lookup joins a hint naming ``name`` is for (see the module's docstring)."""
        wanted = unqualified(name).lower()
        by_name = [j for j in self.joins if j.name.lower() == wanted]
        if by_name or wanted in self.others:
            return by_name
        by_table = [j for j in self.joins if j.table.lower() == wanted]
        if len(by_table) > 1:
            aliases = [repr(j.name) for j in by_table]
            raise HintError(
                hint,
                name,
                "the alias of the join it is for: " + ", ".join(aliases),
                reason=f"{name!r} is joined more than once in its SELECT, as "
                f"{' and '.join(aliases)}; a hint naming the table would apply to all of these "
                "joins (Flink matches an aliased table by its alias only): name the alias, one "
                "hint per join",
            )
        return by_table

    def for_join(self, join: LookupJoinName) -> list[LookupHint | ShuffleHashHint]:
        """The hints of the lookup join ``join``."""
        out: list[LookupHint | ShuffleHashHint] = []
        for index, hint in enumerate(self.lookup):
            if join in self.matched(hint.table, "LOOKUP"):
                self.used_lookup.add(index)
                out.append(hint)
        for name in self.shuffle:
            if join in self.matched(name):
                self.used_shuffle.add(name.lower())
                out.append(ShuffleHashHint((name,)))
        return out

    def check_used(self, spark_sources: set[str] | None) -> None:
        """Refuse a LOOKUP hint that reached no lookup join, and a SHUFFLE_HASH naming neither
        a lookup join nor a Spark source of the SELECT (``spark_sources``, its other sources
        before the rewrite included; None: a statement without lookup tables, whose
        SHUFFLE_HASH hints are all Spark's)."""
        allowed = "a lookup table (or alias) joined in this SELECT: " + (
            ", ".join(repr(j.name) for j in self.joins) or "none"
        )
        for index, hint in enumerate(self.lookup):
            if index not in self.used_lookup:
                other = hint.table.strip().lower() in self.others
                raise SqlError(
                    "LOOKUP",
                    hint.table,
                    allowed,
                    reason="the hint names no lookup join of its SELECT"
                    + (f" ({hint.table!r} is another of its sources)" if other else ""),
                )
        if spark_sources is None:
            return
        for name in self.shuffle + self.spark_shuffle:
            wanted = name.lower()
            if wanted in self.used_shuffle or wanted in spark_sources or wanted in self.others:
                continue
            raise SqlError(
                "SHUFFLE_HASH",
                name,
                allowed + " (or another of its sources, for Spark's own SHUFFLE_HASH)",
                reason="the hint names no join of its SELECT",
            )


def keeps_failures(hints: list[LookupHint | ShuffleHashHint]) -> bool:
    """True when the join's LOOKUP hints (merged, as in resolution) keep failed rows."""
    lookup = merge_lookup_hints([h for h in hints if isinstance(h, LookupHint)])
    return lookup is not None and lookup.on_error == "keep"


def shuffles(hints: list[LookupHint | ShuffleHashHint]) -> bool:
    """True when the join's hints make it a hash lookup join (SHUFFLE_HASH or 'shuffle')."""
    if any(isinstance(h, ShuffleHashHint) for h in hints):
        return True
    lookup = merge_lookup_hints([h for h in hints if isinstance(h, LookupHint)])
    return lookup is not None and bool(lookup.shuffle)
