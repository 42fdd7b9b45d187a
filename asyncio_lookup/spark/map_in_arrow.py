"""``DataFrame.mapInArrow`` for any column names.

PySpark's classic ``mapInArrow`` passes the input's columns as ``df[name]``, which reads a
name as a column path: a column named ``a.b`` (or holding a backtick) fails to resolve. Such
a DataFrame goes in with its columns renamed by position, and each batch gets the real names
back in the task before ``func`` sees it; the output's names are the schema's, as always.
Renamed columns are not resolved by Spark, so names given twice (``a.join(b)``) are refused
here as Spark refuses them otherwise: the task would read one value for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from asyncio_lookup.errors import ConfigurationError

ArrowFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _path_like(name: str) -> bool:
    return "." in name or "`" in name or name == "*"


@dataclass(frozen=True)
class _WithNames:
    """``func`` over batches whose columns are renamed to ``names`` first."""

    func: ArrowFunction
    names: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return self.func(batch.rename_columns(self.names) for batch in batches)


def map_in_arrow(df: DataFrame, func: ArrowFunction, schema: StructType) -> DataFrame:
    """``df.mapInArrow(func, schema)``, whatever ``df``'s column names are."""
    names = tuple(df.columns)
    if not any(_path_like(name) for name in names):
        return df.mapInArrow(func, schema)
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigurationError(
            "columns",
            repeated,
            "distinct column names in the input",
            "each is given more than once (a join's two sides?): select or rename one",
        )
    plain = df.toDF(*(f"_{position}" for position in range(len(names))))
    return plain.mapInArrow(_WithNames(func, names), schema)
