"""Name resolution inside one ``SELECT``: which alias a column belongs to, CTE visibility, the
WHERE conditions a lookup join's probe side can take, the fields each source must carry."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
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


NONDETERMINISTIC = {"rand", "randn", "random", "uuid", "shuffle", "monotonically_increasing_id"}


def where_of(select: exp.Select) -> exp.Expr | None:
    where = select.args.get("where")
    return where.this if where is not None else None


def pushable_where(
    select: exp.Select,
    resolver: Resolver,
    sources: list[Source],
    later: Sequence[Source] = (),
) -> list[exp.Expr]:
    """WHERE conjuncts over probe columns alone (deterministic, no subquery): they filter
    the probe side before any lookup (not when a RIGHT or FULL join follows, which would
    bring back rows the condition removes). ``later``: the sources joined after the lookup
    join; a conjunct with a plain name one of them also has stays in the WHERE (ambiguous
    there, as in Spark)."""
    if any(
        str(j.args.get("side") or "").upper() in ("RIGHT", "FULL")
        for j in select.args.get("joins") or []
    ):
        return []
    return [
        part
        for part in conjuncts(where_of(select))
        if _on_probe_alone(part, resolver, sources, later)
    ]


def split_probe_conditions(
    conditions: Sequence[exp.Expr], resolver: Resolver, sources: list[Source]
) -> tuple[list[exp.Expr], list[exp.Expr]]:
    """``ON`` conditions besides the key: those over probe columns alone (decided before the
    lookup, as Flink's pre-filter), and the rest (on the looked-up rows)."""
    probe = [c for c in conditions if _on_probe_alone(c, resolver, sources, ())]
    return probe, [c for c in conditions if not any(c is p for p in probe)]


def _on_probe_alone(
    part: exp.Expr, resolver: Resolver, sources: list[Source], later: Sequence[Source]
) -> bool:
    """A deterministic condition without subqueries whose columns are all probe columns."""
    if part.find(exp.Query, exp.AggFunc, exp.Window) is not None:
        return False
    if any(
        f.name.lower() in NONDETERMINISTIC
        for f in part.find_all(exp.Anonymous, exp.Func)
        if hasattr(f, "name")
    ):
        return False
    columns = list(part.find_all(exp.Column))
    if any(not c.table and any(s.field(c.name) is not None for s in later) for c in columns):
        return False
    try:
        owners = [resolver.resolve(c) for c in columns]
    except SqlError:
        return False
    return bool(columns) and all(o is not None and o in sources for o in owners)


def needed_fields(
    select: exp.Select, sources: list[Source], join: exp.Join, residual: list[exp.Expr]
) -> dict[str, list[str]]:
    """The fields of each source the rest of the statement (and the ``ON`` conditions left
    after the key) can refer to: all of them after a ``*``."""
    every = any(isinstance(e, exp.Star) for e in select.expressions) or any(
        isinstance(star.parent, exp.Expr)
        and not isinstance(star.parent, (exp.Column, exp.Count, exp.Select))
        for star in select.find_all(exp.Star)
    )
    qualified: dict[str, set[str]] = {s.alias.lower(): set() for s in sources}
    plain: set[str] = set()
    starred: set[str] = set()
    outside = [c for c in select.find_all(exp.Column) if c.find_ancestor(exp.Join) is not join]
    known = Resolver(sources[:-1], sources[-1])
    in_scope = {id(node) for node in scope_nodes(select)}
    for column in outside + [c for r in residual for c in r.find_all(exp.Column)]:
        if column.table and column.table.lower() in qualified and id(column) in in_scope:
            known.resolve(column)  # raises for a column the alias does not have
        if isinstance(column.this, exp.Star):
            starred.add(column.table.lower())
        elif column.table:
            qualified.setdefault(column.table.lower(), set()).add(column.name.lower())
        else:
            plain.add(column.name.lower())
    out: dict[str, list[str]] = {}
    for source in sources:
        alias = source.alias.lower()
        out[source.alias] = [
            f
            for f in source.fields
            if every
            or alias in starred
            or f.lower() in plain
            or f.lower() in qualified.get(alias, set())
        ]
    return out


def qualify_struct_paths(
    select: exp.Select, sources: Sequence[Source], names: Iterable[str]
) -> None:
    """``s.a`` where ``s`` is no name of ``select``'s ``FROM`` items (``names``: their aliases
    and table names, known columns or not) but a column of exactly one of its ``sources``
    (Spark reads it as the field ``a`` of that column) as ``T.s.a``: the rewritten statement
    has the probe's columns inside the struct ``T``, where an unqualified ``s`` no longer
    resolves. ``db.t.c`` with ``t`` a name stays. Nested queries keep their own names."""
    known = {name.lower() for name in names if name}
    for column in [n for n in scope_nodes(select) if isinstance(n, exp.Column)]:
        parts = column.parts
        if (
            len(parts) < 2
            or parts[0].name.lower() in known
            or (len(parts) > 2 and parts[1].name.lower() in known)
            or lambda_bound(column, select)
        ):
            continue
        owners = [s for s in sources if s.field(parts[0].name) is not None]
        if len(owners) != 1:
            continue
        nested: exp.Expr = exp.Column(
            this=parts[0].copy(), table=exp.to_identifier(owners[0].alias, quoted=True)
        )
        for part in parts[1:]:
            nested = exp.Dot(this=nested, expression=part.copy())
        column.replace(nested)


def nest_field_paths(select: exp.Select, aliases: Sequence[str]) -> None:
    """``o.addr.city`` (sqlglot: the column ``city`` of the table ``addr`` in the database
    ``o``) as the field ``city`` of the column ``o.addr``, when ``o`` is an alias of
    ``select``'s ``FROM``: every name lookup then sees the column ``o.addr``. The SQL text
    stays the same."""
    known = {a.lower() for a in aliases if a}
    for column in list(select.find_all(exp.Column)):
        parts = column.parts
        if len(parts) < 3 or parts[0].name.lower() not in known:
            continue
        nested: exp.Expr = exp.Column(this=parts[1].copy(), table=parts[0].copy())
        for part in parts[2:]:
            nested = exp.Dot(this=nested, expression=part.copy())
        column.replace(nested)


def qualified(expression: exp.Expr, resolver: Resolver) -> exp.Expr:
    """``expression`` with its plain column names qualified by their sources' aliases; a
    subquery's own names are its own (``c.tid IN (SELECT tid FROM Tiers)``)."""
    copy = expression.copy()
    for column in list(copy.find_all(exp.Column)):
        if column.table or lambda_bound(column, copy):
            continue
        if column.find_ancestor(exp.Query) is not None:  # the copy has no parent: a subquery's
            continue
        source = resolver.resolve(column)
        if source is not None:
            column.set("table", exp.to_identifier(source.alias))
    return copy
