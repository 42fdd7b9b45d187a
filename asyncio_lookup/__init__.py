"""asyncio-lookup: Flink-grade async I/O and lookup joins for PySpark, in Python on asyncio.

Exported here, importing no pyspark: the DataStream-style API (``AsyncDataStream``,
``AsyncFunction``, retry strategies; :mod:`asyncio_lookup.runtime`), what a connector or cache
author needs (lookup functions, providers, caches, options, hints; :mod:`asyncio_lookup.lookup`)
and every exception (:mod:`asyncio_lookup.errors`). The PySpark adapter (``LookupTable``,
``lookup_join``, ``async_map``) is :mod:`asyncio_lookup.spark`; the built-in connectors are
:mod:`asyncio_lookup.connectors`.
"""

from asyncio_lookup import _native  # noqa: F401  (first: the compiled modules' fallback)
from asyncio_lookup import lookup as _lookup
from asyncio_lookup import runtime as _runtime
from asyncio_lookup.errors import (
    AsyncLookupError,
    CacheLoadError,
    ConfigurationError,
    DataFormatError,
    HintError,
    HttpStatusError,
    LookupFailedError,
    PermanentConnectionError,
    ResultTypeError,
    TransientError,
)
from asyncio_lookup.lookup import *  # noqa: F403
from asyncio_lookup.runtime import *  # noqa: F403

__version__ = "0.1.0"
__all__ = [
    "AsyncLookupError",
    "CacheLoadError",
    "ConfigurationError",
    "DataFormatError",
    "HintError",
    "HttpStatusError",
    "LookupFailedError",
    "PermanentConnectionError",
    "ResultTypeError",
    "TransientError",
    *_runtime.__all__,
    *_lookup.__all__,
]
