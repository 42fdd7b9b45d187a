"""Batches in, batches out: the elements of input batches through an async wait operator, and
each batch's outputs gathered back into output batches.

An engine adapter (Spark's ``mapInArrow``) receives batches and must return batches; the
operator works on elements. :class:`Rebatcher` is the one place that splits a batch into
elements and regroups what the operator emits. An output batch holds outputs of one input batch
only, each with the index of the element it came from, so the adapter can gather input columns
column-wise (Arrow ``take``) instead of per cell. A batch's outputs are yielded when its last
element is emitted, or earlier in pieces of ``flush_rows`` outputs; the order of the outputs is
the operator's output mode's. In key-ordered mode, before a batch's outputs are yielded, what
the batches read before it have gathered so far is yielded, in input order: an output never
overtakes one the operator emitted earlier, so a key's rows keep their order when they are in
different input batches (ordered mode never finishes a later batch first; unordered mode
promises no order, and flushing there would only cut batches small).

Per element the cost is one dict insert and one dict pop (the element's batch and index, found
by identity, so the elements need no wrapper and the function sees them as they are). A batch's
elements go to the operator as one list (registered in C, no ``await`` per element), and its
ready outcomes come back a batch at a time.
"""

from __future__ import annotations

from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Collection,
    Iterable,
    Sequence,
    Sized,
)
from contextlib import AbstractAsyncContextManager
from itertools import chain, repeat
from operator import attrgetter
from typing import Any, Generic, Protocol, TypeVar

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.runtime.elements import OutputMode
from asyncio_lookup.runtime.run import OperatorRun

B = TypeVar("B", bound=Sized)
E = TypeVar("E")
OUT = TypeVar("OUT")
E_contra = TypeVar("E_contra", contravariant=True)

DEFAULT_FLUSH_ROWS = 8192

_element = attrgetter("element")
_result = attrgetter("result")


class ElementOperator(Protocol[E_contra]):
    """What the rebatcher drives: ``AsyncWaitOperator`` or ``AsyncBatchWaitOperator``.

    ``running(source)`` gives the run whose ready entries the rebatcher takes a batch at a
    time; ``fans_out``: a record entry's element is a batch of elements (``.elements``) and its
    result one collection of outputs per element."""

    @property
    def fans_out(self) -> bool: ...

    def running(
        self, source: AsyncIterable[Sequence[E_contra]], *, chunked: bool
    ) -> AbstractAsyncContextManager[OperatorRun]: ...


def check_flush_rows(flush_rows: Any) -> int:
    """``flush_rows``: the most outputs in one output batch, an int >= 1."""
    if isinstance(flush_rows, bool) or not isinstance(flush_rows, int) or flush_rows < 1:
        raise ConfigurationError("flush_rows", flush_rows, "an integer >= 1")
    return flush_rows


class Rebatched(Generic[B, OUT]):
    """Outputs of (part of) one input ``batch``: ``outputs[i]`` came from element
    ``indices[i]`` of it (an element repeats once per output; one with none is absent)."""

    __slots__ = ("batch", "indices", "outputs")

    def __init__(self, batch: B) -> None:
        self.batch = batch
        self.indices: list[int] = []
        self.outputs: list[OUT] = []


class _Pending(Generic[B, OUT]):
    """An input batch with elements still in the operator, and its outputs gathered so far;
    ``seq``: its position among the input batches."""

    __slots__ = ("left", "out", "seq")

    def __init__(self, batch: B, left: int, seq: int) -> None:
        self.left = left
        self.seq = seq
        self.out: Rebatched[B, OUT] = Rebatched(batch)


class Rebatcher(Generic[B, E, OUT]):
    """Runs the elements of sized input batches through ``operator``; see the module docstring.

    ``elements(batch)`` yields exactly ``len(batch)`` distinct objects (built when the batch is
    read; the operator admits them as capacity frees up). An empty batch is skipped.
    """

    def __init__(
        self,
        operator: ElementOperator[E],
        elements: Callable[[B], Iterable[E]],
        *,
        flush_rows: int = DEFAULT_FLUSH_ROWS,
    ) -> None:
        self.operator = operator
        self.elements = elements
        self.flush_rows = check_flush_rows(flush_rows)

    async def run(
        self, batches: AsyncIterable[B] | Iterable[B]
    ) -> AsyncIterator[Rebatched[B, OUT]]:
        """The output batches; on every exit the operator's run and ``batches`` are closed."""
        owner: dict[int, tuple[_Pending[B, OUT], int]] = {}
        pending_batches: dict[int, _Pending[B, OUT]] = {}  # by seq, in input order
        flush_rows = self.flush_rows
        fans_out = self.operator.fans_out
        key_ordered = getattr(self.operator, "output_mode", None) is OutputMode.KEY_ORDERED
        source = self._source(batches, owner, pending_batches)
        try:
            async with self.operator.running(source, chunked=True) as run:
                while (entries := await run.next_batch()) is not None:
                    # (element, outputs) of each entry (the source sends no watermarks)
                    pairs: Iterable[tuple[E, Collection[OUT]]] = (
                        chain.from_iterable(
                            zip(e.element.elements, e.result, strict=True) for e in entries
                        )
                        if fans_out
                        else zip(map(_element, entries), map(_result, entries), strict=True)
                    )
                    for element, outputs in pairs:
                        pending, index = owner.pop(id(element))
                        out = pending.out
                        for output in outputs:
                            out.indices.append(index)
                            out.outputs.append(output)
                        pending.left -= 1
                        if pending.left == 0:
                            del pending_batches[pending.seq]
                            if not out.outputs:
                                continue
                        elif len(out.outputs) >= flush_rows:
                            pending.out = Rebatched(out.batch)
                        else:
                            continue
                        earlier = (  # a snapshot: the source adds batches while we yield
                            [
                                b
                                for b in pending_batches.values()
                                if b.seq < pending.seq and b.out.outputs
                            ]
                            if key_ordered
                            else ()
                        )
                        for before in earlier:
                            held, before.out = before.out, Rebatched(before.out.batch)
                            yield held
                            if run.failure is not None:
                                raise run.failure
                        yield out
                        if run.failure is not None:  # while the consumer had the batch
                            raise run.failure
        finally:
            await source.aclose()

    async def _source(
        self,
        batches: AsyncIterable[B] | Iterable[B],
        owner: dict[int, tuple[_Pending[B, OUT], int]],
        pending_batches: dict[int, _Pending[B, OUT]],
    ) -> AsyncGenerator[list[E], None]:
        """Each batch's elements, as one list, each registered in ``owner`` (in C); each
        batch in ``pending_batches`` until its last element is out."""
        inputs = as_async_iterator(batches)
        seq = 0
        try:
            async for batch in inputs:
                size = len(batch)
                if not size:
                    continue
                elements = list(self.elements(batch))
                if len(elements) != size:
                    raise ValueError(
                        f"a batch of {size} gave {len(elements)} elements; elements() must give "
                        "one per row"
                    )
                pending: _Pending[B, OUT] = _Pending(batch, size, seq)
                pending_batches[seq] = pending
                seq += 1
                owner.update(zip(map(id, elements), zip(repeat(pending), range(size)), strict=True))
                yield elements
        finally:
            # Close the input now, on this loop (not later from a garbage collector).
            await aclose(inputs)


def as_async_iterator(items: AsyncIterable[Any] | Iterable[Any]) -> AsyncIterator[Any]:
    """``items`` as an async iterator (a plain iterable is read without awaiting)."""
    if isinstance(items, AsyncIterable):
        return aiter(items)
    return _from_sync(items)


async def _from_sync(items: Iterable[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def aclose(stream: Any) -> None:
    """Close an async generator (or anything with ``aclose``); other iterators need nothing."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
