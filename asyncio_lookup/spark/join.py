"""``lookup_join``: enrich a DataFrame by looking each row up in a :class:`LookupTable`."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import BooleanType, StringType, StructField, StructType

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.failed_rows import OnError
from asyncio_lookup.lookup.functions import Row
from asyncio_lookup.lookup.hint_resolve import (
    CONF_BUFFER_CAPACITY,
    CONF_KEY_ORDERED,
    CONF_OUTPUT_MODE,
    CONF_TIMEOUT,
    AsyncDefaults,
    ResolvedLookup,
    check_batch_wait,
    check_retry_timeout,
    resolve_lookup,
)
from asyncio_lookup.lookup.hints import HintsInput
from asyncio_lookup.lookup.join import JoinSpec, JoinType
from asyncio_lookup.lookup.options import CacheType, LookupOptions
from asyncio_lookup.lookup.providers import FullCachingLookupProvider
from asyncio_lookup.runtime.function import check_plain_callable
from asyncio_lookup.spark.conf import library_conf
from asyncio_lookup.spark.failed_rows import (
    DEFAULT_ERROR_COLUMN,
    ERROR_TYPE,
    check_error_column,
    check_on_error,
    error_column_free,
    refuse_unused_error_column,
)
from asyncio_lookup.spark.join_columns import (
    OnInput,
    key_arrow_types,
    key_bindings,
    select_dim_columns,
)
from asyncio_lookup.spark.map_in_arrow import map_in_arrow
from asyncio_lookup.spark.metrics import METRICS_COLUMN, observe
from asyncio_lookup.spark.otel_switch import otel_from_conf
from asyncio_lookup.spark.rate_share import table_task_rate
from asyncio_lookup.spark.schema import (
    arrow_type,
    large_var_types,
    session_time_zone,
)
from asyncio_lookup.spark.shuffle import (
    PARTITION_COLUMN,
    SkewOptions,
    check_shuffle_partitions,
    plan_shuffle,
)
from asyncio_lookup.spark.table import LookupTable
from asyncio_lookup.spark.task import LookupJoinTask
from asyncio_lookup.spark.worker_gc import gc_threshold_from_conf
from asyncio_lookup.validation import user_stacklevel


def async_defaults(df: DataFrame) -> AsyncDefaults:
    """Job-level async lookup defaults from the Spark conf (``table.exec.async-lookup.*``)."""
    conf = df.sparkSession.conf
    found = {
        key: library_conf(conf, key)
        for key in (CONF_OUTPUT_MODE, CONF_BUFFER_CAPACITY, CONF_TIMEOUT, CONF_KEY_ORDERED)
    }
    try:
        return AsyncDefaults.from_conf({key: value for key, (_, value) in found.items()})
    except ConfigurationError as error:  # named as it was set (spark.<key> from spark-submit)
        held = found.get(str(error.option), (error.option, None))[0]
        raise type(error)(held, error.value, error.allowed, error.reason) from None


@dataclasses.dataclass(frozen=True)
class LookupJoinArgs:
    """The arguments of one :func:`lookup_join` besides ``df`` and ``table`` (documented there),
    each checked on its own when built; :func:`plan_lookup_join` checks them against the
    schemas and the table."""

    on: OnInput
    how: str = "inner"
    hints: HintsInput = None
    literals: Mapping[str, Any] | None = None
    columns: Sequence[str] | None = None
    rename: Mapping[str, str] | None = None
    prefix: str = ""
    dim_filter: Callable[[Row], bool] | None = None
    condition: Callable[[Row, Row], bool] | None = None
    left_condition: Callable[[Row], bool] | None = None
    alias: str | None = None
    shuffle_partitions: int | None = None
    skew: SkewOptions | bool | Mapping[str, Any] | None = None
    on_error: str | None = None
    error_column: str = DEFAULT_ERROR_COLUMN
    matched_column: str | None = None
    join_type: JoinType = dataclasses.field(init=False, repr=False)
    skew_options: SkewOptions = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "join_type", JoinType.of(self.how))
        check_on_error(self.on_error)
        check_error_column(self.error_column)
        for name, parameters in (
            ("dim_filter", "(dim_row)"),
            ("condition", "(left_row, dim_row)"),
            ("left_condition", "(left_row)"),
        ):
            check_predicate(name, getattr(self, name), parameters)
        alias = self.alias
        if alias is not None and (not isinstance(alias, str) or not alias.strip()):
            raise ConfigurationError("alias", alias, "a non-empty string or None")
        matched = self.matched_column
        if matched is not None and (not isinstance(matched, str) or not matched.strip()):
            raise ConfigurationError("matched_column", matched, "a non-empty column name or None")
        if not isinstance(self.prefix, str):
            raise ConfigurationError("prefix", self.prefix, "a string")
        if self.shuffle_partitions is not None:
            check_shuffle_partitions(self.shuffle_partitions)
        object.__setattr__(self, "skew_options", SkewOptions.of(self.skew))


def check_predicate(name: str, value: Any, parameters: str) -> None:
    """``value`` is None or a callable that takes ``parameters`` (checked on the driver: the
    task would fail on its first row)."""
    if value is None:
        return
    allowed = f"a callable {parameters} -> bool, or None"
    check_plain_callable(name, value, allowed)
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # a builtin without one: called as it is
        return
    try:
        signature.bind(*[None] * (parameters.count(",") + 1))
    except TypeError as error:
        raise ConfigurationError(name, value, allowed, f"it takes {signature}: {error}") from None


def plan_lookup_join(
    df: DataFrame, table: LookupTable, args: LookupJoinArgs
) -> tuple[LookupJoinTask, StructType]:
    """Validate everything on the driver; return the executor task and the output schema."""
    if not isinstance(df, DataFrame):
        raise ConfigurationError("df", type(df).__name__, "a pyspark.sql.DataFrame")
    if not isinstance(table, LookupTable):
        raise ConfigurationError("table", table, "a LookupTable")
    hint: ResolvedLookup = resolve_lookup(
        args.hints,
        table.name,
        aliases=(args.alias,) if args.alias else (),
        defaults=async_defaults(df),
    )
    hint = _with_on_error(hint, args.on_error)
    left = df.schema
    keys = key_bindings(table, left, args.on, args.literals)
    spec = JoinSpec(
        how=args.join_type,
        keys=keys,
        dim_filter=args.dim_filter,
        condition=args.condition,
        left_condition=args.left_condition,
    )
    large = large_var_types(df)
    dim_columns = select_dim_columns(
        table, left, args.columns, args.rename, args.prefix, large, keys
    )
    options = join_options(table, hint)
    # The source must offer a usable mode for these options and hints (opens nothing).
    plan = LookupChain.validate(
        table.connector,
        options,
        prefer_async=hint.prefer_async,
        key_columns=spec.key_columns,
    )
    check_retry_timeout(hint, is_async=plan.is_async, full_cache=plan.scan is not None)
    batches = plan.async_function is not None and plan.async_function.supports_batch
    check_batch_wait(
        hint,
        options.batch_max_size if batches else 1,  # a function without batches never waits
        options.batch_max_wait,
        is_async=plan.is_async,
        full_cache=plan.scan is not None,
    )
    table.check_target()
    check_full_cache = getattr(table.connector, "check_full_cache", None)
    if options.cache is CacheType.FULL and check_full_cache is not None:
        check_full_cache([(f.name, f.dataType) for f in table.schema.fields])
    dim_fields = {f.name: f for f in table.schema.fields}
    output = StructType(
        list(left.fields)
        + [StructField(c.output, dim_fields[c.name].dataType, True) for c in dim_columns]
    )
    error_column = None
    if hint.on_error is OnError.KEEP:
        error_column = args.error_column
        error_column_free(error_column, output.names, "the join's output")
        output = StructType([*output.fields, StructField(error_column, ERROR_TYPE, True)])
    else:
        refuse_unused_error_column(args.error_column, "on_error (or the LOOKUP hint's 'on-error')")
    if args.matched_column is not None:
        taken = next((n for n in output.names if n.lower() == args.matched_column.lower()), None)
        if taken is not None:
            raise ConfigurationError(
                "matched_column",
                args.matched_column,
                "a name distinct from every output column (compared case-insensitively)",
                reason=f"the join's output already has a column {taken!r}",
            )
        output = StructType(
            [*output.fields, StructField(args.matched_column, BooleanType(), False)]
        )
    task = LookupJoinTask(
        table_id=table.table_id,
        table_name=table.name,
        connector=table.connector,
        options=options,
        hint=hint,
        spec=spec,
        dim_columns=dim_columns,
        output_schema=_arrow_schema(output, large),
        not_null=tuple(i for i, f in enumerate(output.fields) if not f.nullable),
        gc_threshold=gc_threshold_from_conf(df.sparkSession.conf),
        error_column=error_column,
        error_type=None if error_column is None else arrow_type(ERROR_TYPE, "schema", large),
        matched_column=args.matched_column,
        rate=table_task_rate(table.options, df.sparkSession.conf, table=table.name),
        shared_namespace=None if options.shared_url is None else _shared_namespace(table, options),
        otel=otel_from_conf(df.sparkSession.conf),
        time_zone=session_time_zone(df, (dim_fields[c.name].dataType for c in dim_columns)),
        key_types=key_arrow_types(table, left, keys),
    )
    return task, output


def join_options(table: LookupTable, hint: ResolvedLookup) -> LookupOptions:
    """The table's options with the LOOKUP hint's ``lookup.shared-cache.*`` ones over them."""
    overrides = () if hint.hint is None else hint.hint.shared_cache
    if not overrides:
        return table.options
    return LookupOptions.from_dict({**table.options.to_dict(), **dict(overrides)})


def _shared_namespace(table: LookupTable, options: LookupOptions) -> str:
    """The shared cache's namespace: a LOOKUP hint's ``lookup.shared-cache.namespace``, else
    the table's (:attr:`LookupTable.shared_namespace`)."""
    return options.shared_namespace or table.shared_namespace


def _with_on_error(hint: ResolvedLookup, on_error: str | None) -> ResolvedLookup:
    """The hint with the ``on_error`` argument applied (it may repeat the hint's 'on-error',
    not contradict it)."""
    chosen = check_on_error(on_error)
    if chosen is None:
        return hint
    given = hint.hint.on_error if hint.hint is not None else None
    if given is not None and given != chosen.value:
        raise ConfigurationError(
            "on_error",
            on_error,
            f"the LOOKUP hint's 'on-error'={given!r}, or no 'on-error' in the hint",
            reason="the argument and the hint disagree",
        )
    return dataclasses.replace(hint, on_error=chosen)


# The parameters after `table` are LookupJoinArgs's fields, listed again so that users and type
# checkers see them (tests/spark/test_validation.py checks that the two lists match).
def lookup_join(
    df: DataFrame,
    table: LookupTable,
    on: OnInput,
    how: str = "inner",
    hints: HintsInput = None,
    *,
    literals: Mapping[str, Any] | None = None,
    columns: Sequence[str] | None = None,
    rename: Mapping[str, str] | None = None,
    prefix: str = "",
    dim_filter: Callable[[Row], bool] | None = None,
    condition: Callable[[Row, Row], bool] | None = None,
    left_condition: Callable[[Row], bool] | None = None,
    alias: str | None = None,
    shuffle_partitions: int | None = None,
    skew: SkewOptions | bool | Mapping[str, Any] | None = None,
    on_error: str | None = None,
    error_column: str = DEFAULT_ERROR_COLUMN,
    matched_column: str | None = None,
) -> DataFrame:
    """Join each row of ``df`` with the rows ``table`` returns for its key (docs/semantics.md §2.1).

    ``on``: ``'id'``, ``('customer_id', 'id')``, a list of these, or ``{'customer_id': 'id'}``.
    ``literals`` binds dim key columns to constants (``{'region': 'EU'}``). ``how`` is
    ``'inner'`` or ``'left'``. ``hints``: ``LOOKUP(...)`` / ``SHUFFLE_HASH(...)`` text, a dict of
    LOOKUP options, hint objects, or a list (``'output-mode'='key_ordered'``, or the conf
    ``table.exec.async-lookup.key-ordered-enabled`` with an unordered join: rows with equal
    lookup keys keep their order, one lookup per key at a time). The output is ``df``'s columns
    followed by the dim columns (``columns`` selects them; ``rename`` / ``prefix`` rename them;
    a name colliding with a left column is an error). ``dim_filter(dim_row)`` and
    ``condition(left_row, dim_row)`` filter the looked-up rows; ``left_condition(left_row)``
    decides whether a row is looked up at all. Every error is raised here, before any Spark job
    runs.

    Hash lookup join (``SHUFFLE_HASH('T')`` or ``'shuffle'='true'``): the rows are first
    exchanged so that each key is looked up in one partition (its cache sees every repeat of
    it). ``shuffle_partitions`` sets the number of partitions (default: one per task slot of
    the application, docs/semantics.md §2.7). A connector's
    ``partitioner(key_columns)`` replaces the plain hash. ``skew`` (:class:`SkewOptions`, a
    dict of its fields, ``True`` or ``False``; on by default) samples the input once on the
    driver -- a Spark job run by this call -- and spreads hot keys over several partitions.
    With ``lookup.cache`` = FULL each task then loads only the rows its partition can be asked
    for.

    Error output (``on_error``, or the LOOKUP hint's ``'on-error'``): ``'fail'`` (default) fails
    the job at a row whose lookup failed for good; ``'keep'`` keeps each such row once, dim
    columns NULL, with a struct column ``error_column`` (``table``, ``key``, ``error_class``,
    ``message``, ``attempts``; NULL on good rows). :func:`split_failed` separates them.

    ``matched_column``: a BOOLEAN column added last, true on a row joined with a dim row and
    false on a LEFT join's NULL-padded row (and a failed row): it tells a miss from a dim row
    whose columns are all NULL.
    """
    args = LookupJoinArgs(
        on,
        how,
        hints,
        literals=literals,
        columns=columns,
        rename=rename,
        prefix=prefix,
        dim_filter=dim_filter,
        condition=condition,
        left_condition=left_condition,
        alias=alias,
        shuffle_partitions=shuffle_partitions,
        skew=skew,
        on_error=on_error,
        error_column=error_column,
        matched_column=matched_column,
    )
    task, output = plan_lookup_join(df, table, args)
    _refuse_reserved_names([*df.columns, *output.fieldNames()])
    if task.hint.shuffle:
        skew = args.skew_options
        if task.hint.output_mode == "key_ordered":
            if args.skew is not None and args.skew is not False:
                raise ConfigurationError(
                    "skew",
                    args.skew,
                    "None or False in key order ('output-mode'='key_ordered', or an unordered "
                    f"join with the Spark conf {CONF_KEY_ORDERED}=true)",
                    reason="this join runs in key order, and a salted hot key's rows go to "
                    "several tasks, which look it up at once; key order is one lookup of a key "
                    "at a time",
                )
            skew = SkewOptions(enabled=False)  # each key on one task, in order there
        df, task = hash_partition(df, task, table, args.shuffle_partitions, skew)
    elif args.shuffle_partitions is not None:
        raise ConfigurationError(
            "shuffle_partitions",
            args.shuffle_partitions,
            "a partition count for a hash lookup join: with a SHUFFLE_HASH hint for the table",
            reason="this join is not shuffled, so it would do nothing",
        )
    elif args.skew is not None and args.skew is not False:
        raise ConfigurationError(
            "skew",
            args.skew,
            "None or False unless the join is a hash lookup join (a SHUFFLE_HASH hint for the "
            "table)",
            reason="only a shuffled join spreads hot keys, so it would do nothing",
        )
    with_metrics = StructType([*output.fields, StructField(METRICS_COLUMN, StringType(), True)])
    return observe(map_in_arrow(df, task, with_metrics), table.table_id, table.name)


def _refuse_reserved_names(names: list[str]) -> None:
    """The join's own columns take these names, in any letter case (Spark resolves names
    ignoring case: a left column ``__Asyncio_Lookup_Partition`` was replaced and the job
    failed in the JVM)."""
    for name in names:
        if name.lower() in (METRICS_COLUMN, PARTITION_COLUMN):
            raise ConfigurationError(
                "df",
                name,
                "a DataFrame and output columns (rename, matched_column, error_column) "
                f"without the reserved names {METRICS_COLUMN!r} and {PARTITION_COLUMN!r} "
                "in any letter case",
            )


def _arrow_schema(output: StructType, large: bool) -> pa.Schema | None:
    """The Arrow form of the output schema, or None when a type has none here."""
    try:
        return pa.schema(
            [pa.field(f.name, arrow_type(f.dataType, "schema", large)) for f in output.fields]
        )
    except ConfigurationError:
        return None


def hash_partition(
    df: DataFrame,
    task: LookupJoinTask,
    table: LookupTable,
    partitions: int | None = None,
    skew: SkewOptions | None = None,
) -> tuple[DataFrame, LookupJoinTask]:
    """SHUFFLE_HASH / 'shuffle'='true' (docs/semantics.md §2.7): exchange the probe side by the
    key's left columns (or the connector's partitioner), so each key's lookups land on one task and
    its cache; hot keys are salted. Returns the exchanged input and the task routed with it."""
    if not task.spec.left_key_columns:
        warnings.warn(
            f"SHUFFLE_HASH for {task.table_name!r} ignored: the lookup key binds no left column",
            stacklevel=user_stacklevel(),
        )
        return df, task
    full_cache = task.options.cache is CacheType.FULL or isinstance(
        table.connector, FullCachingLookupProvider
    )
    plan = plan_shuffle(
        df,
        task.spec,
        table.schema,
        table.connector,
        partitions=partitions,
        skew=skew,
        full_cache=full_cache,
        table=table.name,
    )
    rate = table_task_rate(  # no more tasks at once than partitions
        table.options,
        df.sparkSession.conf,
        partitions=plan.routing.num_partitions,
        table=table.name,
    )
    routed = dataclasses.replace(
        task, routing=plan.routing, partition_column=PARTITION_COLUMN, rate=rate
    )
    return plan.df, routed
