"""Batching and coalescing of concurrent async lookups."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest

from asyncio_lookup.errors import (
    HttpStatusError,
    LookupFailedError,
    ResultTypeError,
    TransientError,
)
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.functions import Key
from asyncio_lookup.lookup.options import LookupOptions
from tests.lookup.support import AsyncFn, BatchFn, Source, Table


def row(key: Key) -> dict[str, object]:
    return {"id": key[0], "v": f"v{key[0]}"}


def table_of(n: int) -> Table:
    return Table({(k,): [row((k,))] for k in range(n)})


async def open_chain(fn: AsyncFn, **opts: str) -> LookupChain:
    options = LookupOptions.from_dict({f"lookup.{k.replace('_', '-')}": v for k, v in opts.items()})
    chain = LookupChain.create(Source(fn.table, async_=fn), options, prefer_async=True)
    await chain.open()
    return chain


@pytest.mark.parametrize(("n", "size"), [(25, 10), (64, 64), (7, 1), (100, 32)])
async def test_n_distinct_keys_become_ceil_n_over_size_calls(n: int, size: int) -> None:
    table = table_of(n)
    chain = await open_chain(BatchFn(table), **{"batch.max-size": str(size)})
    results = await asyncio.gather(*(chain.async_lookup((k,)) for k in range(n)))
    assert results == [[row((k,))] for k in range(n)]
    snap = chain.metrics.snapshot()
    assert snap["numExternalCalls"] == math.ceil(n / size)
    assert snap["numExternalKeys"] == n and snap["numLookups"] == n
    assert all(len(b) <= size for b in table.batches)
    await chain.close()


@pytest.mark.parametrize("size", ["1", "64"])
async def test_m_concurrent_lookups_of_one_key_make_one_call(size: str) -> None:
    table = table_of(3)
    chain = await open_chain(BatchFn(table), **{"batch.max-size": size})
    results = await asyncio.gather(*(chain.async_lookup((2,)) for _ in range(50)))
    assert results == [[row((2,))]] * 50
    assert len({id(r) for r in results}) == 50  # every caller has its own list
    assert table.calls == [(2,)]
    snap = chain.metrics.snapshot()
    assert (snap["numExternalCalls"], snap["numCoalescedLookups"]) == (1, 49)
    await chain.close()


async def test_errors_reach_exactly_the_failing_callers() -> None:
    table = table_of(8)
    table.errors[(3,)] = [ValueError("bad key 3")]
    table.errors[(5,)] = [LookupError("no such shard")]
    chain = await open_chain(BatchFn(table), **{"batch.max-size": "8", "max-retries": "0"})
    keys = [0, 1, 2, 3, 3, 4, 5, 6, 7]
    results = await asyncio.gather(
        *(chain.async_lookup((k,)) for k in keys), return_exceptions=True
    )
    for key, result in zip(keys, results, strict=True):
        # wrapped, naming the key, with the connector's error as the cause
        if key == 3:
            assert isinstance(result, LookupFailedError)
            assert isinstance(result.__cause__, ValueError)
            assert "key (3,): ValueError: bad key 3" in str(result)
        elif key == 5:
            assert isinstance(result, LookupFailedError)
            assert isinstance(result.__cause__, LookupError)
        else:
            assert result == [row((key,))]
    assert len(table.batches) == 1
    await chain.close()


async def test_a_failing_batch_call_fails_only_its_keys() -> None:
    class HalfBroken(BatchFn):
        async def async_lookup_batch(self, keys):  # type: ignore[no-untyped-def]
            if (0,) in keys:
                raise RuntimeError("batch exploded")
            return await super().async_lookup_batch(keys)

    table = table_of(8)
    chain = await open_chain(HalfBroken(table), **{"batch.max-size": "4"})
    results = await asyncio.gather(
        *(chain.async_lookup((k,)) for k in range(8)), return_exceptions=True
    )
    assert all(isinstance(r.__cause__, RuntimeError) for r in results[:4])
    assert [str(r).split(":")[0] for r in results[:4]] == [
        f"lookup of key ({k},)" for k in range(4)
    ]
    assert results[4:] == [[row((k,))] for k in range(4, 8)]
    await chain.close()


async def test_transient_per_key_error_is_retried_for_that_key_only() -> None:
    table = table_of(6)
    table.errors[(4,)] = [TransientError("try later", retry_after=0.0)]
    fn = BatchFn(table)
    options = LookupOptions.from_dict({"lookup.batch.max-size": "6"})
    sleeps: list[float] = []

    async def no_wait(seconds: float) -> None:
        sleeps.append(seconds)

    chain = LookupChain.create(
        Source(table, async_=fn), options, prefer_async=True, async_sleep=no_wait
    )
    await chain.open()
    results = await asyncio.gather(*(chain.async_lookup((k,)) for k in range(6)))
    assert results == [[row((k,))] for k in range(6)]
    assert [len(b) for b in table.batches] == [6]  # the retry of key 4 alone is a plain lookup
    assert table.calls.count((4,)) == 2 and len(sleeps) == 1
    assert chain.metrics.snapshot()["numFailureRetries"] == 1
    await chain.close()


async def test_max_wait_gathers_lookups_across_loop_iterations() -> None:
    table = table_of(8)
    chain = await open_chain(BatchFn(table), **{"batch.max-size": "4", "batch.max-wait": "10 s"})

    async def staggered(k: int) -> list[object]:
        for _ in range(k):
            await asyncio.sleep(0)
        return await chain.async_lookup((k,))

    results = await asyncio.gather(*(staggered(k) for k in range(8)))
    assert results == [[row((k,))] for k in range(8)]
    assert table.batches == [
        [(0,), (1,), (2,), (3,)],
        [(4,), (5,), (6,), (7,)],
    ]  # flushed when full
    await chain.close()


async def test_without_max_wait_staggered_lookups_go_separately() -> None:
    table = table_of(3)
    chain = await open_chain(BatchFn(table), **{"batch.max-size": "8"})
    for k in range(3):
        await chain.async_lookup((k,))
    assert chain.metrics.snapshot()["numExternalCalls"] == 3
    await chain.close()


async def test_function_without_batch_read_is_called_per_key() -> None:
    table = table_of(5)
    fn = AsyncFn(table)
    assert not fn.supports_batch
    chain = await open_chain(fn, **{"batch.max-size": "64"})
    results = await asyncio.gather(*(chain.async_lookup((k % 3,)) for k in range(9)))
    assert results == [[row((k % 3,))] for k in range(9)]
    snap = chain.metrics.snapshot()
    assert (snap["numExternalCalls"], snap["numCoalescedLookups"]) == (3, 6)
    await chain.close()


async def test_a_cancelled_caller_does_not_cancel_the_shared_call() -> None:
    gate = asyncio.Event()
    table = table_of(2)
    chain = await open_chain(BatchFn(table, gate))
    first = asyncio.ensure_future(chain.async_lookup((1,)))
    second = asyncio.ensure_future(chain.async_lookup((1,)))
    await asyncio.sleep(0.01)
    first.cancel()
    gate.set()
    assert await second == [row((1,))]
    assert first.cancelled()
    assert table.calls == [(1,)]
    await chain.close()


async def test_close_cancels_in_flight_calls() -> None:
    table = table_of(2)
    chain = await open_chain(BatchFn(table, asyncio.Event()))
    pending = asyncio.ensure_future(chain.async_lookup((1,)))
    await asyncio.sleep(0.01)
    await chain.close()
    with pytest.raises(asyncio.CancelledError):
        await pending


async def test_mismatched_batch_result_is_an_error_for_every_key() -> None:
    class Short(BatchFn):
        async def async_lookup_batch(self, keys):  # type: ignore[no-untyped-def]
            return [[]]

    chain = await open_chain(Short(table_of(3)))
    results = await asyncio.gather(
        *(chain.async_lookup((k,)) for k in range(3)), return_exceptions=True
    )
    assert all("1 results for 3 keys" in str(r) for r in results)
    await chain.close()


@pytest.mark.parametrize("batch", ["1", "8"])
async def test_close_before_a_call_started_still_releases_its_callers(batch: str) -> None:
    # The connector call's task is created but has not run yet when the chain closes: a task
    # cancelled before its first step never runs its handlers, so the waiting caller must be
    # released by close() itself rather than hang.
    chain = await open_chain(BatchFn(table_of(2), asyncio.Event()), **{"batch.max-size": batch})
    pending = asyncio.ensure_future(chain.async_lookup((1,)))
    await asyncio.sleep(0)  # the caller runs up to its wait; the call task is only scheduled
    if batch != "1":
        await asyncio.sleep(0)  # the flush (call_soon) creates the call task
    await chain.close()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(pending, 5)


async def test_without_batching_the_first_caller_makes_the_call_in_its_own_task() -> None:
    table = table_of(2)
    chain = await open_chain(AsyncFn(table), **{"batch.max-size": "1"})
    tasks_before = len(asyncio.all_tasks())
    pending = asyncio.ensure_future(chain.async_lookup((1,)))
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == tasks_before + 1  # the caller only: no call task
    assert await pending == [row((1,))]
    await chain.close()


async def test_without_batching_a_cancelled_first_caller_hands_the_call_on() -> None:
    # The first caller's call runs in its task, so cancelling it cancels that call; the callers
    # still waiting for the key get a call of their own and their rows.
    gate = asyncio.Event()
    table = table_of(2)
    chain = await open_chain(AsyncFn(table, gate), **{"batch.max-size": "1"})
    first = asyncio.ensure_future(chain.async_lookup((1,)))
    second = asyncio.ensure_future(chain.async_lookup((1,)))
    third = asyncio.ensure_future(chain.async_lookup((1,)))
    await asyncio.sleep(0.01)
    first.cancel()
    await asyncio.sleep(0)
    gate.set()
    assert await second == [row((1,))]
    assert await third == [row((1,))]
    assert first.cancelled()
    snap = chain.metrics.snapshot()
    assert (snap["numExternalCalls"], snap["numCoalescedLookups"]) == (2, 2)
    await chain.close()


async def test_without_batching_an_error_reaches_every_caller_of_the_key() -> None:
    gate = asyncio.Event()
    table = table_of(2)
    table.errors[(1,)] = [ValueError("bad key 1")]
    chain = await open_chain(AsyncFn(table, gate), **{"batch.max-size": "1"})
    callers = [asyncio.ensure_future(chain.async_lookup((1,))) for _ in range(3)]
    await asyncio.sleep(0.01)
    gate.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert [str(r) for r in results] == ["lookup of key (1,): ValueError: bad key 1"] * 3
    assert chain.metrics.snapshot()["numExternalCalls"] == 1
    await chain.close()


async def test_without_batching_close_waits_for_calls_running_in_their_callers() -> None:
    # The function is closed only after every call of it has unwound.
    class Tracking(AsyncFn):
        active = 0
        active_at_close: int | None = None

        async def async_lookup(self, key: Key) -> list[dict[str, object]]:
            self.active += 1
            try:
                await asyncio.Event().wait()
                return []
            finally:
                self.active -= 1

        async def close(self) -> None:
            self.active_at_close = self.active

    fn = Tracking(table_of(2))
    chain = await open_chain(fn, **{"batch.max-size": "1"})
    caller = asyncio.ensure_future(chain.async_lookup((1,)))
    await asyncio.sleep(0.01)
    assert fn.active == 1
    await chain.close()
    assert fn.active_at_close == 0
    with pytest.raises(asyncio.CancelledError):
        await caller


def test_lookups_on_another_thread_count_in_that_threads_table() -> None:
    """The chain and its batcher keep the counting thread's tables (the hot path looks them up
    once); lookups made later on a loop in another thread count in that thread's tables, so
    no table has two writers and the snapshot still sums every lookup and call."""
    import threading

    table = table_of(20)
    loop = asyncio.new_event_loop()
    chain = loop.run_until_complete(open_chain(AsyncFn(table)))

    def lookups(keys: range) -> None:
        async def run() -> None:
            assert await asyncio.gather(*(chain.async_lookup((k,)) for k in keys)) == [
                [row((k,))] for k in keys
            ]

        asyncio.run(run())

    try:
        lookups(range(0, 5))  # this thread, a loop other than the chain's
        other = threading.Thread(target=lookups, args=(range(5, 20),))
        other.start()
        other.join()
        snap = chain.metrics.snapshot()
        assert snap["numLookups"] == 20
        assert snap["numExternalCalls"] == snap["numExternalKeys"] == 20
        assert chain.metrics.drain_calls().count == 20
        per_thread = [t["numExternalCalls"] for t in chain.metrics._by_thread.values()]
        assert sorted(per_thread) == [5, 15]
    finally:
        loop.run_until_complete(chain.close())
        loop.close()


async def test_a_batch_function_that_reorders_its_keys_fails_instead_of_pairing_wrongly() -> None:
    class Reversing(BatchFn):
        async def async_lookup_batch(self, keys):  # type: ignore[no-untyped-def]
            answers = await super().async_lookup_batch(keys)
            keys.reverse()  # after answering in the order given: pairing by the list is wrong
            return answers

    table = table_of(3)
    chain = await open_chain(Reversing(table))
    results = await asyncio.gather(
        *(chain.async_lookup((k,)) for k in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, ResultTypeError) for r in results), results
    assert all("changed the list of 3 items it was given (it reordered" in str(r) for r in results)
    await chain.close()


async def test_a_batch_function_answering_with_a_mapping_fails_every_key() -> None:
    class ByKey(BatchFn):
        async def async_lookup_batch(self, keys):  # type: ignore[no-untyped-def]
            return {key: [row(key)] for key in keys}

    chain = await open_chain(ByKey(table_of(3)))
    results = await asyncio.gather(
        *(chain.async_lookup((k,)) for k in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, ResultTypeError) for r in results), results
    assert all("returned dict" in str(r) and "one entry per key" in str(r) for r in results)
    await chain.close()


@pytest.mark.parametrize("size", ["1", "8"])
async def test_a_row_that_is_no_mapping_fails_its_key(size: str) -> None:
    # None among the rows would be read as a LEFT join's padding for an unmatched key
    class NoneRow(BatchFn):
        async def async_lookup(self, key):  # type: ignore[no-untyped-def]
            return [None]

        async def async_lookup_batch(self, keys):  # type: ignore[no-untyped-def]
            return [[None] for _ in keys]

    chain = await open_chain(NoneRow(table_of(2)), **{"batch.max-size": size})
    results = await asyncio.gather(
        *(chain.async_lookup((k,)) for k in range(2)), return_exceptions=True
    )
    assert all(isinstance(r, ResultTypeError) for r in results), results
    assert all("returned NoneType None in its collection" in str(r) for r in results)
    await chain.close()


@pytest.mark.parametrize("most", [0, -1, "8", 2.5])
async def test_a_max_batch_size_that_is_no_positive_int_is_refused_by_name(most: object) -> None:
    class Odd(BatchFn):
        @property
        def max_batch_size(self) -> object:  # type: ignore[override]
            return most

    from asyncio_lookup.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"Odd\.max_batch_size"):
        await open_chain(Odd(table_of(2)))


@pytest.mark.parametrize("size", ["1", "8"])
async def test_a_tasks_end_cancels_calls_no_caller_waits_for(size: str) -> None:
    # A call that outlived its callers (handed on, or batched) answered the next Spark task's
    # lookups of the key in the same worker, though it began before them (key-ordered
    # records then beat their timeouts with an older call's answer)
    gate = asyncio.Event()
    table = table_of(2)
    chain = await open_chain(AsyncFn(table, gate), **{"batch.max-size": size})
    first = asyncio.ensure_future(chain.async_lookup((1,)))
    second = asyncio.ensure_future(chain.async_lookup((1,)))
    await asyncio.sleep(0.01)
    first.cancel()
    await asyncio.sleep(0)
    second.cancel()  # the call handed on to it (or its batch) runs on, for nobody
    await asyncio.sleep(0.01)
    await chain.end_task()
    assert chain.metrics.snapshot()["numExternalCalls"] in (1, 2)
    calls = chain.metrics.snapshot()["numExternalCalls"]
    gate.set()
    assert await chain.async_lookup((1,)) == [row((1,))]
    assert chain.metrics.snapshot()["numExternalCalls"] == calls + 1  # a call of its own
    await chain.close()


async def test_a_call_cancelled_before_its_first_step_leaves_no_key_in_flight() -> None:
    """A Spark task's end (cancel_calls) in the loop turn its flush fired: the call never ran,
    its key stayed in flight, and the next task's lookup of it waited for an answer for ever."""
    from asyncio_lookup.lookup.batch import KeyBatcher
    from asyncio_lookup.lookup.metrics import CacheMetricGroup

    table = Table({(1,): [{"id": 1}]})
    batcher = KeyBatcher(BatchFn(table), CacheMetricGroup(), max_size=8, max_wait=0.01)
    future = batcher.load((1,))
    future.cancel()  # its caller timed out
    batcher._flush()  # the max-wait timer fires in the same loop turn as the task's end
    await batcher.cancel_calls()
    assert not batcher._in_flight
    assert await asyncio.wait_for(batcher.lookup((1,)), 1.0) == [{"id": 1}]


class RefusesBadKey(BatchFn):
    """A service that answers 400 to any request holding the key (3,): a batch as a whole."""

    async def async_lookup(self, key: Key) -> list[dict[str, object]]:
        self.table.calls.append(key)
        if key == (3,):
            raise HttpStatusError("HTTP GET /c/3 answered 400", 400)
        return [row(key)]

    async def async_lookup_batch(self, keys: Sequence[Key]) -> list[object]:
        self.table.batches.append(list(keys))
        if (3,) in keys:
            error = HttpStatusError("HTTP POST /batch answered 400", 400)
            error.split_batch = True
            raise error
        return [[row(k)] for k in keys]


async def test_a_batch_one_key_made_fail_is_split_until_that_key_is_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 400 to a batch request failed every key of the batch (on_error='keep': valid rows
    output as failures naming a key that was fine)."""
    table = table_of(8)
    chain = await open_chain(RefusesBadKey(table), **{"batch.max-size": "8"})
    results = await asyncio.gather(
        *(chain.async_lookup((k,)) for k in range(8)), return_exceptions=True
    )
    assert [r for k, r in enumerate(results) if k != 3] == [[row((k,))] for k in range(8) if k != 3]
    assert isinstance(results[3], HttpStatusError) and "/c/3 answered 400" in str(results[3])
    # 8 keys, then halves holding (3,) until it is alone: each half a call of its own
    assert table.batches == [
        [(k,) for k in range(8)],
        [(0,), (1,), (2,), (3,)],
        [(4,), (5,), (6,), (7,)],
        [(0,), (1,)],
        [(2,), (3,)],
    ]
    assert table.calls == [(2,), (3,)]
    assert chain.metrics.snapshot()["numExternalCalls"] == 7
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "a batch of 8 keys was refused as a whole (HTTP POST /batch answered 400)" in warning
    # once per task: the next task of the chain (a Spark task's end between) warns again
    await chain.end_task()
    await asyncio.gather(*(chain.async_lookup((k,)) for k in range(8, 12)), return_exceptions=True)
    await asyncio.gather(*(chain.async_lookup((k,)) for k in (3, 12)), return_exceptions=True)
    assert len([r for r in caplog.records if "refused as a whole" in r.getMessage()]) == 2
    await chain.close()
