"""``LookupSQL``: Flink SQL lookup joins on a Spark session."""

from __future__ import annotations

import re
import threading
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType
from sqlglot import exp

from asyncio_lookup.spark.metrics import register_result
from asyncio_lookup.spark.sql.ddl import (
    TableDefinition,
    definition_from_ddl,
    is_lookup_ddl,
    table_name,
)
from asyncio_lookup.spark.sql.parse import (
    SqlError,
    check_hint_blocks,
    parse_statement,
    to_spark_sql,
)
from asyncio_lookup.spark.sql.translate import Translator, system_time
from asyncio_lookup.spark.table import LookupTable


class LookupSQL:
    """Runs SQL statements on ``spark`` with Flink's lookup joins, mirroring ``spark.sql``.

    ``sql(statement)`` takes one statement: ``CREATE [TEMPORARY] TABLE ... WITH ('connector' =
    ...)`` and ``DROP [TEMPORARY] TABLE`` manage lookup tables; queries may join them with
    ``[LEFT] JOIN T FOR SYSTEM_TIME AS OF o.proc_time [AS] c ON ...`` and steer the joins with
    ``/*+ LOOKUP('table'='c', ...) */`` and ``SHUFFLE_HASH(c)``; everything else is Spark SQL.
    Queries return lazily; every error is raised by ``sql()`` before any Spark job.

    ``skew``: hot-key handling of ``SHUFFLE_HASH`` joins, as ``lookup_join(skew=...)``, but for
    one in key order, which keeps each key on one task. It is
    off by default because detecting hot keys samples the probe side with a Spark job when the
    statement is planned; pass ``True`` (or :class:`SkewOptions`) to accept that job.
    """

    def __init__(self, spark: SparkSession, *, skew: Any = False) -> None:
        self.spark = spark
        self._tables: dict[str, TableDefinition] = {}
        self._lock = threading.Lock()
        self._translator = Translator(spark, self._definition, skew=skew)

    # ------------------------------------------------------------------ catalog

    def _definition(self, name: str) -> TableDefinition | None:
        with self._lock:
            return self._tables.get(name.lower())

    def register(self, table: LookupTable, name: str | None = None) -> LookupTable:
        """Make a :class:`LookupTable` built in Python joinable as ``name`` (default its name)."""
        if not isinstance(table, LookupTable):
            raise SqlError("table", type(table).__name__, "a LookupTable")
        name = name if name is not None else table.name
        if not isinstance(name, str) or not name.strip():
            raise SqlError("name", name, "a non-empty table name")
        with self._lock:
            self._tables[name.strip().lower()] = TableDefinition.of_table(table, name.strip())
        return table

    def table(self, name: str) -> LookupTable:
        """The :class:`LookupTable` behind lookup table ``name`` (for ``.metrics()``)."""
        definition = self._definition(name)
        if definition is None:
            raise SqlError("table", name, self._known())
        return definition.default_table()

    def tables(self) -> list[str]:
        """The lookup tables' names."""
        with self._lock:
            return sorted(d.name for d in self._tables.values())

    def _known(self) -> str:
        names = self.tables()
        return "a lookup table: " + (", ".join(repr(n) for n in names) if names else "none yet")

    # ------------------------------------------------------------------ statements

    def sql(self, statement: str) -> DataFrame:
        """Run one statement; a query returns its (lazy) DataFrame, DDL an empty one."""
        tree = parse_statement(statement)
        if isinstance(tree, exp.Create) and is_lookup_ddl(tree, statement):
            return self._create(tree)
        if isinstance(tree, exp.Drop) and str(tree.args.get("kind") or "").upper() == "TABLE":
            dropped = self._drop(tree)
            if dropped is not None:
                return dropped
        if any(system_time(t) for t in tree.find_all(exp.Table)):
            check_hint_blocks(statement)  # the rewritten statement keeps the first block only
        if not self._translator.translate(tree):
            return self.spark.sql(statement)
        if isinstance(tree, exp.Create) and str(tree.args.get("kind") or "").upper() == "VIEW":
            _make_temporary(tree)
            return self.spark.sql(to_spark_sql(tree))
        result = self._query(to_spark_sql(tree), self._translator.frames)
        register_result(result, self._translator.observed)  # the tables' metrics of its actions
        return result

    def _query(self, text: str, frames: dict[str, DataFrame]) -> DataFrame:
        """On Spark Connect, the lookup joins' DataFrames go with the query (``spark.sql``'s
        DataFrame arguments) instead of through their temporary views: the server then reports
        their observed metrics to this client (it does not for a view's)."""
        if not frames or not type(self.spark).__module__.startswith("pyspark.sql.connect"):
            return self.spark.sql(text)
        text = text.replace("{", "{{").replace("}", "}}")
        for name in frames:
            text = re.sub(rf"`?\b{name}\b`?", "{" + name + "}", text)
        return self.spark.sql(text, None, **frames)

    def _empty(self) -> DataFrame:
        return self.spark.createDataFrame([], StructType([]))

    def _create(self, create: exp.Create) -> DataFrame:
        definition = definition_from_ddl(create)
        key = definition.name.lower()
        with self._lock:
            if key in self._tables and not create.args.get("replace"):
                if create.args.get("exists"):
                    return self._empty()
                raise SqlError(
                    "CREATE TABLE",
                    definition.name,
                    "a new name, CREATE TABLE IF NOT EXISTS, or DROP TABLE first",
                    reason="a lookup table of this name exists",
                )
            self._tables[key] = definition
        return self._empty()

    def _drop(self, drop: exp.Drop) -> DataFrame | None:
        tables = drop.args.get("tables") or []
        if len(tables) != 1:
            return None
        name = table_name(tables[0], "DROP TABLE")
        with self._lock:
            if self._tables.pop(name.lower(), None) is not None:
                return self._empty()
        if drop.args.get("temporary"):
            if drop.args.get("exists"):
                return self._empty()
            raise SqlError("DROP TEMPORARY TABLE", name, self._known(), reason="no such table")
        return None

    def __repr__(self) -> str:
        return f"LookupSQL(tables={self.tables()!r})"


def _make_temporary(create: exp.Create) -> None:
    """A view over lookup joins is a temporary view (it refers to temporary views)."""
    properties = create.args.get("properties")
    existing = properties.expressions if properties is not None else []
    if not any(isinstance(p, exp.TemporaryProperty) for p in existing):
        create.set("properties", exp.Properties(expressions=[exp.TemporaryProperty(), *existing]))
