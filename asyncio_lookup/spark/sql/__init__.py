"""SQL front end: Flink SQL lookup joins (``FOR SYSTEM_TIME AS OF``, LOOKUP / SHUFFLE_HASH hints,
DDL ``WITH`` options) on a Spark session. See :class:`LookupSQL`."""

from asyncio_lookup.spark.sql.parse import SqlError, SqlParseError
from asyncio_lookup.spark.sql.session import LookupSQL

__all__ = ["LookupSQL", "SqlError", "SqlParseError"]
