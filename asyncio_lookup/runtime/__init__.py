"""The async wait operator (FLIP-232) and its DataStream-style API. Imports no Spark, no lookup."""

from asyncio_lookup.runtime.batch_function import AsyncBatchFunction
from asyncio_lookup.runtime.batch_operator import AsyncBatchWaitOperator
from asyncio_lookup.runtime.datastream import AsyncDataStream, AsyncStream
from asyncio_lookup.runtime.elements import OutputMode, Watermark
from asyncio_lookup.runtime.function import AsyncFunction
from asyncio_lookup.runtime.loop import new_event_loop, process_loop
from asyncio_lookup.runtime.metrics import OperatorMetrics
from asyncio_lookup.runtime.operator import AsyncWaitOperator
from asyncio_lookup.runtime.retry import (
    AsyncRetryPredicate,
    AsyncRetryStrategy,
    RetryPredicates,
    RetryStrategies,
)

__all__ = [
    "AsyncBatchFunction",
    "AsyncBatchWaitOperator",
    "AsyncDataStream",
    "AsyncFunction",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "AsyncStream",
    "AsyncWaitOperator",
    "OperatorMetrics",
    "OutputMode",
    "RetryPredicates",
    "RetryStrategies",
    "Watermark",
    "new_event_loop",
    "process_loop",
]
