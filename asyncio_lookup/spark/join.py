"""``lookup_join``: enrich a DataFrame by looking each row up in a :class:`LookupTable`."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StringType, StructField, StructType

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
    resolve_lookup,
)
from asyncio_lookup.lookup.hints import HintsInput
from asyncio_lookup.lookup.join import JoinSpec, JoinType, KeyBinding
from asyncio_lookup.lookup.options import CacheType, LookupOptions
from asyncio_lookup.lookup.providers import FullCachingLookupProvider
from asyncio_lookup.spark.failed_rows import (
    DEFAULT_ERROR_COLUMN,
    ERROR_TYPE,
    check_error_column,
    check_on_error,
    error_column_free,
)
from asyncio_lookup.spark.metrics import METRICS_COLUMN, observe
from asyncio_lookup.spark.rate_share import table_task_rate
from asyncio_lookup.spark.schema import (
    arrow_type,
    check_literal,
    key_types_compatible,
    large_var_types,
)
from asyncio_lookup.spark.shuffle import (
    PARTITION_COLUMN,
    SkewOptions,
    check_shuffle_partitions,
    plan_shuffle,
)
from asyncio_lookup.spark.table import LookupTable
from asyncio_lookup.spark.task import DimColumn, LookupJoinTask
from asyncio_lookup.spark.worker_gc import gc_threshold_from_conf

OnInput = str | tuple[str, str] | Sequence[str | tuple[str, str]] | Mapping[str, str]
_ON_ALLOWED = (
    "a column name present on both sides, a (left column, dim column) pair, a list of these, "
    "or a mapping {left column: dim column}"
)


def async_defaults(df: DataFrame) -> AsyncDefaults:
    """Job-level async lookup defaults from the Spark conf (``table.exec.async-lookup.*``)."""
    conf = df.sparkSession.conf
    return AsyncDefaults.from_conf(
        {
            key: conf.get(key, None)
            for key in (CONF_OUTPUT_MODE, CONF_BUFFER_CAPACITY, CONF_TIMEOUT, CONF_KEY_ORDERED)
        }
    )


def _pairs(on: OnInput) -> list[tuple[str, str]]:
    if isinstance(on, str):
        return [(on, on)]
    if isinstance(on, Mapping):
        items: Iterable[Any] = list(on.items())
    elif isinstance(on, tuple) and len(on) == 2 and all(isinstance(x, str) for x in on):
        items = [on]
    elif isinstance(on, Sequence):
        items = on
    else:
        raise ConfigurationError("on", on, _ON_ALLOWED)
    pairs: list[tuple[str, str]] = []
    for item in items:
        if isinstance(item, str):
            pairs.append((item, item))
        elif (
            isinstance(item, (tuple, list))
            and len(item) == 2
            and all(isinstance(x, str) for x in item)
        ):
            pairs.append((item[0], item[1]))
        else:
            raise ConfigurationError("on", item, _ON_ALLOWED)
    return pairs


def _field(schema: StructType, name: str, option: str, side: str) -> StructField:
    for field in schema.fields:
        if field.name == name:
            return field
    close = [f.name for f in schema.fields if f.name.lower() == name.lower()]
    reason = f"no column {name!r} in the {side}"
    if close:
        reason += f" (did you mean {close[0]!r}? names are matched exactly)"
    raise ConfigurationError(option, name, f"one of {schema.names}", reason=reason)


def _key_bindings(
    table: LookupTable,
    left: StructType,
    on: OnInput,
    literals: Mapping[str, Any] | None,
) -> tuple[KeyBinding, ...]:
    dim = table.schema
    bound: dict[str, KeyBinding] = {}
    for left_name, dim_name in _pairs(on):
        left_field = _field(left, left_name, "on", "left DataFrame")
        dim_field = _field(dim, dim_name, "on", f"dim table {table.name!r}")
        if dim_name in bound:
            raise ConfigurationError(
                "on", dim_name, "each dim key column bound once", reason="bound twice"
            )
        if not key_types_compatible(left_field.dataType, dim_field.dataType):
            raise ConfigurationError(
                "on",
                (left_name, dim_name),
                "key columns of compatible types (integral, decimal, string or binary; "
                "otherwise the same type, FLOAT and DOUBLE included)",
                reason=f"left column {left_name!r} is {left_field.dataType.simpleString()} but "
                f"dim column {dim_name!r} is {dim_field.dataType.simpleString()}; cast one side",
            )
        bound[dim_name] = KeyBinding(dim_name, left_column=left_name)
    if literals is not None and not isinstance(literals, Mapping):
        raise ConfigurationError("literals", literals, "a mapping {dim column: value}")
    for dim_name, value in (literals or {}).items():
        dim_field = _field(dim, dim_name, "literals", f"dim table {table.name!r}")
        if dim_name in bound:
            raise ConfigurationError(
                "literals", dim_name, "a dim column not already bound by 'on'", reason="bound twice"
            )
        check_literal(value, dim_field.dataType, f"literals[{dim_name!r}]")
        bound[dim_name] = KeyBinding(dim_name, literal=value)
    if not bound:
        raise ConfigurationError("on", on, _ON_ALLOWED, reason="no key column given")
    # The key is in dim-schema order, whatever order the user listed the columns in.
    keys = tuple(bound[name] for name in dim.names if name in bound)
    declared = getattr(table.connector, "key_columns", None)
    if isinstance(declared, (list, tuple)) and all(isinstance(c, str) for c in declared):
        key_names = tuple(b.dim_column for b in keys)
        if tuple(declared) != key_names:
            raise ConfigurationError(
                "on",
                list(key_names),
                f"the connector's key columns {list(declared)} (in dim-schema order)",
                reason=f"the join's key does not match how {table.name!r} is looked up",
            )
    return keys


def _dim_columns(
    table: LookupTable,
    left: StructType,
    columns: Sequence[str] | None,
    rename: Mapping[str, str] | None,
    prefix: str,
    large_types: bool,
    keys: Sequence[KeyBinding] = (),
) -> tuple[DimColumn, ...]:
    dim = table.schema
    if columns is None:
        selected = list(dim.names)
    elif isinstance(columns, str) or not isinstance(columns, Sequence):
        raise ConfigurationError("columns", columns, "a list of dim column names")
    else:
        selected = [_field(dim, c, "columns", f"dim table {table.name!r}").name for c in columns]
    if rename is not None and not isinstance(rename, Mapping):
        raise ConfigurationError("rename", rename, "a mapping {dim column: output name}")
    rename = dict(rename or {})
    for name in rename:
        _field(dim, name, "rename", f"dim table {table.name!r}")
    provided = getattr(table.connector, "columns", None)
    if isinstance(provided, (list, tuple)) and all(isinstance(c, str) for c in provided):
        absent = [name for name in selected if name not in provided]
        if absent:
            raise ConfigurationError(
                "columns",
                absent,
                f"dim columns the connector returns: {list(provided)}",
                reason=f"{table.name!r} declares them in its schema but its connector does not "
                "select them, so they would always be NULL; add them to the connector's "
                "columns or pass columns=[...] without them",
            )
    taken = {name.lower(): name for name in left.names}
    # As DataFrame.join(other, on='id'): a dim key column bound to the left column of the same
    # name is that column already; it is output once (the left's), unless asked for by name.
    same_name = {k.dim_column for k in keys if k.left_column == k.dim_column}
    out: list[DimColumn] = []
    for name in selected:
        output = rename.get(name, prefix + name)
        if columns is None and name in same_name and name not in rename and output == name:
            continue
        if output.lower() in taken:
            raise ConfigurationError(
                "rename",
                output,
                "output names distinct from every left column and each other (names compare "
                "case-insensitively)",
                reason=f"dim column {name!r} of {table.name!r} would be output as {output!r}, "
                f"which collides with column {taken[output.lower()]!r}; pass rename="
                f"{{{name!r}: 'new_name'}}, prefix='...', or columns=[...] without it",
            )
        taken[output.lower()] = output
        field = _field(dim, name, "schema", f"dim table {table.name!r}")
        arrow = arrow_type(field.dataType, "schema", large_types)
        out.append(DimColumn(name, output, arrow, field.dataType.simpleString().upper()))
    return tuple(out)


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
    join_type: JoinType = dataclasses.field(init=False, repr=False)
    skew_options: SkewOptions = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "join_type", JoinType.of(self.how))
        check_on_error(self.on_error)
        check_error_column(self.error_column)
        for name in ("dim_filter", "condition", "left_condition"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigurationError(name, value, "a callable or None")
        alias = self.alias
        if alias is not None and (not isinstance(alias, str) or not alias.strip()):
            raise ConfigurationError("alias", alias, "a non-empty string or None")
        if not isinstance(self.prefix, str):
            raise ConfigurationError("prefix", self.prefix, "a string")
        if self.shuffle_partitions is not None:
            check_shuffle_partitions(self.shuffle_partitions)
        object.__setattr__(self, "skew_options", SkewOptions.of(self.skew))


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
    keys = _key_bindings(table, left, args.on, args.literals)
    spec = JoinSpec(
        how=args.join_type,
        keys=keys,
        dim_filter=args.dim_filter,
        condition=args.condition,
        left_condition=args.left_condition,
    )
    large = large_var_types(df)
    dim_columns = _dim_columns(table, left, args.columns, args.rename, args.prefix, large, keys)
    options = join_options(table, hint)
    # The source must offer a usable mode for these options and hints (opens nothing).
    LookupChain.validate(
        table.connector,
        options,
        prefer_async=hint.prefer_async,
        key_columns=spec.key_columns,
    )
    table.check_target()
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
        rate=table_task_rate(table.options, df.sparkSession.conf, table=table.name),
        shared_namespace=None if options.shared_url is None else table.shared_namespace,
    )
    return task, output


def join_options(table: LookupTable, hint: ResolvedLookup) -> LookupOptions:
    """The table's options with the LOOKUP hint's ``lookup.shared-cache.*`` ones over them."""
    overrides = () if hint.hint is None else hint.hint.shared_cache
    if not overrides:
        return table.options
    return LookupOptions.from_dict({**table.options.to_dict(), **dict(overrides)})


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
    it). ``shuffle_partitions`` sets the number of partitions (default:
    ``spark.sql.shuffle.partitions``, as for ``DataFrame.repartition(column)``). A connector's
    ``partitioner(key_columns)`` replaces the plain hash. ``skew`` (:class:`SkewOptions`, a
    dict of its fields, ``True`` or ``False``; on by default) samples the input once on the
    driver -- a Spark job run by this call -- and spreads hot keys over several partitions.
    With ``lookup.cache`` = FULL each task then loads only the rows its partition can be asked
    for.

    Error output (``on_error``, or the LOOKUP hint's ``'on-error'``): ``'fail'`` (default) fails
    the job at a row whose lookup failed for good; ``'keep'`` keeps each such row once, dim
    columns NULL, with a struct column ``error_column`` (``table``, ``key``, ``error_class``,
    ``message``, ``attempts``; NULL on good rows). :func:`split_failed` separates them.
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
    )
    task, output = plan_lookup_join(df, table, args)
    if METRICS_COLUMN in df.columns:
        raise ConfigurationError(
            "df", METRICS_COLUMN, "a DataFrame without this reserved column name"
        )
    if task.hint.shuffle:
        df, task = hash_partition(df, task, table, args.shuffle_partitions, args.skew_options)
    with_metrics = StructType([*output.fields, StructField(METRICS_COLUMN, StringType(), True)])
    return observe(df.mapInArrow(task, with_metrics), table.table_id)


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
            stacklevel=3,
        )
        return df, task
    if PARTITION_COLUMN in df.columns:
        raise ConfigurationError(
            "df", PARTITION_COLUMN, "a DataFrame without this reserved column name"
        )
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
