"""Lookup joins in a parsed statement -> temporary views of ``lookup_join`` results.

For each ``SELECT`` (innermost first) and each of its lookup joins, left to right: the probe
side (``FROM`` and the joins before the lookup join) is analysed by Spark as
``SELECT struct(o.*) AS o, ...``; its rows go through :func:`lookup_join` with the key the
``ON`` equalities give; the result, shaped as one struct column per alias (``o``, ``c``), becomes
a temporary view that replaces the probe side and the lookup join in the ``SELECT``. ``o.total``
and ``c.zip`` then resolve as struct fields, so the rest of the statement stays Spark SQL.
``WHERE`` conditions on probe columns alone are applied before the lookups, and so are ``ON``
conditions on probe columns alone (as Flink's pre-filter: an inner join drops a row that fails
one, a left join keeps it with NULLs; neither looks it up). Other ``ON`` conditions filter the
looked-up rows (for ``LEFT JOIN`` a probe row whose dim rows all fail keeps NULLs). Nothing
here runs a Spark job.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.spark.failed_rows import DEFAULT_ERROR_COLUMN
from asyncio_lookup.spark.join import lookup_join
from asyncio_lookup.spark.metrics import observed_by
from asyncio_lookup.spark.shuffle import ROW_ID_PREFIX
from asyncio_lookup.spark.sql.ddl import TableDefinition
from asyncio_lookup.spark.sql.keys import KeyFinder, key_order
from asyncio_lookup.spark.sql.parse import SYSTEM_TIME, SparkSql, SqlError, to_spark_sql
from asyncio_lookup.spark.sql.scope import (
    Resolver,
    Source,
    and_all,
    conjuncts,
    needed_fields,
    nest_field_paths,
    pushable_where,
    qualified,
    qualify_struct_paths,
    split_probe_conditions,
    visible_ctes,
    where_of,
)
from asyncio_lookup.spark.sql.select_hints import (
    SQL_ERROR_FIELD,
    LookupJoinName,
    SelectHints,
    keeps_failures,
    shuffles,
)
from asyncio_lookup.spark.sql.views import filter_view, finish

DIALECT = SparkSql
JOIN_ALLOWED = "JOIN / INNER JOIN or LEFT [OUTER] JOIN ... ON (as Flink's lookup join)"
_counter = itertools.count(1)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql(node: exp.Expr) -> str:
    return to_spark_sql(node)


def system_time(table: exp.Table) -> bool:
    version = table.args.get("version")
    return isinstance(version, exp.Version) and bool(version.meta.get(SYSTEM_TIME))


def _query_children(node: exp.Expr) -> Iterator[exp.Expr]:
    with_ = node.args.get("with_")
    if isinstance(with_, exp.Expr):
        yield with_
    for child in node.iter_expressions():
        if child is not with_:
            yield child


def selects_innermost_first(node: exp.Expr) -> list[exp.Select]:
    out: list[exp.Select] = []
    for child in _query_children(node):
        out.extend(selects_innermost_first(child))
    if isinstance(node, exp.Select):
        out.append(node)
    return out


def select_hints(select: exp.Select) -> SelectHints:
    """``select``'s hints, matched against its lookup joins and the names of its other sources."""
    lookups: list[LookupJoinName] = []
    others: set[str] = set()
    from_ = select.args.get("from_")
    for item in [from_.this] if from_ is not None else []:
        others.add(item.alias_or_name)
    for join in select.args.get("joins") or []:
        item = join.this
        if isinstance(item, exp.Table) and system_time(item):
            lookups.append(LookupJoinName(item.name, item.alias or None))
        else:
            others.add(item.alias_or_name)
    return SelectHints.of(select, lookups, others - {""})


class Translator:
    """Rewrites the lookup joins of statements for one :class:`LookupSQL`."""

    def __init__(
        self,
        spark: SparkSession,
        tables: Callable[[str], TableDefinition | None],
        skew: Any = False,
    ) -> None:
        self.spark = spark
        self.tables = tables
        self.skew = skew
        self.views: dict[str, list[Source]] = {}
        #: (table id, observation name) of each lookup join of the statement being translated
        self.observed: list[tuple[str, str]] = []
        #: the views of the statement being translated, by name
        self.frames: dict[str, DataFrame] = {}
        #: the columns of the Spark sources analysed for the statement being translated
        self._plain_columns: dict[str, tuple[str, ...] | None] = {}

    # ------------------------------------------------------------------ statement level

    def translate(self, statement: exp.Expr) -> bool:
        """Rewrite every lookup join in ``statement`` in place; False when it has none."""
        self._inline_lookup_ctes(statement)
        if not self._check_tables(statement):
            for select in statement.find_all(exp.Select):
                SelectHints.of(select, [], set()).check_used(None)  # a LOOKUP hint needs a join
            return False
        self.observed = []
        self.frames = {}
        self._plain_columns = {}
        for select in selects_innermost_first(statement):
            self._select(select)
        return True

    def _inline_lookup_ctes(self, statement: exp.Expr) -> None:
        """``JOIN V FOR SYSTEM_TIME AS OF ...`` where the CTE ``V`` is exactly ``SELECT * FROM T``
        of a lookup table ``T`` joins ``T`` (alias ``V`` when it has none), as Flink's
        testJoinTemporalTableWithCTE; the CTE goes when nothing else refers to it."""
        inlined: list[exp.CTE] = []
        for table in list(statement.find_all(exp.Table)):
            if not system_time(table) or table.args.get("db") or table.args.get("catalog"):
                continue
            name = table.name.lower()
            cte = next(
                (c for c in reversed(visible_ctes(table)) if c.alias_or_name.lower() == name), None
            )
            target = self._lookup_table_of(cte) if cte is not None else None
            if cte is None or target is None:
                continue
            if not table.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", exp.to_identifier(target))
            inlined.append(cte)
        for cte in inlined:
            with_ = cte.parent
            if not isinstance(with_, exp.With) or with_.parent is None:
                continue  # already removed
            name = cte.alias_or_name.lower()
            if not any(t.name.lower() == name for t in with_.parent.find_all(exp.Table)):
                cte.pop()
                if not with_.expressions:
                    with_.parent.set("with_", None)

    def _lookup_table_of(self, cte: exp.CTE) -> str | None:
        """``T`` when ``cte`` is exactly ``SELECT * FROM T`` of a lookup table ``T``."""
        body, alias = cte.this, cte.args.get("alias")
        if not isinstance(body, exp.Select) or (alias is not None and alias.columns):
            return None
        from_ = body.args.get("from_")
        source = from_.this if from_ is not None else None
        if (
            {k for k, v in body.args.items() if v} != {"expressions", "from_"}
            or [type(e) for e in body.expressions] != [exp.Star]
            or not isinstance(source, exp.Table)
            or {k for k, v in source.args.items() if v} - {"this", "alias"}  # db, version, ...
        ):
            return None
        return source.name if self.tables(source.name) is not None else None

    def _check_tables(self, statement: exp.Expr) -> bool:
        found = False
        for table in statement.find_all(exp.Table):
            if table.find_ancestor(exp.Hint) is not None:
                continue
            name = table.name
            ctes = {c.alias_or_name.lower() for c in visible_ctes(table)}
            query = table.find_ancestor(exp.Query)
            while query is not None:
                with_ = query.args.get("with_")
                if with_ is not None:
                    ctes |= {c.alias_or_name.lower() for c in with_.expressions}
                query = query.find_ancestor(exp.Query)
            qualified = bool(table.args.get("db") or table.args.get("catalog"))
            definition = None if qualified or name.lower() in ctes else self.tables(name)
            if system_time(table):
                if definition is None:
                    raise SqlError(
                        "FOR SYSTEM_TIME AS OF",
                        ".".join(p.name for p in table.parts),
                        "a lookup table created with CREATE TEMPORARY TABLE ... WITH "
                        "('connector' = ...) or LookupSQL.register()",
                        reason=self._not_lookup(name, qualified, name.lower() in ctes),
                    )
                join = table.parent
                if not isinstance(join, exp.Join) or not isinstance(join.parent, exp.Select):
                    raise SqlError(
                        "FOR SYSTEM_TIME AS OF",
                        name,
                        "the right side of a JOIN: FROM Orders AS o JOIN "
                        f"{name} FOR SYSTEM_TIME AS OF o.proc_time AS c ON ...",
                    )
                found = True
            elif definition is not None:
                raise SqlError(
                    "table",
                    name,
                    f"JOIN {name} FOR SYSTEM_TIME AS OF <probe column> [AS alias] ON ...",
                    reason=f"{name!r} is a lookup table: it can only be joined with "
                    "FOR SYSTEM_TIME AS OF",
                )
        return found

    def _not_lookup(self, name: str, qualified: bool, cte: bool) -> str:
        """Why ``name`` cannot be the lookup side of ``FOR SYSTEM_TIME AS OF``."""
        if qualified:
            also = f" ({name!r} is one: JOIN {name} FOR SYSTEM_TIME AS OF ...)"
            return "a lookup table's name has no catalog or database" + (
                also if self.tables(name) is not None else ""
            )
        if cte:
            return (
                "a CTE cannot be the lookup side of FOR SYSTEM_TIME AS OF (unless it is "
                "exactly SELECT * FROM <lookup table>)"
            )
        return f"{name!r} is not a lookup table"

    # ------------------------------------------------------------------ one SELECT

    def _lookup_index(self, select: exp.Select) -> int | None:
        for index, join in enumerate(select.args.get("joins") or []):
            if isinstance(join.this, exp.Table) and system_time(join.this):
                return index
        return None

    def _select(self, select: exp.Select) -> None:
        hints = select_hints(select)
        lookups = hints.joins
        if not lookups and not hints.lookup and not hints.shuffle:
            return
        for join in select.args.get("joins") or []:
            if join.args.get("using") or join.text("method").upper() == "NATURAL":
                raise SqlError(
                    "JOIN",
                    _sql(join)[:120],
                    "ON with qualified names (JOIN w ON o.cid = w.cid) in a SELECT with a lookup "
                    "join",
                    reason="USING and NATURAL merge columns the rewritten statement would list "
                    "twice",
                )
        items = self._from_items(select)
        nest_field_paths(select, [item.alias_or_name for item in items])
        known = [self._from_source(select, item) for item in items]
        names = [n for item in items for n in (item.alias_or_name, getattr(item, "name", ""))]
        qualify_struct_paths(select, [source for source in known if source is not None], names)
        while (index := self._lookup_index(select)) is not None:
            self._lookup_join(select, index, hints)
        spark_sources = {s.lower() for s in self._plain_aliases(select)}
        hints.check_used(spark_sources)
        if hints.spark:
            select.set("hint", exp.Hint(expressions=hints.spark))
        else:
            select.set("hint", None)
        if lookups:
            items = self._from_items(select)
            plain = [self._plain_source(select, item) for item in items]
            finish(select, items, self.views, [p for p in plain if p is not None], self._own_names)

    def _from_source(self, select: exp.Select, item: exp.Expr) -> Source | None:
        """The alias and columns of a ``FROM`` item before the rewrite: a lookup table's
        visible columns, a Spark source's as Spark analyses it; None when unknown."""
        if isinstance(item, exp.Table) and system_time(item):
            definition = self.tables(item.name)
            return Source(item.alias_or_name, definition.visible) if definition else None
        return self._plain_source(select, item)

    def _plain_source(self, select: exp.Select, item: exp.Expr) -> Source | None:
        """The alias and columns of a Spark source of ``select``'s ``FROM`` (a table or a
        subquery, as Spark analyses it alone), None for a view of ours, a lookup table or an
        item Spark cannot analyse alone (it is then left to Spark)."""
        if isinstance(item, exp.Table) and (item.name in self.views or system_time(item)):
            return None
        alias = item.alias_or_name
        if not alias:
            return None
        query = exp.Select(expressions=[exp.Star()], from_=exp.From(this=item.copy()))
        ctes = visible_ctes(select)
        if select.args.get("with_") is not None:
            ctes += list(select.args["with_"].expressions)
        if ctes:
            query.set("with_", exp.With(expressions=[c.copy() for c in ctes]))
        key = _sql(query)
        if key not in self._plain_columns:
            try:
                self._plain_columns[key] = tuple(self.spark.sql(key).columns)
            except Exception:  # e.g. a LATERAL subquery referring to earlier sources
                self._plain_columns[key] = None
        columns = self._plain_columns[key]
        return Source(alias, columns) if columns is not None else None

    def _own_names(self, select: exp.Select) -> set[str] | None:
        """The names (lower case) a nested query's ``FROM`` items and outputs give it, as
        Spark analyses each item alone, and its ``LATERAL VIEW`` columns; None when an item
        cannot be analysed alone (a ``PIVOT`` or ``UNPIVOT`` on one included)."""
        found = {e.alias_or_name.lower() for e in select.expressions if e.alias_or_name}
        for lateral in select.args.get("laterals") or []:  # LATERAL VIEW explode(a) t AS k
            alias = lateral.args.get("alias")
            columns = alias.columns if alias is not None else []
            if not columns:
                return None  # Spark's default names (col, pos, key, value)
            found.update(column.name.lower() for column in columns)
        for item in self._from_items(select):
            if item.args.get("pivots") or isinstance(item, exp.Pivot):
                return None
            if isinstance(item, exp.Table) and (item.name in self.views or system_time(item)):
                return None
            source = self._plain_source(select, item)
            if source is None:
                return None
            found.update(field.lower() for field in source.fields)
        return found

    def _later_sources(self, select: exp.Select, index: int) -> list[Source]:
        """The sources joined after the join at ``index``: Spark sources and lookup tables."""
        out = []
        for join in (select.args.get("joins") or [])[index + 1 :]:
            item = join.this
            definition = self.tables(item.name) if isinstance(item, exp.Table) else None
            if isinstance(item, exp.Table) and system_time(item) and definition is not None:
                out.append(Source(item.alias_or_name, definition.visible))
                continue
            source = self._plain_source(select, item)
            if source is not None:
                out.append(source)
        return out

    def _plain_aliases(self, select: exp.Select) -> list[str]:
        out = []
        for source in self._from_items(select):
            if not (isinstance(source, exp.Table) and source.name in self.views):
                out += [source.alias_or_name, getattr(source, "name", "")]
        return out

    def _from_items(self, select: exp.Select, upto: int | None = None) -> list[exp.Expr]:
        joins = select.args.get("joins") or []
        from_ = select.args.get("from_")
        first = [from_.this] if from_ is not None else []
        return first + [j.this for j in joins[: len(joins) if upto is None else upto]]

    def _sources(self, items: list[exp.Expr], schema: Any = None) -> list[tuple[str, str, Source]]:
        """(expression to select, struct name, Source) per alias of the probe side."""
        out = []
        for item in items:
            if isinstance(item, exp.Table) and item.name in self.views:
                for source in self.views[item.name]:
                    out.append((f"{_quoted(item.alias_or_name)}.{_quoted(source.alias)}", source))
                continue
            alias = item.alias_or_name
            if not alias:
                raise SqlError(
                    "FROM",
                    _sql(item)[:80],
                    "a table or a subquery with an alias (FROM (SELECT ...) AS o)",
                    reason="the probe side of a lookup join needs a name for each input",
                )
            out.append((f"struct({_quoted(alias)}.*)", Source(alias, ())))
        return [(expr, src.alias, src) for expr, src in out]

    def _lookup_join(self, select: exp.Select, index: int, hints: SelectHints) -> None:
        joins = list(select.args.get("joins") or [])
        join = joins[index]
        table: exp.Table = join.this
        definition = self.tables(table.name)
        assert definition is not None
        name, dim_alias = definition.name, table.alias_or_name
        side, kind = str(join.args.get("side") or "").upper(), str(join.args.get("kind") or "")
        if (side, kind.upper()) not in (("", ""), ("", "INNER"), ("LEFT", ""), ("LEFT", "OUTER")):
            written = f"{side} {kind} JOIN {name}".strip()
            if kind.upper() == "CROSS":  # sqlglot reads FROM a, b as a CROSS JOIN
                written += f" (or FROM ..., {name}: a comma join)"
            raise SqlError("join", written, JOIN_ALLOWED, reason="unsupported")
        if join.args.get("using") or join.args.get("method") or join.args.get("on") is None:
            raise SqlError("join", f"JOIN {name}", JOIN_ALLOWED, reason="a lookup join needs ON")
        how = "left" if side == "LEFT" else "inner"

        # The probe side as Spark sees it: one struct per alias.
        items = self._from_items(select, upto=index)
        probe = self._sources(items)
        if dim_alias.lower() in {alias.lower() for _, alias, _ in probe}:
            raise SqlError("alias", dim_alias, "an alias not used by the probe side")
        ctes = visible_ctes(select)
        if select.args.get("with_") is not None:
            ctes += list(select.args["with_"].expressions)
        spark_join_hints = [h.copy() for h in hints.spark if isinstance(h, exp.JoinHint)]
        probe_query = exp.Select(
            expressions=[exp.alias_(exp.maybe_parse(e, dialect=DIALECT), a) for e, a, _ in probe],
            from_=select.args["from_"].copy(),
            joins=[j.copy() for j in joins[:index]],
        )
        if ctes:
            probe_query.set("with_", exp.With(expressions=[c.copy() for c in ctes]))
        if spark_join_hints:
            probe_query.set("hint", exp.Hint(expressions=spark_join_hints))
        structs = self.spark.sql(_sql(probe_query))
        struct_types: dict[str, Any] = {f.name: f.dataType for f in structs.schema.fields}
        sources = [Source(alias, tuple(struct_types[alias].names)) for _, alias, _ in probe]
        join_hints = hints.for_join(LookupJoinName(table.name, table.alias or None))
        keep = keeps_failures(join_hints)
        if keep and SQL_ERROR_FIELD.lower() in {c.lower() for c in definition.visible}:
            raise SqlError(
                "on-error",
                "keep",
                f"a table without a column named {SQL_ERROR_FIELD!r}",
                reason=f"{name!r} has one, and the error output adds {dim_alias}."
                f"{SQL_ERROR_FIELD}; rename the column in the DDL",
            )
        dim = Source(dim_alias, definition.visible + ((SQL_ERROR_FIELD,) if keep else ()))
        resolver = Resolver(sources, dim)

        # FOR SYSTEM_TIME AS OF <probe column>: checked, not used (processing time).
        moment = table.args["version"].expression
        if not isinstance(moment, exp.Column) or resolver.resolve(moment) in (None, dim):
            raise SqlError(
                "FOR SYSTEM_TIME AS OF",
                _sql(moment) if moment is not None else None,
                "a column of the probe side, such as o.proc_time",
                reason=f"in the lookup join of {name!r}",
            )

        finder = KeyFinder(
            name, resolver, dim, definition.columns, definition.key, definition.data_types()
        )
        key, residual = finder.find(join.args["on"])
        # ON conditions on probe columns alone decide before the lookup (Flink's pre-filter):
        # an inner join drops the row, a left join keeps it unmatched; neither looks it up
        before, residual = split_probe_conditions(residual, resolver, sources)
        pre_filter = and_all([qualified(b, resolver) for b in before])
        later = self._later_sources(select, index) if where_of(select) is not None else []
        pushed = pushable_where(select, resolver, sources, later)
        if pushed:
            rest = and_all([c for c in conjuncts(where_of(select)) if c not in pushed])
            select.set("where", exp.Where(this=rest) if rest is not None else None)
        n = next(_counter)
        prefix = f"__lk{n}"
        needed = needed_fields(select, [*sources, dim], join, residual)
        flat: dict[str, list[tuple[str, str]]] = {}
        columns: list[Column] = []
        for a, source in enumerate(sources):
            fields = needed[source.alias] or [source.fields[0]]
            flat[source.alias] = [(f, f"{prefix}_p{a}_{j}") for j, f in enumerate(fields)]
            columns += [
                F.col(f"{_quoted(source.alias)}.{_quoted(f)}").alias(c)
                for f, c in flat[source.alias]
            ]
        on: list[tuple[str, str]] = []
        readable: dict[str, str] = {}
        for j, bound in enumerate(key):
            dim_column, expression = bound.column, bound.expression
            key_name = f"{prefix}_k{j}"
            readable[key_name] = _sql(expression)
            key_value = F.expr(_sql(qualified(expression, resolver)))
            if pre_filter is not None and how == "left":  # a NULL key: no lookup, NULLs
                key_value = F.when(F.expr(_sql(pre_filter)), key_value)
            columns.append(key_value.alias(key_name))
            on.append((key_name, dim_column))
        rid = f"{ROW_ID_PREFIX}{n}"  # a row's position: never hashed to route it
        consolidate = how == "left" and bool(residual)
        if consolidate and structs.isStreaming:
            raise SqlError(
                "ON",
                _sql(and_all(residual) or exp.true())[:200],
                "on a streaming probe side, a LEFT JOIN's ON with the key and conditions on "
                "the probe side alone, or an INNER JOIN",
                reason=f"in the lookup join of {name!r}: a LEFT JOIN keeps one row per probe "
                "row whose looked-up rows fail a condition, which needs a window Structured "
                "Streaming does not run",
            )
        if consolidate:
            columns.append(F.monotonically_increasing_id().alias(rid))
        probe_df = structs
        if pushed:
            condition = and_all([qualified(p, resolver) for p in pushed])
            assert condition is not None
            probe_df = probe_df.where(F.expr(_sql(condition)))
        if pre_filter is not None and how != "left":
            probe_df = probe_df.where(F.expr(_sql(pre_filter)))
        probe_df = probe_df.select(*columns)

        dim_fields = [f for f in needed[dim_alias] if f != SQL_ERROR_FIELD]
        dim_fields = dim_fields or [definition.columns[0]]
        computed = {c.name: c for c in definition.computed if c.name in dim_fields}
        physical = [f for f in dim_fields if f not in computed]
        depends = (d for c in computed.values() for d in c.depends)  # two may share one
        physical = list(dict.fromkeys([*physical, *depends]))
        dim_flat = [(f, f"{prefix}_d{j}") for j, f in enumerate(physical or definition.columns[:1])]
        error_column = f"{prefix}_error"
        # a computed column is NULL with the other dim columns where no dim row was joined
        matched = f"{prefix}_matched" if computed and (how == "left" or keep) else None
        ordered = key_order(key, definition.columns)
        lookup_table = definition.lookup_table(tuple(k.column for k in ordered))

        def joined_with(skew: Any) -> DataFrame:
            return lookup_join(
                probe_df,
                lookup_table,
                on=on,
                how=how,
                hints=join_hints,
                columns=[f for f, _ in dim_flat],
                rename=dict(dim_flat),
                alias=dim_alias,
                skew=skew,
                error_column=error_column if keep else DEFAULT_ERROR_COLUMN,
                matched_column=matched,
            )

        skew = self.skew if shuffles(join_hints) else None
        try:
            try:
                joined = joined_with(skew)
            except ConfigurationError as error:
                if error.option != "skew" or "key order" not in str(error.reason or ""):
                    raise
                # the session's skew is a default for its SHUFFLE_HASH joins: one in key order
                # keeps each key on one task (a salted hot key's rows would go to several)
                joined = joined_with(None)
        except SqlError:
            raise
        except ConfigurationError as error:
            raise _in_join(error, name, dim_alias, readable) from None
        observed = observed_by(joined)
        if observed is not None:
            self.observed.append(observed)

        shaped = [
            F.struct(*[F.col(c).alias(f) for f, c in flat[s.alias]]).alias(s.alias) for s in sources
        ]
        flat_dim = dict(dim_flat)
        if keep:  # the failure, as a field of the dim struct: c.lookup_error
            flat_dim[SQL_ERROR_FIELD] = error_column
            dim_fields = [*dim_fields, SQL_ERROR_FIELD]

        def dim_value(f: str) -> Column:
            if f not in computed:
                return F.col(flat_dim[f])
            value = F.expr(computed[f].over(flat_dim))  # on the looked-up row
            return value if matched is None else F.when(F.col(matched), value)

        dim_struct = F.struct(*[dim_value(f).alias(f) for f in dim_fields]).alias(dim_alias)
        view = joined.select(*shaped, dim_struct, *([F.col(rid)] if consolidate else []))
        if residual:
            condition = and_all([qualified(r, resolver) for r in residual])
            assert condition is not None
            kept = F.expr(_sql(condition))
            if keep:  # a failed row has no dim values to test: it is kept as it is
                kept = kept | F.col(f"{_quoted(dim_alias)}.{SQL_ERROR_FIELD}").isNotNull()
            view = filter_view(view, kept, consolidate, rid, sources, dim_alias)
        view_name = f"__asyncio_lookup_{n}_{uuid.uuid4().hex[:8]}"
        view.createOrReplaceTempView(view_name)
        self.frames[view_name] = view
        self.views[view_name] = [
            Source(s.alias, tuple(f for f, _ in flat[s.alias])) for s in sources
        ] + [Source(dim_alias, tuple(dim_fields))]
        select.set(
            "from_",
            exp.From(
                this=exp.Table(
                    this=exp.to_identifier(view_name),
                    alias=exp.TableAlias(this=exp.to_identifier(prefix)),
                )
            ),
        )
        select.set("joins", joins[index + 1 :] or None)

    # ------------------------------------------------------------------ pieces


def _in_join(
    error: ConfigurationError, name: str, alias: str, readable: Mapping[str, str]
) -> SqlError:
    def clean(value: Any) -> Any:
        if isinstance(value, str):
            for internal, text in readable.items():
                value = value.replace(internal, text)
            return value
        if isinstance(value, (tuple, list)):
            return type(value)(clean(v) for v in value)
        return value

    where = f"in the lookup join of {name!r} AS {alias}"
    reason = f"{where}: {clean(error.reason)}" if error.reason else where
    return SqlError(error.option, clean(error.value), clean(error.allowed), reason=reason)
