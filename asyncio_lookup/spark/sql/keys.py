"""A lookup join's ``ON`` -> its lookup key and the conditions left to filter looked-up rows.

An equality ``<dim column> = <probe expression or constant>`` binds that dim column of the key.
The dim side may also be a cast that cannot change which values are equal (docs/semantics.md,
"Lookup keys through casts"): a cast to the column's own type, a widening within the integral
family (TINYINT -> SMALLINT -> INT -> BIGINT) or the decimals (to a type with at least as many
integral and fractional digits), or a string to STRING. The probe value is then converted to the
column's type with ``try_cast`` to look up (a value out of the column's range is a miss, as the
equality on the cast is false for every row), and the equality as written stays as a filter on
the looked-up rows (a fractional probe value truncated to an integral key finds rows the
filter then drops). Every other cast on the dim side is an error; conditions Flink refuses
(``IS NOT DISTINCT FROM`` and its ``OR ... IS NULL`` spelling) are named.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from asyncio_lookup.spark.sql.parse import SqlError, to_spark_sql
from asyncio_lookup.spark.sql.scope import Resolver, Source, conjuncts

_T = exp.DataType.Type
_INTEGRAL = (_T.TINYINT, _T.SMALLINT, _T.INT, _T.BIGINT)
_STRINGS = {_T.TEXT, _T.VARCHAR, _T.CHAR, _T.NVARCHAR, _T.NCHAR}
_DIGITS = {_T.TINYINT: 3, _T.SMALLINT: 5, _T.INT: 10, _T.BIGINT: 19}
CAST_RULE = (
    "casts that cannot change equality: to the column's own type, TINYINT -> SMALLINT -> INT -> "
    "BIGINT, an integral type or DECIMAL(p, s) -> a DECIMAL with at least as many integral and "
    "fractional digits, a string type -> STRING; otherwise cast the probe side instead"
)
NOT_DISTINCT = (
    "a lookup join's ON cannot contain 'a IS NOT DISTINCT FROM b' (or its spelling "
    "'(a = b) OR (a IS NULL AND b IS NULL)', or a <=> b), as in Flink: a NULL key is never "
    "looked up"
)


def _sql(node: exp.Expr) -> str:
    return to_spark_sql(node)


@dataclass(frozen=True)
class KeyColumn:
    """One bound key column: the dim column and the probe expression (or constant) it equals."""

    column: str
    expression: exp.Expr


def _decimal_digits(kind: exp.DataType) -> tuple[int, int]:
    params = [int(p.name) for p in kind.expressions if p.name.isdigit()]
    precision = params[0] if params else 10
    scale = params[1] if len(params) > 1 else 0
    return precision - scale, scale


def exact_cast(source: exp.DataType | None, target: exp.DataType) -> bool:
    """True when ``CAST(x AS target)`` keeps equality for every ``x`` of type ``source``."""
    if source is None:
        return False
    if source.this in _STRINGS and target.this in (_T.TEXT, _T.VARCHAR) and not target.expressions:
        return True
    if source.this in _STRINGS or target.this in _STRINGS:
        return False
    if source.this in _INTEGRAL and target.this in _INTEGRAL:
        return _INTEGRAL.index(source.this) <= _INTEGRAL.index(target.this)
    if source.this in _DIGITS and target.this is _T.DECIMAL:
        return _decimal_digits(target)[0] >= _DIGITS[source.this]
    if source.this is _T.DECIMAL and target.this is _T.DECIMAL:
        whole, fraction = _decimal_digits(source)
        whole2, fraction2 = _decimal_digits(target)
        return whole2 >= whole and fraction2 >= fraction
    return source == target


def _unwrap(node: exp.Expr) -> exp.Expr:
    """``node`` without the parentheses around it (``((d.id))`` -> ``d.id``)."""
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _not_distinct_spelling(part: exp.Or) -> bool:
    """True for exactly ``(a = b) OR (a IS NULL AND b IS NULL)``, operands in either order."""
    sides = (_unwrap(part.this), _unwrap(part.expression))
    for eq, nulls in (sides, sides[::-1]):
        if not isinstance(eq, exp.EQ) or not isinstance(nulls, exp.And):
            continue
        checks = (_unwrap(nulls.this), _unwrap(nulls.expression))
        if not all(
            isinstance(c, exp.Is) and isinstance(_unwrap(c.expression), exp.Null) for c in checks
        ):
            continue
        a, b = _unwrap(eq.this), _unwrap(eq.expression)
        first, second = (_unwrap(c.this) for c in checks)
        if (first == a and second == b) or (first == b and second == a):
            return True
    return False


def _null_safe(part: exp.Expr, resolver: Resolver, dim: Source) -> bool:
    """``a <=> b`` / ``a IS NOT DISTINCT FROM b`` or ``(a = b) OR (a IS NULL AND b IS NULL)``
    over a dim column (any other OR, such as ``d.tier = o.tier OR d.tier IS NULL``, is an
    ordinary condition)."""
    if isinstance(part, exp.NullSafeEQ):
        return _refers_to(part, resolver, dim)
    if isinstance(part, exp.Or) and _not_distinct_spelling(part):
        return _refers_to(part, resolver, dim)
    return False


def _columns(expression: exp.Expr) -> list[exp.Column]:
    """The columns of ``expression`` outside its subqueries (theirs are the subquery's)."""
    nodes = expression.walk(prune=lambda node: isinstance(node, exp.Query))
    return [node for node in nodes if isinstance(node, exp.Column)]


def _refers_to(expression: exp.Expr, resolver: Resolver, dim: Source) -> bool:
    return any(resolver.resolve(c) is dim for c in _columns(expression))


class KeyFinder:
    """Finds the lookup key of one join. ``physical``: the dim columns a key may bind (computed
    columns are filters); ``fixed``: the key a connector always looks up by, if any;
    ``types``: the dim columns' types (for casts)."""

    def __init__(
        self,
        table: str,
        resolver: Resolver,
        dim: Source,
        physical: tuple[str, ...],
        fixed: tuple[str, ...] | None,
        types: dict[str, exp.DataType],
    ) -> None:
        self.table, self.resolver, self.dim = table, resolver, dim
        self.physical, self.fixed, self.types = physical, fixed, types

    def _dim_column(self, side: exp.Expr) -> tuple[str, exp.DataType | None] | None:
        """The dim column ``side`` is (through an exact cast: with the type to convert the
        probe value to), or None when ``side`` is not a dim column."""
        cast = None
        side = _unwrap(side)
        if isinstance(side, (exp.Cast, exp.TryCast)):
            cast, side = side, _unwrap(side.this)
        if not isinstance(side, exp.Column) or self.resolver.resolve(side) is not self.dim:
            return None
        column = self.dim.field(side.name)
        if column is None or column not in self.physical:
            return None
        if cast is None:
            return column, None
        source = self.types.get(column)
        if not exact_cast(source, cast.to):
            raise SqlError(
                "ON",
                _sql(cast),
                CAST_RULE,
                reason=f"in the lookup join of {self.table!r}: {column!r} is "
                f"{_sql(source) if source is not None else 'of an unknown type'}, and this cast "
                "can make unequal values equal (or equal ones unequal)",
            )
        return column, (source if source != cast.to else None)

    def _bind(self, part: exp.Expr) -> tuple[str, exp.Expr, bool] | None:
        """(dim column, probe expression, whether ``part`` must also filter the rows)."""
        if not isinstance(part, exp.EQ):
            return None
        left, right = _unwrap(part.this), _unwrap(part.expression)
        for this, other in ((left, right), (right, left)):
            if _refers_to(other, self.resolver, self.dim) or other.find(
                exp.Query, exp.AggFunc, exp.Window
            ):
                continue
            found = self._dim_column(this)
            if found is None:
                continue
            column, convert = found
            self._check_probe_side(part, other)
            if isinstance(other, exp.Null) and column in self.types:  # D.id = NULL: no match
                other = exp.Cast(this=other.copy(), to=self.types[column].copy())
            elif convert is not None:
                return column, exp.TryCast(this=other.copy(), to=convert.copy(), safe=True), True
            return column, other, False
        return None

    def find(self, on: exp.Expr) -> tuple[list[KeyColumn], list[exp.Expr]]:
        """``ON`` -> (the key, dim-schema order not applied; the other conditions)."""
        self._check_qualifiers(on)
        candidates: list[tuple[str, exp.Expr, exp.Expr, bool]] = []
        residual: list[exp.Expr] = []
        for part in conjuncts(on):
            if _null_safe(part, self.resolver, self.dim):
                raise SqlError(
                    "ON", _sql(part), "equalities (=) and other conditions", NOT_DISTINCT
                )
            bound = self._bind(part)
            if bound is None:
                for referenced in _columns(part):
                    self.resolver.resolve(referenced)
                residual.append(part)
            else:
                candidates.append((bound[0], bound[1], part, bound[2]))
        chosen: dict[str, exp.Expr] = {}
        for column, other, part, filters in candidates:
            if column not in chosen and (self.fixed is None or column in self.fixed):
                chosen[column] = other
                if filters:
                    residual.append(part)
            else:
                residual.append(part)
        if self.fixed is not None:
            missing = [c for c in self.fixed if c not in chosen]
            if missing:
                raise SqlError(
                    "ON",
                    _sql(on),
                    f"equalities binding every key column of {self.table!r}: "
                    f"{list(self.fixed)} (to probe expressions or constants)",
                    reason=f"{missing} not bound",
                )
        if not chosen:
            raise SqlError(
                "ON",
                _sql(on),
                f"at least one equality between a column of {self.table!r} and a probe "
                "expression or a constant",
                reason="no lookup key" + self._why(residual),
            )
        return [KeyColumn(c, e) for c, e in chosen.items()], residual

    def _check_probe_side(self, part: exp.Expr, probe: exp.Expr) -> None:
        """Refuse a key whose value names a column of no source of this ``FROM`` (an outer
        query's, in a correlated subquery): the probe side is read on its own, where the
        outer query's columns do not exist."""
        for column in _columns(probe):
            if column.table and self.resolver.resolve(column) is None:
                raise SqlError(
                    "ON",
                    _sql(part),
                    "a key whose value comes from this join's own FROM (its probe side)",
                    reason=f"in the lookup join of {self.table!r}: "
                    f"{column.table}.{column.name} is a column of no source of this FROM (an "
                    "outer query's?); join that source into the probe side instead",
                )

    def _check_qualifiers(self, on: exp.Expr) -> None:
        """Refuse ``LookupTable.id`` in the ON of ``JOIN LookupTable ... AS D``: an aliased
        table's columns are the alias's (as in Flink and Spark)."""
        alias = self.dim.alias
        if alias.lower() == self.table.lower():
            return
        for column in on.find_all(exp.Column):
            if column.table.lower() == self.table.lower() and self.resolver.resolve(column) is None:
                raise SqlError(
                    "ON",
                    f"{column.table}.{column.name}",
                    f"{alias}.{column.name}",
                    reason=f"in the lookup join of {self.table!r}: the table is aliased as "
                    f"{alias}, so its columns are {alias}.<column>",
                )

    def _why(self, residual: list[exp.Expr]) -> str:
        """What in ``residual`` looks like an intended key and why it is not one."""
        for part in residual:
            if isinstance(part, exp.Or) and _refers_to(part, self.resolver, self.dim):
                return f": {_sql(part)!r} is an OR (a key is an AND of equalities)"
            if isinstance(part, exp.In) and _refers_to(part, self.resolver, self.dim):
                return f": {_sql(part)!r} is an IN list (a key is an AND of equalities)"
            if isinstance(part, exp.EQ) and _refers_to(part, self.resolver, self.dim):
                sides = (part.this, part.expression)
                dim_side = next(s for s in sides if _refers_to(s, self.resolver, self.dim))
                if all(_refers_to(s, self.resolver, self.dim) for s in sides):
                    continue
                other = sides[1] if dim_side is sides[0] else sides[0]
                if other.find(exp.Query) is not None:
                    return (
                        f": in {_sql(part)!r} the value is a subquery (a key's value is a probe "
                        "expression or a constant: join the subquery to the probe side first)"
                    )
                if other.find(exp.AggFunc, exp.Window) is not None:
                    return (
                        f": in {_sql(part)!r} the value is an aggregate or a window function "
                        "(a key's value is a probe expression or a constant)"
                    )
                if isinstance(dim_side, exp.Column):
                    return (
                        f": {_sql(dim_side)!r} is a computed column (a filter on the looked-up "
                        "rows, never a key)"
                    )
                return (
                    f": in {_sql(part)!r} the dim side is an expression, not a column (or a cast "
                    "that cannot change equality)"
                )
        return ""


def key_order(key: list[KeyColumn], columns: tuple[str, ...]) -> list[KeyColumn]:
    """The key in dim-schema order (the order lookups and connectors use)."""
    position = {c: i for i, c in enumerate(columns)}
    return sorted(key, key=lambda item: position[item.column])
