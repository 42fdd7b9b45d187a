"""Computed columns of a lookup table's DDL (``nominal_age AS age + 1``).

As in Flink, a computed column is evaluated on each looked-up row, after the lookup: it can be
selected and tested in ``ON`` / ``WHERE`` like any column, but it is never part of the lookup key
(an equality on it filters the looked-up rows). Its expression is Spark SQL over the table's
physical columns; Flink's ``PROCTIME()`` is ``current_timestamp()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlglot import exp

from asyncio_lookup.spark.sql.parse import SqlError, to_spark_sql

_ALLOWED = "a computed column over the table's physical columns: name AS <expression>"


@dataclass(frozen=True)
class ComputedColumn:
    """``name AS expression``; ``depends``: the physical columns the expression reads."""

    name: str
    expression: exp.Expr
    depends: tuple[str, ...]

    def over(self, columns: Mapping[str, str]) -> str:
        """The expression as Spark SQL, each physical column replaced by the column name
        ``columns`` maps it to (the flat column that carries it in a join's output)."""
        copy = self.expression.copy()
        for column in list(copy.find_all(exp.Column)):
            target = columns[_physical(column.name, self.depends)]
            column.replace(exp.column(target, quoted=True))
        return to_spark_sql(copy)


def _physical(name: str, columns: Sequence[str]) -> str:
    lowered = name.lower()
    return next(c for c in columns if c.lower() == lowered)


def computed_column(item: exp.ColumnDef, physical: Sequence[str], table: str) -> ComputedColumn:
    """Validate one column definition without a type (a computed column) of ``table``."""
    constraint = next(
        (
            c.args.get("kind")
            for c in item.args.get("constraints") or []
            if isinstance(c.args.get("kind"), exp.ComputedColumnConstraint)
        ),
        None,
    )
    if constraint is None:
        raise SqlError(
            "CREATE TABLE",
            item.sql(dialect="spark")[:80],
            f"columns with a type, or {_ALLOWED} (metadata columns are not supported)",
        )
    expression = constraint.this.copy()
    if expression.find(exp.Query, exp.AggFunc, exp.Window) is not None:
        raise SqlError(
            item.name,
            expression.sql(dialect="spark")[:80],
            _ALLOWED + " (no subquery, aggregate or window)",
        )
    for call in list(expression.find_all(exp.Anonymous)):
        if str(call.this).upper() == "PROCTIME" and not call.expressions:
            call.replace(exp.CurrentTimestamp())
    lowered = {c.lower(): c for c in physical}
    depends: list[str] = []
    for column in expression.find_all(exp.Column):
        if column.table or column.name.lower() not in lowered:
            raise SqlError(
                item.name,
                expression.sql(dialect="spark")[:80],
                f"{_ALLOWED}; physical columns of {table!r}: {list(physical)}",
                reason=f"{column.sql(dialect='spark')!r} is not one (computed columns cannot "
                "refer to computed columns)",
            )
        if lowered[column.name.lower()] not in depends:
            depends.append(lowered[column.name.lower()])
    return ComputedColumn(item.name, expression, tuple(depends))
