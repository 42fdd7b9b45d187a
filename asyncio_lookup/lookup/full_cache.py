"""The full cache (FLIP-221): the whole dim table in memory, reloaded on a trigger's schedule.

Loads run on a daemon thread, each on a short-lived event loop of its own, so reloads happen
whether or not the worker's event loop is running. Each load builds a new snapshot and
swaps it in with one reference assignment; lookups see the old or the new snapshot whole.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import logging
import math
import numbers
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NoReturn

from asyncio_lookup.errors import CacheLoadError, DataFormatError, error_text
from asyncio_lookup.lookup.clock import MONOTONIC, WALL, Clock
from asyncio_lookup.lookup.functions import (
    FailedKey,
    Key,
    Row,
    ScanResult,
    same_nan,
    scan_rows,
)
from asyncio_lookup.lookup.metrics import (
    HIT_COUNT,
    LATEST_LOAD_TIME,
    LOAD_COUNT,
    NUM_CACHED_BYTES,
    NUM_CACHED_RECORDS,
    NUM_FAILURE_RETRIES,
    NUM_LOAD_FAILURES,
    CacheMetricGroup,
)
from asyncio_lookup.lookup.reload import CacheReloadTrigger, LoadTimes
from asyncio_lookup.lookup.retry import NO_KEY, FailureRetry
from asyncio_lookup.lookup.sizes import estimate_bytes
from asyncio_lookup.runtime.loop import new_event_loop

log = logging.getLogger(__name__)

ScanFactory = Callable[[], "ScanResult | None"]


@dataclass(frozen=True)
class _Unreadable:
    """A snapshot's entry for a key whose value the scan could not read (:class:`FailedKey`)."""

    error: Exception

    def fail(self) -> NoReturn:
        # a new error per lookup: raising one instance again and again grows its traceback
        raise DataFormatError(error_text(self.error)) from self.error


@dataclass(frozen=True)
class _State:
    snapshot: dict[Key, tuple[Row, ...] | _Unreadable]
    error: BaseException | None
    #: Per key column, the kinds (:func:`comparable_kind`) of its values in the snapshot.
    kinds: tuple[frozenset[object], ...] = ()
    #: Per key column, the number types of its values (float, Decimal) in the snapshot.
    numbers: tuple[frozenset[type], ...] = ()
    #: The kinds of looked-up keys checked against this snapshot (one set per snapshot: a
    #: check against the one before must not pass for the next).
    comparable: set[tuple[object, ...]] = field(default_factory=set)


def comparable_kind(value: object) -> object:
    """What a key value compares equal within: numbers with numbers (1 == 1.0 ==
    Decimal(1)), datetimes with datetimes of the same awareness, else values of one type."""
    kind = type(value)
    if kind is int or kind is float or kind is Decimal:
        return "number"
    if kind is datetime.datetime:
        return ("datetime", value.tzinfo is not None)  # type: ignore[attr-defined]
    if kind is bool:
        return kind
    if kind.__module__ == "numpy" and hasattr(value, "item"):  # np.int64(1) == 1 ...
        plain = value.item()
        return kind if type(plain) is kind else comparable_kind(plain)
    if isinstance(value, numbers.Number):  # a custom provider's numbers
        return "number"
    if isinstance(value, datetime.datetime):  # pandas.Timestamp
        return ("datetime", value.tzinfo is not None)
    return kind


def _kind_text(value: object) -> str:
    """A key value's type as :func:`comparable_kind` tells it apart (aware or naive)."""
    kind = comparable_kind(value)
    if isinstance(kind, tuple):
        return f"{'an aware' if kind[1] else 'a naive'} {type(value).__name__}"
    return type(value).__name__


def _number_type(value: object) -> type | None:
    """float for a float (numpy's too), Decimal for a decimal, else None."""
    if isinstance(value, float):  # numpy.float64 too
        return float
    if type(value) is Decimal:
        return Decimal
    item = getattr(value, "item", None)
    if type(value).__module__ == "numpy" and callable(item) and isinstance(item(), float):
        return float  # numpy.float32
    return None


def _in_the_snapshot_s_number_types(key: Key, numbers: tuple[frozenset[type], ...]) -> Key | None:
    """``key`` with a ``Decimal`` part as the float whose shortest text it is where its column
    holds floats, a float part as that text's ``Decimal`` where its column holds decimals;
    None when no part changes. A JSON scan gives floats, PostgreSQL's numeric Decimals, and
    ``Decimal('0.10') == 0.1`` is false (the lookup missed silently); a decimal matches the
    float a JSON text of its value parses to, as a float value converts into DECIMAL, never
    one that only rounds to it (``0.1000000000000000001``)."""
    parts: list[object] = []
    changed = False
    for value, held in zip(key, numbers, strict=True):
        kind = type(value)
        if kind is Decimal and float in held and value.is_finite():
            number = float(value)
            if Decimal(repr(number)) != value:
                return None  # no float is this decimal's text
            value, changed = number, True
        elif kind is float and Decimal in held and math.isfinite(value):
            value, changed = Decimal(repr(value)), True
        parts.append(value)
    return tuple(parts) if changed else None


class FullCache:
    """All rows of a table indexed by ``key_columns``; reloaded by ``trigger`` (None: load once)."""

    def __init__(
        self,
        scan: ScanFactory,
        key_columns: Sequence[str],
        trigger: CacheReloadTrigger | None,
        metrics: CacheMetricGroup,
        *,
        clock: Clock = WALL,
        name: str = "",
        retry: FailureRetry | None = None,
        index_key: Callable[[Mapping[str, object]], Hashable] | None = None,
    ) -> None:
        self._scan = scan
        #: The source's own key of a row's key values, when it has one (a Redis key name):
        #: rows are indexed, and lookups found, by it, as a point lookup finds them.
        self.index_key = index_key
        self.retry = retry  # of a scan that failed transiently: from its start
        self.key_columns = tuple(key_columns)
        self.trigger = trigger
        self.metrics = metrics
        self.clock = clock
        # load durations on a monotonic clock: a wall clock's step would make one an hour long
        self._timer: Clock = MONOTONIC if clock is WALL else clock
        self.name = name
        self._state = _State({}, None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> concurrent.futures.Future[None]:
        """Start the load thread; the future completes when the first load has ended.

        Once per cache: its one thread is what keeps loads from overlapping.
        """
        if self._thread is not None:
            raise RuntimeError(f"full cache {self.name or ''!r} already started")
        first: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(first,), name=f"full-cache-{self.name}", daemon=True
        )
        self._thread.start()
        return first

    async def open(self) -> None:
        """Load the table before the first lookup; raises :class:`CacheLoadError` on failure."""
        await asyncio.wrap_future(self.start())

    @property
    def failed(self) -> bool:
        """True while the latest load has failed (lookups raise)."""
        return self._state.error is not None

    def get(self, key: Key) -> list[Row]:
        """The rows of ``key`` in the current snapshot (a hit, even when empty)."""
        state = self._state
        if state.error is not None:
            raise self._load_error(state.error)
        self.metrics.inc(HIT_COUNT)
        if self.index_key is not None:
            if any(v is None for v in key):
                return []
            values = dict(zip(self.key_columns, key, strict=True))
            found = state.snapshot.get((self.index_key(values),))
            if found is None:
                return []
            if isinstance(found, _Unreadable):
                found.fail()
            # the key columns of the lookup's key, as a point lookup of this source gives them
            return [{**row, **values} for row in found]
        rows = state.snapshot.get(key)
        if rows is None and state.numbers:
            exact = _in_the_snapshot_s_number_types(key, state.numbers)
            if exact is not None:
                rows = state.snapshot.get(exact)
        if rows is None:
            if state.kinds:
                kinds = tuple(map(comparable_kind, key))
                if kinds not in state.comparable:
                    self._check_comparable(key, kinds, state)
            return []
        if isinstance(rows, _Unreadable):
            rows.fail()
        return list(rows)

    def _check_comparable(self, key: Key, kinds: tuple[object, ...], state: _State) -> None:
        """DataFormatError when a part of ``key`` can equal no key column value of the
        snapshot (``1`` against the text ``'1'`` a Redis key name gives, a date against the
        text a JSON scan gives): every lookup would miss, silently."""
        for position, (value, kind) in enumerate(zip(key, kinds, strict=True)):
            if value is not None and kind not in state.kinds[position]:
                column = self.key_columns[position]
                sample = next(k[position] for k in state.snapshot)
                raise DataFormatError(
                    f"full cache of {self.name or 'lookup table'}: the key {key!r} cannot match "
                    f"any scanned row: its {column!r} is {_kind_text(value)} but the scan's "
                    f"{column!r} values are {_kind_text(sample)} (e.g. {sample!r}); have the "
                    "connector return the dim schema's type (RedisConnector key_types=...)"
                )
        if len(state.comparable) < 64:  # a few kinds of keys at most
            state.comparable.add(kinds)

    def close(self, timeout: float | None = None) -> None:
        """Stop reloading; wait up to ``timeout`` seconds for a running load to finish."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _load_error(self, cause: BaseException) -> CacheLoadError:
        error = CacheLoadError(
            f"full cache load of {self.name or 'lookup table'} failed: {error_text(cause)}"
        )
        error.__cause__ = cause
        return error

    def _run(self, first: concurrent.futures.Future[None]) -> None:
        try:
            previous = self._load(self.clock.now(), initial=True)
            error = self._state.error
            if error is not None:
                first.set_exception(self._load_error(error))
                return
            first.set_result(None)
            while self.trigger is not None and not self._stop.is_set():
                due = self.trigger.next_reload(previous)
                if due is None or self.clock.wait_until(due, self._stop):
                    return
                previous = self._load(due, initial=False)
        except BaseException as error:  # a bug in a trigger must not die silently
            if not first.done():
                first.set_exception(error)
            self._state = _State(self._state.snapshot, error)

    def _load(self, scheduled: float, *, initial: bool) -> LoadTimes:
        started = self.clock.now()
        began = self._timer.now()  # latestLoadTime: failed attempts and retry waits included
        try:
            if self.retry is None:
                loaded, nbytes = self._build()
            else:
                loaded, nbytes = self.retry.call(
                    NO_KEY, self._build, sleep=self._retry_sleep, on_retry=self._on_retry
                )
        except Exception as error:
            if not self._stop.is_set():  # closed while waiting to retry: no failed load
                self.metrics.inc(NUM_LOAD_FAILURES)
                if not initial:  # a failed first load fails the task, with this error
                    log.warning(
                        "full cache of %s: reload failed (%s); its lookups fail until a "
                        "reload succeeds",
                        self.name or "lookup table",
                        error_text(error),
                    )
            self._state = _State(self._state.snapshot, error)
            return LoadTimes(scheduled, started, self.clock.now(), initial)
        if self._state.error is not None and not initial:
            log.warning(
                "full cache of %s: reloaded; lookups are served again",
                self.name or "lookup table",
            )
        took = self._timer.now() - began
        self._state = loaded
        self.metrics.set_gauge(NUM_CACHED_RECORDS, len(loaded.snapshot))
        self.metrics.set_gauge(NUM_CACHED_BYTES, nbytes)
        self.metrics.set_gauge(LATEST_LOAD_TIME, took * 1000.0)
        self.metrics.inc(LOAD_COUNT)
        return LoadTimes(scheduled, started, self.clock.now(), initial)

    def _retry_sleep(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise CacheLoadError("the full cache was closed while its scan waited to retry")

    def _on_retry(self, error: BaseException | None, attempt: int) -> None:
        self.metrics.inc(NUM_FAILURE_RETRIES)

    def _build(self) -> tuple[_State, int]:
        rows = self._scan()
        if rows is None:
            raise CacheLoadError("the source's scan() returned None: it cannot be fully cached")
        # Each load runs on a loop of its own, closed with it. Not the worker's process loop:
        # the task thread drives that one (run_until_complete), and a loop driven from two
        # threads at once fails or corrupts its state. A scan opens its client for one pass,
        # so nothing on this loop outlives the load.
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(self._index(rows))

    async def _index(self, rows: ScanResult) -> tuple[_State, int]:
        index: dict[Key, list[Row]] = {}
        unreadable: dict[Key, _Unreadable] = {}
        columns = self.key_columns
        async for row in scan_rows(rows):
            try:
                key = tuple(row[c] for c in columns)
            except KeyError as missing:
                raise CacheLoadError(
                    f"scanned row has no key column {missing}; row columns: {sorted(row)}"
                ) from None
            if any(v is None for v in key):
                continue  # a NULL key never matches a lookup
            if any(v != v for v in key):  # a NaN: the one every lookup's key holds
                key = tuple(same_nan(list(key)))
            if self.index_key is not None:
                key = (self.index_key(dict(zip(columns, key, strict=True))),)
            if type(row) is FailedKey:
                unreadable.setdefault(key, _Unreadable(row.error))
                continue
            index.setdefault(key, []).append(row)
        snapshot: dict[Key, tuple[Row, ...] | _Unreadable] = {k: tuple(v) for k, v in index.items()}
        snapshot.update(unreadable)  # the key fails whatever rows it also has, as a lookup would
        nbytes = sum(estimate_bytes(k, v) for k, v in snapshot.items() if type(v) is tuple)
        if self.index_key is not None:
            return _State(snapshot, None), nbytes
        columns_values = list(zip(*snapshot, strict=True))
        kinds = tuple(frozenset(map(comparable_kind, values)) for values in columns_values)
        numbers = tuple(
            frozenset(t for t in map(_number_type, values) if t is not None)
            for values in columns_values
        )
        return _State(snapshot, None, kinds, numbers), nbytes
