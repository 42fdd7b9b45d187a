"""Shaping a lookup join's view: LEFT JOIN filters that keep one NULL row per probe row, and the
rewritten ``SELECT`` over the views (plain names qualified, ``*`` expanded over the structs)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from sqlglot import exp

from asyncio_lookup.spark.sql.scope import Resolver, Source, lambda_bound, scope_nodes


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def filter_view(
    view: DataFrame,
    condition: Column,
    consolidate: bool,
    rid: str,
    sources: list[Source],
    dim_alias: str,
) -> DataFrame:
    if not consolidate:
        return view.where(condition)
    ok, hit, first = f"{rid}_ok", f"{rid}_any", f"{rid}_first"
    rows = Window.partitionBy(rid)
    marked = (
        view.withColumn(ok, F.coalesce(condition, F.lit(False)))
        .withColumn(hit, F.max(F.col(ok).cast("int")).over(rows))
        .withColumn(first, F.row_number().over(rows.orderBy(rid)))
    )
    kept = marked.where(F.col(ok) | ((F.col(hit) == 0) & (F.col(first) == 1)))
    return kept.select(
        *[F.col(_quoted(s.alias)) for s in sources],
        F.when(F.col(ok), F.col(_quoted(dim_alias))).alias(dim_alias),
    )


def finish(
    select: exp.Select,
    items: list[exp.Expr],
    views: Mapping[str, list[Source]],
    plain: Sequence[Source] = (),
    own_names: Callable[[exp.Select], set[str] | None] = lambda _: None,
) -> None:
    """Qualify plain column names and expand ``*`` over the views' struct columns.

    ``plain``: the other sources of the ``FROM`` (Spark tables and subqueries joined after the
    lookup joins): a plain name one of them has too is ambiguous (an error, as in Spark); one
    only they have stays as it is. ``own_names``: the names a nested query's own ``FROM``
    items and outputs have (lower case), None when not all known; see
    :func:`_qualify_outer_references`."""
    view_sources = [
        source
        for item in items
        if isinstance(item, exp.Table) and item.name in views
        for source in views[item.name]
    ]
    view_aliases = {s.alias.lower() for s in view_sources}
    resolver = Resolver([*view_sources, *plain])
    outputs = {e.alias_or_name.lower() for e in select.expressions}
    late = [select.args.get("order"), select.args.get("having")]
    for node in list(scope_nodes(select)):
        if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
            continue
        if node.table:
            if node.table.lower() in view_aliases:
                resolver.resolve(node)
                for part in ("db", "catalog"):
                    node.set(part, None)
            continue
        if lambda_bound(node, select):
            continue
        if node.name.lower() in outputs and any(
            clause is not None and node.find_ancestor(type(clause)) is clause for clause in late
        ):
            continue
        source = resolver.resolve(node)  # raises for a name two sources have
        if source is not None and any(source is v for v in view_sources):
            node.set("table", exp.to_identifier(source.alias))
    _qualify_outer_references(select, resolver, view_sources, own_names)
    if select.args.get("distinct") and select.args.get("order"):
        _order_distinct_by_output_names(select, view_aliases)
    expanded: list[exp.Expr] = []
    for projection in select.expressions:
        if not isinstance(projection, exp.Star):
            expanded.append(projection)
            continue
        for item in items:
            if isinstance(item, exp.Table) and item.name in views:
                aliases = [s.alias for s in views[item.name]]
            else:
                aliases = [item.alias_or_name]
            expanded += [
                exp.Column(this=exp.Star(), table=exp.to_identifier(a, quoted=True))
                for a in aliases
            ]
    select.set("expressions", expanded)


def _order_distinct_by_output_names(select: exp.Select, view_aliases: set[str]) -> None:
    """``SELECT DISTINCT c.x ... ORDER BY c.x``: ``c`` is a struct column of a view here, which
    Spark cannot read above the DISTINCT's aggregate (only its outputs): an ``ORDER BY`` key
    that is an unaliased projection's column is ordered by that projection's output name (when
    no other projection has that name)."""
    projections = select.expressions
    names = Counter(p.alias_or_name.lower() for p in projections)
    for ordered in select.args["order"].expressions:
        key = ordered.this
        if not (isinstance(key, exp.Column) and key.table.lower() in view_aliases):
            continue
        for projection in projections:
            if projection == key and names[projection.alias_or_name.lower()] == 1:
                ordered.set("this", exp.column(projection.alias_or_name, quoted=True))
                break


def _qualify_outer_references(
    select: exp.Select,
    resolver: Resolver,
    view_sources: Sequence[Source],
    own_names: Callable[[exp.Select], set[str] | None],
) -> None:
    """A plain name in a nested query of ``select`` that no query between it and ``select``
    has (``WHERE EXISTS (SELECT 1 FROM x WHERE x.k = len)``) is, for Spark, the outer query's
    (a correlated reference): qualified with its view source as ``select``'s own names are.
    Left alone when a query on the way has ``FROM`` items whose columns are not known (Spark
    may find the name there) or in a CTE's body (no correlated reference reaches it)."""
    in_scope = {id(node) for node in scope_nodes(select)}
    names: dict[int, set[str] | None] = {}
    for column in list(select.find_all(exp.Column)):
        if id(column) in in_scope or column.table or isinstance(column.this, exp.Star):
            continue
        lowered = column.name.lower()
        node: exp.Expr | None = column.parent
        child: exp.Expr = column
        outer = True
        while node is not None and node is not select:
            if isinstance(node, (exp.With, exp.CTE)) or (
                isinstance(node, exp.Lambda)
                and any(p.name.lower() == lowered for p in node.expressions)
            ):
                outer = False
                break
            if (
                isinstance(node, exp.SetOperation)
                and child is not node.this
                and child is not node.expression
            ):
                outer = False  # a UNION's ORDER BY names the UNION's outputs, not a branch
                break
            if isinstance(node, exp.Select):
                if id(node) not in names:
                    names[id(node)] = own_names(node)
                own = names[id(node)]
                if own is None or lowered in own:
                    outer = False
                    break
            child, node = node, node.parent
        if not outer or node is not select:
            continue
        source = resolver.resolve(column)  # raises for a name two sources have, as Spark does
        if source is not None and any(source is v for v in view_sources):
            column.set("table", exp.to_identifier(source.alias))
