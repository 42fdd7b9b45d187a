"""The PySpark adapter: ``LookupTable``, ``lookup_join``, ``async_map``.

Spark's Python workers must run an interpreter that has this package and pyarrow: set
``PYSPARK_PYTHON`` (or ``spark.pyspark.python``) to ``sys.executable`` of your environment.
"""

from typing import TYPE_CHECKING

from asyncio_lookup._lazy import lazy_attributes
from asyncio_lookup.lookup.rate import RateLimit
from asyncio_lookup.spark.async_map import async_map, async_map_metrics
from asyncio_lookup.spark.failed_rows import split_failed
from asyncio_lookup.spark.job_metrics import JobMetrics
from asyncio_lookup.spark.join import lookup_join
from asyncio_lookup.spark.shuffle import SkewOptions
from asyncio_lookup.spark.table import LookupTable

if TYPE_CHECKING:
    from asyncio_lookup.spark.sql import LookupSQL

# Imported on first use: the SQL layer (sqlglot) would add about 60 ms of CPU to every Spark
# Python worker, which unpickles task code from this package and never parses SQL.
_LAZY = {"LookupSQL": "asyncio_lookup.spark.sql"}
__getattr__ = lazy_attributes(__name__, globals(), _LAZY)

__all__ = [
    "JobMetrics",
    "LookupSQL",
    "LookupTable",
    "RateLimit",
    "SkewOptions",
    "async_map",
    "async_map_metrics",
    "lookup_join",
    "split_failed",
]
