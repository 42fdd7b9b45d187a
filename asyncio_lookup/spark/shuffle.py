"""Hash lookup join on Spark (FLIP-204, docs/semantics.md §2.7): route each key's rows to one task.

The probe side gets a partition-id column computed by Spark expressions (no Python per row):
``pmod(xxhash64(key columns cast to a canonical type), n)``, or the connector's partitioner,
plus a salt for hot keys; ``repartitionById`` then sends each row to exactly that partition.
The same routing (:class:`PartitionRouting`) ships to the tasks, so a FULL cache can load only
the rows its partition can receive.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    CharType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    NullType,
    NumericType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
    YearMonthIntervalType,
)

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.join import JoinSpec
from asyncio_lookup.lookup.partitioning import (
    HashKind,
    HashPartitioner,
    KeyPartitioner,
    PartitionRouting,
    partitioner_of,
    salt_count,
)
from asyncio_lookup.spark.conf import conf_get
from asyncio_lookup.spark.metrics import observation_name
from asyncio_lookup.spark.rate_share import server_parallelism, task_slots
from asyncio_lookup.spark.schema import key_family
from asyncio_lookup.validation import parse_int, parse_number

log = logging.getLogger(__name__)

#: The probe side's partition-id column (added before the exchange, dropped by the join).
PARTITION_COLUMN = "__asyncio_lookup_partition"

_KINDS: dict[str, HashKind] = {
    "integral": "long",
    "float": "double",
    "double": "double",
    "string": "string",
    "binary": "binary",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "decimal": "decimal",
}
_CASTS = {"long": "bigint", "double": "double", "string": "string", "binary": "binary"}
_MICROS_A_DAY = 86_400_000_000


@dataclass(frozen=True)
class SkewOptions:
    """Hot-key handling of a shuffled lookup join (on by default).

    Before the join, the driver samples ``sample_fraction`` of the input (one Spark job over the
    input, counting at most ``max_hot_keys`` + 1 groups back) and treats a key holding at least
    ``threshold`` of the sampled rows with a key (a NULL key makes no lookup; default
    ``1 / (2 n)`` for ``n`` partitions) as hot.
    A hot key with share ``s`` is spread over ``ceil(2 s n)`` consecutive partitions (at most
    ``n``); each of them looks it up once, so it costs a few external calls instead of one but
    no task gets much more than its share of the rows. Streaming inputs are not sampled, nor
    inputs that run another lookup join or ``async_map`` (the sample would run it in full).
    ``min_sampled_rows``: a key seen fewer times in the sample is never hot (noise on small
    inputs).
    """

    enabled: bool = True
    threshold: float | None = None
    sample_fraction: float = 0.1
    max_hot_keys: int = 32
    min_sampled_rows: int = 5
    seed: int = 42

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigurationError("skew.enabled", self.enabled, "True or False")
        if self.threshold is not None:
            parse_number(
                "skew.threshold",
                self.threshold,
                above=0,
                maximum=1,
                allowed="a share in (0, 1] or None",
            )
        parse_number(
            "skew.sample_fraction",
            self.sample_fraction,
            above=0,
            maximum=1,
            allowed="a number in (0, 1]",
        )
        for name in ("max_hot_keys", "min_sampled_rows"):
            parse_int(f"skew.{name}", getattr(self, name), minimum=1, text=False)
        # Spark's sample() takes a long seed: anything else failed in the sampling job
        parse_int("skew.seed", self.seed, minimum=-(2**63), maximum=2**63 - 1, text=False)

    @classmethod
    def of(cls, value: SkewOptions | bool | Mapping[str, Any] | None) -> SkewOptions:
        """``True``/``None``: defaults; ``False``: off; a mapping of field names; an instance."""
        if isinstance(value, SkewOptions):
            return value
        if value is None or value is True:
            return cls()
        if value is False:
            return cls(enabled=False)
        if isinstance(value, Mapping):
            allowed = [f.name for f in fields(cls)]
            for name in value:
                if name not in allowed:
                    raise ConfigurationError(
                        "skew", name, f"one of {allowed}", reason="unknown skew option"
                    )
            return cls(**dict(value))
        raise ConfigurationError(
            "skew", value, "True, False, a dict of SkewOptions fields or SkewOptions"
        )


def _kind(left: DataType, dim: DataType) -> HashKind:
    return (
        _KINDS.get(key_family(left), "native") if key_family(left) == key_family(dim) else "native"
    )


def _canonical(column: Column, kind: str) -> Column:
    """``column`` (a key as it is looked up) as the dim side hashes its values
    (:func:`asyncio_lookup.lookup.partitioning.key_hash`): one value per key, whatever the
    column's exact type; in the session's time zone nowhere."""
    if kind == "double":
        value = column.cast("double")
        return F.when(value == 0.0, F.lit(0.0)).otherwise(value)  # -0.0 hashes as 0.0
    if kind in _CASTS:
        return column.cast(_CASTS[kind])
    if kind == "boolean":
        return column.cast("bigint")
    if kind == "date":
        return F.unix_date(column).cast("bigint")
    if kind == "timestamp":
        return F.unix_micros(column)
    if kind == "timestamp_ntz":  # fields, not unix_micros: a cast to TIMESTAMP reads the zone
        fields = (F.hour(column) * 3600 + F.minute(column) * 60).cast("bigint") * 1_000_000
        seconds = (F.date_part(F.lit("SECOND"), column) * 1_000_000).cast("bigint")
        return F.unix_date(column.cast("date")).cast("bigint") * _MICROS_A_DAY + fields + seconds
    if kind == "decimal":  # digits without trailing fraction zeros (decimal_text)
        text = column.cast("string")
        return F.when(text.contains("."), F.regexp_replace(text, r"\.?0+$", "")).otherwise(text)
    return column


def check_shuffle_partitions(value: Any) -> int:
    """``shuffle_partitions`` given to ``lookup_join``: an int >= 1."""
    return parse_int(
        "shuffle_partitions",
        value,
        minimum=1,
        allowed="an int >= 1, or None to size the exchange from the Spark conf",
        text=False,
    )


@dataclass(frozen=True)
class ExchangeSize:
    """How a shuffled join's exchange is sized (docs/semantics.md §2.7).

    ``partitions``: the partition ids the routing hashes keys into. ``exact``: each id is one
    task (``repartitionById``); otherwise the exchange is one adaptive execution may coalesce
    (``repartition(column)``, Spark's ``REPARTITION_BY_COL``): whole ids merge, so every key
    still reaches exactly one task. ``source``: where the number came from (for the docs' and
    the log's sake).
    """

    partitions: int
    exact: bool
    source: str


def _conf_int(conf: Any, key: str) -> int | None:
    value = str(conf_get(conf, key) or "").strip()
    return max(1, int(value)) if value.isdigit() else None


def _conf_true(conf: Any, key: str, default: bool) -> bool:
    value = str(conf_get(conf, key) or "").strip().lower()
    return default if not value else value == "true"


def exchange_size(df: DataFrame, override: int | None, *, full_cache: bool = False) -> ExchangeSize:
    """The exchange of a SHUFFLE_HASH join, read from ``spark.conf`` only, so the Python API,
    ``LookupSQL`` and Spark Connect agree (the input's partition count would need ``df.rdd``,
    which Connect does not have, and under adaptive execution would run the input's stages).

    - ``shuffle_partitions=N``: exactly N tasks.
    - Otherwise one partition per task slot of the application (``local[N]``, executors x
      cores, ``spark.cores.max``, ``spark.default.parallelism``: :func:`task_slots`): every
      task runs in the first wave, each key in one of them. On ``local[2]``, 500 rows took
      1.19x a join without the shuffle (1.93x with hot-key sampling), 72x with 200 tasks
      (``benchmarks/shuffle_size.py``); 200 partitions coalesced by adaptive execution took
      about 2x (the map side still writes 200).
    - When the conf does not say how many slots there are (a standalone cluster without
      ``spark.cores.max``: the application takes every core; dynamic allocation without a
      maximum), the application's default parallelism as its server plans it (the cores of
      its executors so far), except for a join without a FULL cache under dynamic allocation,
      whose executors come later: ``spark.sql.shuffle.partitions`` ids that adaptive execution
      coalesces to the data's size when it and partition coalescing are on (Spark's
      defaults), else exactly ``spark.sql.shuffle.partitions`` tasks, as Spark's own
      ``repartition(column)``; also when the plan does not tell the parallelism. A FULL
      cache, whose tasks each load the whole table to keep their partition's rows, always
      gets exact partitions.
    """
    if override is not None:
        return ExchangeSize(check_shuffle_partitions(override), True, "shuffle_partitions")
    session = df.sparkSession
    conf = session.conf
    slots, where = task_slots(conf, session)
    if slots is not None:
        return ExchangeSize(slots, True, f"task slots ({where})")
    dynamic = _conf_true(conf, "spark.dynamicAllocation.enabled", False)
    if full_cache or not dynamic:
        parallelism = server_parallelism(session)
        if parallelism is not None:
            return ExchangeSize(parallelism, True, f"the default parallelism ({where})")
    shuffle = _conf_int(conf, "spark.sql.shuffle.partitions") or 200
    adaptive = _conf_true(conf, "spark.sql.adaptive.enabled", True) and _conf_true(
        conf, "spark.sql.adaptive.coalescePartitions.enabled", True
    )
    if adaptive and not full_cache and not df.isStreaming:
        return ExchangeSize(shuffle, False, "spark.sql.shuffle.partitions, coalesced by AQE")
    return ExchangeSize(shuffle, True, "spark.sql.shuffle.partitions")


def _udf_partition(partitioner: KeyPartitioner, n: int, instants: frozenset[int]) -> Any:
    """The connector's ``partition`` as a UDF over the key columns (see :func:`_as_looked_up`);
    the positions in ``instants`` arrive as microseconds since the epoch."""

    def partition(*values: Any) -> int | None:
        if any(v is None for v in values):
            return None
        if instants:
            values = tuple(
                _EPOCH + datetime.timedelta(microseconds=v) if i in instants else v
                for i, v in enumerate(values)
            )
        return int(partitioner.partition(tuple(values), n)) % n

    return F.udf(partition, IntegerType(), useArrow=True)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _as_looked_up(column: Column, left: DataType, dim: DataType) -> Column:
    """A left key column as the task looks its values up, so that a connector's partitioner
    sees the key its dim rows are routed by: the dim column's DECIMAL scale (a value that does
    not fit is a miss there: NULL here), ``-0.0`` as ``0.0``. A TIMESTAMP, which the task
    looks up as an aware UTC datetime, is handed over as its microseconds (see
    :func:`_udf_partition`): a UDF would get a naive one in the session's time zone."""
    if isinstance(left, DecimalType) and isinstance(dim, DecimalType) and left != dim:
        return column.try_cast(dim)
    if isinstance(left, (DoubleType, FloatType)):
        return F.when(column == 0, F.lit(0.0).cast(left)).otherwise(column)
    return column


@dataclass(frozen=True)
class ShufflePlan:
    """The repartitioned probe side and the routing its tasks were given."""

    df: DataFrame
    routing: PartitionRouting


def _quoted(name: str) -> str:
    """``name`` as a column reference that reads it whole (``a.b`` is no struct field)."""
    return "`" + name.replace("`", "``") + "`"


#: Columns named so hold a row's position (LookupSQL's LEFT JOIN consolidation): never hashed.
ROW_ID_PREFIX = "__asyncio_lookup_row_id"

_HASHED_TYPES = (
    NumericType,
    StringType,
    CharType,
    VarcharType,
    BinaryType,
    BooleanType,
    DateType,
    TimestampType,
    TimestampNTZType,
    DayTimeIntervalType,
    YearMonthIntervalType,
    NullType,
)


def _hashable(data_type: DataType) -> bool:
    """Whether Spark's ``xxhash64`` takes the type: not maps, variants or geometries."""
    if isinstance(data_type, ArrayType):
        return _hashable(data_type.elementType)
    if isinstance(data_type, StructType):
        return all(_hashable(f.dataType) for f in data_type.fields)
    return isinstance(data_type, _HASHED_TYPES)


def _row_hash(df: DataFrame) -> Column:
    """A hash of a row's content, to spread a hot key's rows. Deterministic on purpose: a
    recomputed map task (a stage retry) must route each row as before, or the exchange loses
    and duplicates rows, so a row's position (``monotonically_increasing_id``, ``rand``) must
    not count. Identical rows stay together. Columns of types ``xxhash64`` does not take are
    left out (a GEOMETRY column failed every shuffled join)."""
    hashable = [
        F.col(_quoted(f.name))
        for f in df.schema.fields
        if _hashable(f.dataType) and not f.name.startswith(ROW_ID_PREFIX)
    ]
    return F.xxhash64(*hashable) if hashable else F.lit(0)


def plan_shuffle(
    df: DataFrame,
    spec: JoinSpec,
    dim_schema: StructType,
    source: Any,
    *,
    partitions: int | None = None,
    skew: SkewOptions | None = None,
    full_cache: bool = False,
    table: str = "",
) -> ShufflePlan:
    """Add :data:`PARTITION_COLUMN` and exchange ``df`` by it (the spec binds a left column)."""
    skew = skew or SkewOptions()
    size = exchange_size(df, partitions, full_cache=full_cache)
    n = size.partitions
    log.info("lookup join: SHUFFLE_HASH exchange of %d partitions (%s)", n, size.source)
    left_types = {f.name: f.dataType for f in df.schema.fields}
    dim_types = {f.name: f.dataType for f in dim_schema.fields}
    positions: list[int] = []
    kinds: list[HashKind] = []
    hashed: list[Column] = []
    key_columns: list[Column] = []
    instants: set[int] = set()  # TIMESTAMP keys, as the custom partitioner's UDF takes them
    for position, binding in enumerate(spec.keys):
        if binding.left_column is None:
            key_columns.append(F.lit(binding.literal))
            continue
        left, dim = left_types[binding.left_column], dim_types[binding.dim_column]
        kind = _kind(left, dim)
        positions.append(position)
        kinds.append(kind)
        looked_up = _as_looked_up(F.col(_quoted(binding.left_column)), left, dim)
        key_columns.append(looked_up)
        if isinstance(left, TimestampType):
            instants.add(position)
        hashed.append(_canonical(looked_up, kind))
    hasher = HashPartitioner(tuple(positions), tuple(kinds))
    key_hash = F.xxhash64(*hashed)
    custom = partitioner_of(source, spec.key_columns)
    partitioner: KeyPartitioner = custom if custom is not None else hasher
    if custom is None:
        base = F.pmod(key_hash, F.lit(n))
    else:
        spark_column = getattr(custom, "spark_column", None)
        expression = spark_column(key_columns, n) if callable(spark_column) else None
        if expression is None:
            udf_columns = [
                F.unix_micros(c) if i in instants else c for i, c in enumerate(key_columns)
            ]
            expression = _udf_partition(custom, n, frozenset(instants))(*udf_columns)
        # modulo n before the cast to int: a long outside [0, n) made ANSI mode fail the task
        base = F.pmod(expression.cast("long"), F.lit(n)).cast("int")
    hot = detect_hot_keys(df, spec, key_hash, n, skew, table) if skew.enabled and n > 1 else {}
    if hot:
        salt = F.lit(1)
        cases = None
        for value, count in hot.items():
            cases = (F if cases is None else cases).when(key_hash == F.lit(value), F.lit(count))
        salt = cases.otherwise(F.lit(1)) if cases is not None else salt
        spread = F.pmod(_row_hash(df), salt)
        partition = F.pmod(base + spread, F.lit(n))
    else:
        partition = base
    left_keys = [key_columns[p] for p in positions]
    if left_keys:  # a key holding a NULL is never looked up: any task may take its row
        has_null = left_keys[0].isNull()
        for column in left_keys[1:]:
            has_null = has_null | column.isNull()
        partition = F.when(has_null, F.pmod(_row_hash(df), F.lit(n))).otherwise(partition)
    routing = PartitionRouting(
        num_partitions=n,
        partitioner=partitioner,
        hasher=hasher,
        literals=tuple(
            (p, b.literal_key) for p, b in enumerate(spec.keys) if b.left_column is None
        ),
        hot=hot,
    )
    routed = df.withColumn(PARTITION_COLUMN, partition.cast("int"))
    if size.exact:
        shuffled = routed.repartitionById(n, PARTITION_COLUMN)
    else:  # rows of one partition id stay together; adaptive execution sizes the tasks
        shuffled = routed.repartition(F.col(PARTITION_COLUMN))
    return ShufflePlan(shuffled, routing)


_OBSERVED = "CollectMetrics " + observation_name("")  # the plan node observe() adds


def runs_lookups(df: DataFrame) -> bool:
    """Whether ``df``'s plan runs a lookup join or ``async_map`` of this library (an observed
    node of ours, views resolved). Classic: the analyzed plan; Spark Connect: the server's
    analysis (one round trip, no job)."""
    if type(df).__module__.startswith("pyspark.sql.connect"):
        text = df._explain_string(mode="extended")  # type: ignore[operator]
    else:
        text = df._jdf.queryExecution().analyzed().toString()
    return _OBSERVED in str(text)


def detect_hot_keys(
    df: DataFrame, spec: JoinSpec, key_hash: Column, n: int, skew: SkewOptions, table: str = ""
) -> dict[int, int]:
    """Sample the probe side on the driver; hot keys' hashes -> how many partitions to spread
    each over. One Spark job: a rollup counts every sampled key plus the total, and only the
    ``max_hot_keys`` largest groups come back."""
    if df.isStreaming:
        return {}
    if runs_lookups(df):
        log.warning(
            "lookup join %r (SHUFFLE_HASH): hot keys not looked for: its input runs another "
            "asyncio-lookup join or async_map, which sampling would run in full (its service "
            "called twice, its metrics counting one run). To spread hot keys, write the input "
            "out and read it back first; skew=False silences this.",
            table,
        )
        return {}
    threshold = skew.threshold if skew.threshold is not None else 1.0 / (2 * n)
    not_null = [F.col(_quoted(c)).isNotNull() for c in spec.left_key_columns]
    condition = not_null[0]
    for extra in not_null[1:]:
        condition = condition & extra
    sampled = df.filter(condition).select(key_hash.alias("h"))
    if skew.sample_fraction < 1:
        sampled = sampled.sample(fraction=skew.sample_fraction, seed=skew.seed)
    top = (
        sampled.rollup("h")
        .agg(F.count(F.lit(1)).alias("c"), F.grouping("h").alias("g"))
        .orderBy(F.desc("c"))
        .limit(skew.max_hot_keys + 1)
        .collect()
    )
    total = next((row["c"] for row in top if row["g"] == 1), 0)
    hot: dict[int, int] = {}
    for row in top:
        if row["g"] == 1 or row["c"] < skew.min_sampled_rows or total == 0:
            continue
        share = row["c"] / total
        count = salt_count(share, n)
        if share >= threshold and count > 1:
            hot[int(row["h"])] = count
    if hot:
        log.info(
            "lookup join: %d hot key(s) spread over up to %d of %d partitions",
            len(hot),
            max(hot.values()),
            n,
        )
    return hot


__all__ = [
    "PARTITION_COLUMN",
    "ExchangeSize",
    "ShufflePlan",
    "SkewOptions",
    "detect_hot_keys",
    "exchange_size",
    "plan_shuffle",
]
