"""The lookup join runner (docs/semantics.md §2.1), engine-agnostic.

An engine hands the runner *probe batches*: per input row the lookup key (or ``None`` when the
row must not be looked up: a NULL in the key, or a failed LEFT pre-condition), plus an opaque
``payload`` (for Spark, the Arrow record batch). The runner answers with *joined batches*: the
input row indices to gather (an input row repeats once per surviving dim row) and, aligned with
them, the dim rows (``None`` = NULL-padded, for a LEFT join miss). The engine builds its output
column-wise from those, e.g. with Arrow ``take``.

With an error output (``on-error`` = keep, docs/semantics.md §2.10) a row whose lookup failed
for good is emitted once with a :class:`RowFailure` as its dim row, and its position is listed in
the joined batch's ``failures`` (found only while failures are outstanding: no cost per good row).

Sync mode looks up one key at a time (retry sleeps block, as in Flink). Async mode runs every
lookup through the async wait operator with the hint's capacity, output mode and timeout; the
lookup-miss retry sits inside the chain (below the cache), so it holds the row's one slot and
counts against its timeout.
"""

from __future__ import annotations

from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Collection,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from enum import Enum
from itertools import repeat
from typing import Any, Generic, Protocol, TypeVar

from asyncio_lookup.errors import ConfigurationError, in_lookup_context, lookup_context
from asyncio_lookup.lookup.failed_rows import OnError, RowFailure
from asyncio_lookup.lookup.functions import Key, Row, one_nan
from asyncio_lookup.lookup.hint_resolve import CONF_TIMEOUT, ResolvedLookup, duration_text
from asyncio_lookup.runtime import AsyncFunction, AsyncWaitOperator, OutputMode
from asyncio_lookup.runtime.function import check_plain_callable
from asyncio_lookup.runtime.rebatch import (
    DEFAULT_FLUSH_ROWS,
    Rebatcher,
    aclose,
    check_flush_rows,
)

P = TypeVar("P")
DimRow = Row | RowFailure | None
"""A joined row's dim side: the looked-up row, None (NULL dim columns) or the row's failure."""


class JoinType(Enum):
    """INNER drops a row with no surviving dim row; LEFT emits it once, NULL-padded."""

    INNER = "inner"
    LEFT = "left"

    @classmethod
    def of(cls, value: str | JoinType) -> JoinType:
        if isinstance(value, JoinType):
            return value
        if isinstance(value, str):
            lowered = value.strip().lower()
            aliases = {"inner": "inner", "left": "left", "left_outer": "left", "leftouter": "left"}
            if lowered in aliases:
                return cls(aliases[lowered])
        raise ConfigurationError("how", value, "'inner' or 'left'")


@dataclass(frozen=True)
class KeyBinding:
    """One dim key column bound to a left column or to a literal value."""

    dim_column: str
    left_column: str | None = None
    literal: Any = None

    @property
    def literal_key(self) -> Any:
        """The literal as a key value: a NaN as the one :data:`NAN` (a NaN equals no other
        NaN object in a key tuple; this one arrives unpickled in every task)."""
        return one_nan(self.literal)


@dataclass(frozen=True)
class JoinSpec:
    """What to join: the key (in dim-schema order) and the optional conditions.

    ``dim_filter(dim_row)`` and ``condition(left_row, dim_row)`` run on the rows a lookup
    returned and never trigger a lookup-miss retry. ``left_condition(left_row)`` runs before the
    lookup: a row failing it is not looked up (LEFT: emitted NULL-padded; INNER: dropped).
    """

    how: JoinType
    keys: tuple[KeyBinding, ...]
    dim_filter: Callable[[Row], bool] | None = None
    condition: Callable[[Row, Row], bool] | None = None
    left_condition: Callable[[Row], bool] | None = None

    def __post_init__(self) -> None:
        if not self.keys:
            raise ConfigurationError("on", (), "one or more (left column, dim column) pairs")
        seen: set[str] = set()
        for binding in self.keys:
            if binding.dim_column in seen:
                raise ConfigurationError(
                    "on",
                    binding.dim_column,
                    "each dim key column bound once",
                    reason="dim column bound twice",
                )
            seen.add(binding.dim_column)
        for name in ("dim_filter", "condition", "left_condition"):
            value = getattr(self, name)
            if value is not None:
                check_plain_callable(name, value, "a callable or None")

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The dim key columns, in key (dim-schema) order."""
        return tuple(b.dim_column for b in self.keys)

    @property
    def left_key_columns(self) -> tuple[str, ...]:
        """The left columns bound to the key (literals excluded), in key order."""
        return tuple(b.left_column for b in self.keys if b.left_column is not None)

    @property
    def needs_left_rows(self) -> bool:
        """True when a condition reads left rows (the engine must pass ``left_rows``)."""
        return self.condition is not None or self.left_condition is not None

    def build_keys(
        self,
        columns: Mapping[str, Sequence[Any]],
        num_rows: int,
        left_rows: Sequence[Row] | None = None,
    ) -> list[Key | None]:
        """Keys for ``num_rows`` rows from the left key columns (column-wise values).

        A key holding a NULL, or a row failing ``left_condition``, becomes ``None``.
        """
        parts: list[Sequence[Any]] = [
            [b.literal_key] * num_rows if b.left_column is None else columns[b.left_column]
            for b in self.keys
        ]
        keys: list[Key | None] = list(zip(*parts, strict=True))
        if any(None in part for part in parts):  # a scan per column, in C; rows only then
            keys = [None if key is None or None in key else key for key in keys]
        if self.left_condition is not None:
            if left_rows is None:
                raise ValueError("left_rows are required with a left_condition")
            check = self.left_condition
            keys = [
                key if key is not None and check(row) else None
                for key, row in zip(keys, left_rows, strict=True)
            ]
        return keys

    def finish(self, rows: Collection[Row], left_row: Row | None) -> list[Row | None]:
        """The output dim rows for one input row given what the lookup returned."""
        if rows and self.dim_filter is None and self.condition is None:
            # no conditions: every row survives (the chain's list is read, never changed)
            return rows if type(rows) is list else list(rows)
        survivors: list[Row | None] = []
        for row in rows:
            if self.dim_filter is not None and not self.dim_filter(row):
                continue
            if self.condition is not None and not self.condition(left_row or {}, row):
                continue
            survivors.append(row)
        if survivors:
            return survivors
        return [None] if self.how is JoinType.LEFT else []


@dataclass
class ProbeBatch(Generic[P]):
    """One input batch: its keys (``None`` = no lookup) and, when needed, its rows as dicts."""

    payload: P
    keys: Sequence[Key | None]
    left_rows: Sequence[Row] | None = None

    def __len__(self) -> int:
        return len(self.keys)


@dataclass
class JoinedBatch(Generic[P]):
    """Output for (part of) one input batch: rows ``indices`` of ``payload`` joined with
    ``dim_rows`` (aligned; ``None`` = NULL dim columns). ``failures``: the positions whose dim
    row is a :class:`RowFailure` (error output only)."""

    payload: P
    indices: list[int] = field(default_factory=list)
    dim_rows: list[DimRow] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)


class LookupChainLike(Protocol):
    """What the runner needs from a lookup chain (cache -> retry -> connector)."""

    @property
    def is_async(self) -> bool: ...

    def lookup(self, key: Key) -> Collection[Row]: ...

    async def async_lookup(self, key: Key) -> Collection[Row]: ...

    def lookup_cached(self, key: Key) -> Collection[Row] | None: ...


class _Probe:
    """One input row on its way through the operator (a plain slotted class: one per row)."""

    __slots__ = ("key", "left_row")

    def __init__(self, key: Key | None, left_row: Row | None) -> None:
        self.key = key
        self.left_row = left_row

    def __repr__(self) -> str:
        return f"the row with key {self.key!r}"


def _probes(batch: ProbeBatch[Any]) -> Iterator[_Probe]:
    left_rows = batch.left_rows
    return map(_Probe, batch.keys, repeat(None) if left_rows is None else left_rows)


def _probe_key(probe: _Probe) -> object:
    """Key-ordered mode's key: the lookup key; a row that is not looked up (``None``) is its own
    key, so such rows never wait for each other."""
    key = probe.key
    return probe if key is None else key


def _finish_named(
    spec: JoinSpec,
    rows: Collection[Row],
    left_row: Row | None,
    key: Key | None,
    where: tuple[str, str],
) -> list[Row | None]:
    """``spec.finish``; an error of its ``dim_filter`` / ``condition`` named like a lookup's
    (``where``: the table and its target), the original as its cause."""
    try:
        return spec.finish(rows, left_row)
    except Exception as error:
        named = in_lookup_context(error, lookup_context(where[0], key, where[1]))
        raise named  # noqa: B904 (its cause is set: the original, or the original's cause)


class _LookupCall(AsyncFunction[_Probe, DimRow]):
    """One row's lookup through the chain; its outputs are the row's output dim rows (``None``:
    NULL-padded), none for an INNER join without a surviving dim row."""

    def __init__(self, chain: LookupChainLike, spec: JoinSpec, table: str, timeout: float | None):
        self.chain = chain
        self.spec = spec
        self.table = table
        self.timeout_seconds = timeout
        self._unconditional = spec.dim_filter is None and spec.condition is None
        self.where = (table, getattr(chain, "target", ""))

    async def async_invoke(self, element: _Probe) -> Collection[Row | None]:
        key = element.key
        if key is None:
            return self.spec.finish((), element.left_row)
        rows = await self.chain.async_lookup(key)
        if self._unconditional and rows and type(rows) is list:
            return rows  # spec.finish() of a join without conditions, inlined
        return _finish_named(self.spec, rows, element.left_row, key, self.where)

    async def timeout(self, element: _Probe) -> Collection[Row | None]:
        limit = duration_text(self.timeout_seconds or 0.0)
        context = lookup_context(self.table, element.key, getattr(self.chain, "target", ""))
        raise TimeoutError(
            f"Async function call has timed out: {context}: did not finish within {limit} "
            f"(LOOKUP hint 'timeout', or the job default {CONF_TIMEOUT}; retries count against it)"
        )


class _CachedLookupCall(_LookupCall):
    """:class:`_LookupCall` for a chain whose cache may answer at admission."""

    def invoke_now(self, element: _Probe) -> Collection[Row | None] | None:
        """Answer a NULL key or a cache hit at admission, without a task."""
        if element.key is None:
            return self.spec.finish((), element.left_row)
        rows = self.chain.lookup_cached(element.key)
        if rows is None:
            return None
        return _finish_named(self.spec, rows, element.left_row, element.key, self.where)


class LookupJoinRunner(Generic[P]):
    """Runs a lookup join over probe batches, sync or async (chosen by the chain's mode).

    ``hint`` is the join's LOOKUP hint resolved against the job defaults: the async operator's
    capacity, output mode and timeout.
    """

    def __init__(
        self,
        chain: LookupChainLike,
        spec: JoinSpec,
        hint: ResolvedLookup,
        *,
        flush_rows: int = DEFAULT_FLUSH_ROWS,
    ) -> None:
        self.chain = chain
        self.spec = spec
        self.hint = hint
        self.flush_rows = check_flush_rows(flush_rows)
        self.operator: AsyncWaitOperator[_Probe, DimRow] | None = None
        self.keep_failures = hint.on_error is OnError.KEEP
        self.failed_rows = 0  # rows emitted as failures
        self._unseen = 0  # failures made and not yet found in an output batch

    def _failure(self, key: Key | None, error: BaseException, attempts: int = 1) -> RowFailure:
        self.failed_rows += 1
        return RowFailure.of(self.hint.table, key, error, attempts)

    def _failed(self, element: _Probe, error: BaseException, attempts: int) -> list[RowFailure]:
        """The operator's error output: the row once, as its failure."""
        self._unseen += 1
        return [self._failure(element.key, error, attempts)]

    @property
    def is_async(self) -> bool:
        return self.chain.is_async

    def operator_metrics(self) -> dict[str, float]:
        """The async operator's metrics of the last run (empty for a sync run)."""
        if self.operator is None:
            return {}
        return dict(self.operator.metrics.snapshot())

    def run_sync(self, batches: Iterable[ProbeBatch[P]]) -> Generator[JoinedBatch[P], None, None]:
        """Join batch by batch, one blocking lookup at a time, in input order."""
        spec = self.spec
        lookup = self.chain.lookup
        where = (self.hint.table, getattr(self.chain, "target", ""))
        for batch in batches:
            out: JoinedBatch[P] = JoinedBatch(batch.payload)
            left_rows = batch.left_rows
            for index, key in enumerate(batch.keys):
                left_row = left_rows[index] if left_rows is not None else None
                dim_rows: Sequence[DimRow]
                try:
                    rows = lookup(key) if key is not None else ()
                    dim_rows = _finish_named(spec, rows, left_row, key, where)
                except Exception as error:
                    if not self.keep_failures:
                        raise
                    out.failures.append(len(out.indices))
                    dim_rows = [self._failure(key, error)]
                for dim_row in dim_rows:
                    out.indices.append(index)
                    out.dim_rows.append(dim_row)
                if len(out.indices) >= self.flush_rows:
                    yield out
                    out = JoinedBatch(batch.payload)
            if out.indices:
                yield out

    async def run_async(
        self, batches: AsyncIterable[ProbeBatch[P]] | Iterable[ProbeBatch[P]]
    ) -> AsyncIterator[JoinedBatch[P]]:
        """Join through the async wait operator; output order follows the output mode."""
        hint = self.hint
        call = _CachedLookupCall if getattr(self.chain, "answers_now", True) else _LookupCall
        operator: AsyncWaitOperator[_Probe, DimRow] = AsyncWaitOperator(
            # without a cache that may answer, no call per row at admission to ask it
            call(self.chain, self.spec, hint.table, hint.timeout),
            timeout=hint.timeout,
            capacity=hint.capacity,
            output_mode=OutputMode(hint.output_mode),
            on_error=self._failed if self.keep_failures else None,
            key_selector=_probe_key if hint.output_mode == "key_ordered" else None,
        )
        self.operator = operator
        rebatcher: Rebatcher[ProbeBatch[P], _Probe, DimRow] = Rebatcher(
            operator, _probes, flush_rows=self.flush_rows
        )
        joined = rebatcher.run(batches)
        try:
            async for out in joined:
                batch: JoinedBatch[P] = JoinedBatch(out.batch.payload, out.indices, out.outputs)
                if self._unseen:
                    failures = [i for i, row in enumerate(out.outputs) if type(row) is RowFailure]
                    batch.failures = failures
                    self._unseen -= len(failures)
                yield batch
        finally:
            await aclose(joined)
