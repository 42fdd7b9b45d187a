"""Flink's ``CREATE TABLE ... WITH (...)`` as a lookup table definition.

The column list is the dim schema; ``PRIMARY KEY (...) NOT ENFORCED`` is the lookup key for
connectors that look rows up by a fixed key. ``'connector'`` picks how rows are looked up
(:mod:`asyncio_lookup.spark.sql.connectors`); every ``lookup.*`` option is a table option.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from asyncio_lookup.lookup import LookupOptions
from asyncio_lookup.lookup.flink_options import upgrade
from asyncio_lookup.spark.sql.computed import ComputedColumn, computed_column
from asyncio_lookup.spark.sql.connectors import (
    ConnectorPlan,
    connector_allowed,
    plan_connector,
    shown,
)
from asyncio_lookup.spark.sql.parse import SqlError, has_with_options
from asyncio_lookup.spark.sql.primary_key import checked
from asyncio_lookup.spark.table import LookupTable

log = logging.getLogger(__name__)

_TEXT_TYPES = {
    exp.DataType.Type.VARCHAR,
    exp.DataType.Type.CHAR,
    exp.DataType.Type.NVARCHAR,
    exp.DataType.Type.NCHAR,
}


@dataclass
class TableDefinition:
    """A lookup table known to a :class:`LookupSQL`: from DDL, or a registered LookupTable.

    ``key`` is the fixed lookup key (dim-schema order), or ``None`` when the connector looks
    rows up by whichever dim columns a join's ``ON`` equates (PostgreSQL). Such a table builds
    one :class:`LookupTable` per key (each with its own cache and metrics).
    """

    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...] | None
    primary_key: tuple[str, ...] = ()
    #: computed columns (``nominal_age AS age + 1``), evaluated on each looked-up row
    computed: tuple[ComputedColumn, ...] = ()
    #: every column (physical and computed) in DDL order
    column_order: tuple[str, ...] = ()
    #: the physical columns' Spark SQL types
    types: Mapping[str, str] = field(default_factory=dict)
    plan: ConnectorPlan | None = None
    schema: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    tables: dict[tuple[str, ...], LookupTable] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def visible(self) -> tuple[str, ...]:
        """The columns a query sees: physical and computed, in DDL order."""
        return self.column_order or self.columns + tuple(c.name for c in self.computed)

    def data_types(self) -> dict[str, exp.DataType]:
        """The physical columns' types, as sqlglot types (unparsable ones left out)."""
        out = {}
        for column, text in self.types.items():
            try:
                out[column] = exp.DataType.build(text, dialect="spark")
            except Exception:
                continue
        return out

    @classmethod
    def of_table(cls, table: LookupTable, name: str) -> TableDefinition:
        declared = getattr(table.connector, "key_columns", None)
        key = tuple(declared) if isinstance(declared, (list, tuple)) and declared else None
        types = {f.name: f.dataType.simpleString() for f in table.schema.fields}
        definition = cls(name=name, columns=tuple(table.schema.names), key=key, types=types)
        definition.tables[key or ()] = table
        return definition

    def lookup_table(self, key: tuple[str, ...]) -> LookupTable:
        """The LookupTable a join with this key runs through (built once per key)."""
        slot = key if self.key is None else self.key
        with self._lock:
            table = self.tables.get(slot) or self.tables.get(())
            if table is None:
                assert self.plan is not None and self.schema is not None
                source = checked(self.plan.build(slot), self.name, slot, self.primary_key)
                table = LookupTable(self.name, self.schema, source, options=dict(self.options))
                self.tables[slot] = table
            return table

    def default_table(self) -> LookupTable:
        """The table ``LookupSQL.table(name)`` returns: its fixed key's, the PRIMARY KEY's, or
        the one built for the first join."""
        if self.key is not None or () in self.tables:
            return self.lookup_table(self.key or ())
        if self.primary_key:
            return self.lookup_table(self.primary_key)
        if self.tables:
            return next(iter(self.tables.values()))
        raise SqlError(
            "table",
            self.name,
            "a lookup table that has a PRIMARY KEY or has been joined",
            reason=f"{self.name!r} looks rows up by the columns each join's ON equates and has "
            "no PRIMARY KEY; its LookupTable exists once a query joins it",
        )

    def __repr__(self) -> str:
        connector = self.plan.name if self.plan is not None else "python"
        return f"TableDefinition(name={self.name!r}, connector={connector!r}, key={self.key!r})"


def _column_type(kind: exp.DataType) -> str:
    """A Flink DDL type as Spark's. Flink's ``TIMESTAMP(p)`` has no time zone (Spark's
    TIMESTAMP_NTZ; the Spark dialect reads it as Spark's TIMESTAMP, an instant), its
    ``TIMESTAMP_LTZ(p)`` is an instant (Spark's TIMESTAMP)."""
    kind = kind.copy()
    for node in kind.find_all(exp.DataType):
        if node.this in _TEXT_TYPES:
            node.set("this", exp.DataType.Type.TEXT)
            node.set("expressions", [])
        elif node.this == exp.DataType.Type.TIMESTAMPTZ:
            node.set("this", exp.DataType.Type.TIMESTAMPNTZ)
            node.set("expressions", [])
        elif node.this == exp.DataType.Type.TIMESTAMPLTZ:
            node.set("this", exp.DataType.Type.TIMESTAMPTZ)  # written TIMESTAMP for Spark
            node.set("expressions", [])
    return kind.sql(dialect="spark")


def _literal(value: exp.Expr, option: str) -> str:
    if isinstance(value, exp.Literal) and value.is_string:
        return str(value.this)
    if isinstance(value, exp.Literal):  # Flink takes quoted values only
        raise SqlError(
            option,
            value.sql(),
            f"a quoted string: '{option}' = '{value.this}'",
            reason="a bare number has no unit (a duration would be read as milliseconds)",
        )
    if isinstance(value, exp.Boolean):
        return "true" if value.this else "false"
    raise SqlError(option, "<expression>", "a quoted string: 'option' = 'value'")


def _options(properties: exp.Properties | None) -> tuple[dict[str, str], bool]:
    options: dict[str, str] = {}
    temporary = False
    for prop in properties.expressions if properties is not None else []:
        if isinstance(prop, exp.TemporaryProperty):
            temporary = True
            continue
        if isinstance(prop, exp.SchemaCommentProperty):  # COMMENT '...': metadata only
            continue
        if not isinstance(prop, exp.Property) or not isinstance(prop.this, exp.Literal):
            raise SqlError(
                "WITH",
                prop.sql(dialect="spark")[:60],
                "WITH ('option' = 'value', ...) options of a lookup table (no PARTITIONED BY, "
                "LIKE or other clauses)",
            )
        name = str(prop.this.this)
        value = _literal(prop.args["value"], name)
        if any(name.lower() == other.lower() for other in options):  # names match in any case
            raise SqlError(name, shown(name, value), "each option once", reason="given twice")
        options[name] = value
    return options, temporary


def is_lookup_ddl(create: exp.Create, sql: str | None = None) -> bool:
    """True for ``CREATE TABLE ... WITH (...)`` (Flink DDL, not Spark's): a ``'connector'``
    option, or a ``WITH (`` options clause, which Spark's CREATE TABLE does not have."""
    if str(create.args.get("kind") or "").upper() != "TABLE":
        return False
    properties = create.args.get("properties")
    if any(
        isinstance(p, exp.Property)
        and isinstance(p.this, exp.Literal)
        and str(p.this.this).lower() == "connector"
        for p in (properties.expressions if properties is not None else [])
    ):
        return True
    return sql is not None and has_with_options(sql)


def table_name(table: exp.Table, what: str) -> str:
    """An unqualified table name (lookup tables live in no database)."""
    if table.args.get("db") or table.args.get("catalog"):
        raise SqlError(
            what, table.sql(dialect="spark"), "an unqualified name: lookup tables have no database"
        )
    return table.name


def definition_from_ddl(create: exp.Create) -> TableDefinition:
    """Validate a lookup table's DDL and build its definition (the connector is checked too)."""
    schema = create.this
    if not isinstance(schema, exp.Schema) or not isinstance(schema.this, exp.Table):
        raise SqlError("CREATE TABLE", "", "CREATE TABLE name (column type, ...) WITH (...)")
    name = table_name(schema.this, "CREATE TABLE")
    columns: list[tuple[str, str]] = []
    primary: list[str] = []
    computed: list[exp.ColumnDef] = []
    order: list[str] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            order.append(item.name)
            kind = item.args.get("kind")
            if kind is None:
                computed.append(item)
                continue
            not_null = ""
            for constraint in item.args.get("constraints") or []:
                if isinstance(constraint.args.get("kind"), exp.PrimaryKeyColumnConstraint):
                    primary.append(item.name)
                elif isinstance(
                    kind_of := constraint.args.get("kind"), exp.NotNullColumnConstraint
                ) and not kind_of.args.get("allow_null"):  # an explicit NULL: nullable
                    not_null = " NOT NULL"
            if any(
                node.this in (exp.DataType.Type.TIME, exp.DataType.Type.TIMETZ)
                for node in kind.find_all(exp.DataType)
            ):  # the Spark dialect writes TIME as TIMESTAMP: another type, silently
                raise SqlError(
                    item.name,
                    kind.sql(),
                    "a type the lookup join converts: for a time of day, STRING (CAST it in "
                    "the SELECT)",
                    reason="TIME columns are not supported",
                )
            columns.append((item.name, _column_type(kind) + not_null))
        elif isinstance(item, exp.PrimaryKey):
            primary.extend(e.name for e in item.expressions)
        elif isinstance(item, exp.Constraint) and any(
            isinstance(e, exp.PrimaryKey) for e in item.expressions
        ):  # CONSTRAINT pk_name PRIMARY KEY (...) NOT ENFORCED
            for constraint in item.expressions:
                if isinstance(constraint, exp.PrimaryKey):
                    primary.extend(e.name for e in constraint.expressions)
        else:
            raise SqlError(
                "CREATE TABLE",
                item.sql(dialect="spark")[:80],
                "column definitions and PRIMARY KEY (...) NOT ENFORCED",
            )
    names = [c for c, _ in columns]
    lowered = [c.lower() for c in names]
    for column in primary:
        if column.lower() not in lowered:
            raise SqlError("PRIMARY KEY", column, f"physical columns of {name!r}: {names}")
    virtual = tuple(computed_column(item, names, name) for item in computed)
    every = lowered + [c.name.lower() for c in virtual]
    if len(set(every)) != len(every):
        raise SqlError("CREATE TABLE", names, "distinct column names")
    options, _ = _options(create.args.get("properties"))
    connector = next((v for k, v in options.items() if k.lower() == "connector"), None)
    if connector is None:
        raise SqlError(
            "connector",
            None,
            connector_allowed(),
            reason=f"CREATE TABLE {name} ... WITH (...) needs 'connector' = '...' (a lookup "
            "table's connector)",
        )
    lookup = _lookup_options(name, options)
    rest = {
        k: v
        for k, v in options.items()
        if k.lower() != "connector" and not k.lower().startswith("lookup.")
    }
    try:
        plan = plan_connector(connector, rest, tuple(names), dict(columns))
    except TypeError as error:  # a registered factory's required parameter is missing
        raise SqlError(
            "WITH", connector, "the connector's required options", reason=str(error)
        ) from None
    if plan.ignored:
        log.warning(
            "CREATE TABLE %s: options only other Flink operators read (a scan, a sink or a "
            "format) are ignored by the lookup join: %s",
            name,
            ", ".join(f"{k!r}" for k in plan.ignored),
        )
    ordered_pk = tuple(c for c in names if c in primary)
    key = plan.fixed_key if plan.fixed_key is not None else None
    if key is None and plan.flexible is False:
        key = ordered_pk or None
        if key is None:  # it would look rows up by whatever a join's ON binds: wrong rows
            raise SqlError(
                "PRIMARY KEY",
                None,
                "PRIMARY KEY (...) NOT ENFORCED naming the columns the connector looks rows up "
                "by, or a connector that takes key_columns or declares them",
                reason=f"connector {connector!r} of {name!r} neither takes nor declares its key "
                "columns",
            )
    ddl = ", ".join(f"`{c.replace('`', '``')}` {t}" for c, t in columns)
    definition = TableDefinition(
        name=name,
        columns=tuple(names),
        key=key,
        primary_key=ordered_pk,
        computed=virtual,
        column_order=tuple(order),
        types={c: t.removesuffix(" NOT NULL") for c, t in columns},
        plan=plan,
        schema=ddl,
        options=lookup,
    )
    # Build one table now so that a bad connector setting fails at CREATE, not at the join.
    try:
        definition.lookup_table(key or ordered_pk or (names[0],))
    except TypeError as error:
        raise SqlError(
            "WITH", connector, "the connector's required options", reason=str(error)
        ) from None
    if key is None and not ordered_pk:
        definition.tables.clear()  # a flexible table's key comes from its first join
    return definition


def _lookup_options(table: str, options: Mapping[str, str]) -> dict[str, str]:
    """The table's ``lookup.*`` options, Flink's deprecated JDBC cache names rewritten to the
    current ones (one WARN naming them), validated."""
    given = {k: v for k, v in options.items() if k.lower().startswith("lookup.")}
    upgraded = upgrade(given)
    if upgraded.renamed or upgraded.notes:
        renamed = ", ".join(f"{old!r} -> {new!r}" for old, new in upgraded.renamed)
        log.warning(
            "CREATE TABLE %s: deprecated Flink option(s) %s; use the new name(s) instead%s",
            table,
            renamed or "without effect",
            "".join(f"; {note}" for note in upgraded.notes),
        )
    LookupOptions.from_dict(upgraded.options)
    return upgraded.options


def describe_options(options: Mapping[str, Any]) -> dict[str, str]:
    """Options for display, secrets masked."""
    return {k: shown(k, str(v)) for k, v in options.items()}
