"""Name resolution inside one ``SELECT``: which alias a column belongs to, CTE visibility."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from sqlglot import exp

from asyncio_lookup.spark.sql.parse import SqlError


@dataclass(frozen=True)
class Source:
    """A name columns are qualified with (``o`` in ``o.total``) and the columns it has."""

    alias: str
    fields: tuple[str, ...]

    def field(self, name: str) -> str | None:
        lowered = name.lower()
        return next((f for f in self.fields if f.lower() == lowered), None)


def conjuncts(condition: exp.Expr | None) -> list[exp.Expr]:
    """``a AND b AND c`` as ``[a, b, c]`` (parentheses removed)."""
    if condition is None:
        return []
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if isinstance(condition, exp.And):
        return conjuncts(condition.this) + conjuncts(condition.expression)
    return [condition]


def and_all(parts: Sequence[exp.Expr]) -> exp.Expr | None:
    result: exp.Expr | None = None
    for part in parts:
        wrapped = exp.Paren(this=part.copy())
        result = wrapped if result is None else exp.And(this=result, expression=wrapped)
    return result


def scope_nodes(select: exp.Select) -> Iterator[exp.Expr]:
    """Every node of ``select`` outside its nested queries and WITH clause."""
    stack: list[exp.Expr] = [select]
    while stack:
        node = stack.pop()
        yield node
        for child in node.iter_expressions():
            if isinstance(child, (exp.Query, exp.With)):
                continue
            stack.append(child)


def lambda_bound(column: exp.Column, stop: exp.Expr) -> bool:
    """True when ``column`` is a parameter of an enclosing lambda (``x -> x + 1``)."""
    node = column.parent
    while node is not None and node is not stop:
        if isinstance(node, exp.Lambda) and any(
            p.name.lower() == column.name.lower() for p in node.expressions
        ):
            return True
        node = node.parent
    return False


class Resolver:
    """Resolves columns against probe-side sources and (optionally) one dim source."""

    def __init__(self, sources: Sequence[Source], dim: Source | None = None) -> None:
        self.sources = list(sources)
        self.by_alias: Mapping[str, Source] = {s.alias.lower(): s for s in self.sources}
        self.dim = dim

    def all(self) -> list[Source]:
        return self.sources + ([self.dim] if self.dim is not None else [])

    def resolve(self, column: exp.Column) -> Source | None:
        """The source ``column`` belongs to, ``None`` if none of these (an outer or unknown
        name); raises for a known alias without that column or an ambiguous name."""
        if isinstance(column.this, exp.Star):
            return None
        name = column.name
        if column.table:
            alias = column.table.lower()
            source = (
                self.dim
                if self.dim is not None and alias == self.dim.alias.lower()
                else self.by_alias.get(alias)
            )
            if source is not None and source.field(name) is None:
                raise SqlError(
                    "column",
                    f"{column.table}.{name}",
                    f"columns of {source.alias!r}: {list(source.fields)}",
                    reason="no such column",
                )
            return source
        found = [s for s in self.all() if s.field(name) is not None]
        if len(found) > 1:
            raise SqlError(
                "column",
                name,
                "a qualified name: " + " or ".join(f"{s.alias}.{name}" for s in found),
                reason="ambiguous",
            )
        return found[0] if found else None


def visible_ctes(select: exp.Expr) -> list[exp.CTE]:
    """The CTEs a query at ``select`` may refer to, outermost first."""
    found: list[list[exp.CTE]] = []
    child: exp.Expr = select
    parent = select.parent
    while parent is not None:
        if isinstance(parent, exp.With) and isinstance(child, exp.CTE):
            index = next(i for i, c in enumerate(parent.expressions) if c is child)
            found.append(list(parent.expressions[:index]))
        elif isinstance(parent, exp.Query) and not isinstance(child, exp.With):
            with_ = parent.args.get("with_")
            if with_ is not None:
                found.append(list(with_.expressions))
        child, parent = parent, parent.parent
    return [cte for group in reversed(found) for cte in group]
