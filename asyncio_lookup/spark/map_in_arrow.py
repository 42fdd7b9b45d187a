"""``DataFrame.mapInArrow`` for any column names.

PySpark's classic ``mapInArrow`` passes the input's columns as ``df[name]``, which reads a
name as a column path: a column named ``a.b`` (or holding a backtick) fails to resolve. Such
a DataFrame goes in with its columns renamed by position, and each batch gets the real names
back in the task before ``func`` sees it; the output's names are the schema's, as always.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

ArrowFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _path_like(name: str) -> bool:
    return "." in name or "`" in name


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
    plain = df.toDF(*(f"_{position}" for position in range(len(names))))
    return plain.mapInArrow(_WithNames(func, names), schema)
