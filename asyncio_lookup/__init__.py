"""asyncio-lookup: Flink-grade async I/O and lookup joins for PySpark, in Python on asyncio.

The DataStream-style API (``AsyncDataStream``, ``AsyncFunction``, retry strategies) and the
lookup layer (lookup functions, caches, options, hints) are re-exported here and import without
pyspark. The PySpark adapter lives in :mod:`asyncio_lookup.spark`.
"""

from asyncio_lookup import lookup as _lookup
from asyncio_lookup import runtime as _runtime
from asyncio_lookup.errors import AsyncLookupError, ConfigurationError, HintError
from asyncio_lookup.lookup import *  # noqa: F403
from asyncio_lookup.runtime import *  # noqa: F403

__version__ = "0.1.0"
__all__ = [
    "AsyncLookupError",
    "ConfigurationError",
    "HintError",
    *_runtime.__all__,
    *_lookup.__all__,
]
