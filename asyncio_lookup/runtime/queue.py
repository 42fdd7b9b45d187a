"""The operator's queue: admitted records and watermarks until they are emitted.

One interface (Flink's ``StreamElementQueue``) and two implementations, chosen once when a
run starts: :class:`OrderedQueue` emits in input order, :class:`UnorderedQueue` in completion
order but never across a watermark. Entries that became emittable collect in ``ready``, in
emission order, until the run hands them to its consumer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque

from asyncio_lookup.runtime.handler import QueueEntry, ResultHandler, State, WatermarkEntry

_DONE = State.DONE


class StreamElementQueue(ABC):
    """Admitted entries in the order the output mode emits them."""

    def __init__(self) -> None:
        self.ready: list[QueueEntry] = []  # emittable, in emission order

    @abstractmethod
    def put(self, handler: ResultHandler) -> None:
        """Admit a record; sets ``handler.slot``, which takes its final result."""

    @abstractmethod
    def put_watermark(self, entry: WatermarkEntry) -> bool:
        """Admit a watermark; True when entries became ready."""

    def take(self) -> list[QueueEntry]:
        """The ready entries, which leave the queue."""
        ready = self.ready
        self.ready = []
        return ready


class OrderedQueue(StreamElementQueue):
    """Emits in input order: a finished record waits behind every earlier one."""

    def __init__(self) -> None:
        super().__init__()
        self._entries: deque[QueueEntry] = deque()

    def put(self, handler: ResultHandler) -> None:
        self._entries.append(handler)
        handler.slot = self

    def put_watermark(self, entry: WatermarkEntry) -> bool:
        entries = self._entries
        entries.append(entry)
        if entries[0] is not entry:
            return False
        self.ready.append(entries.popleft())
        return True

    def completed(self, handler: ResultHandler) -> bool:
        entries = self._entries
        if entries[0] is not handler:
            return False  # waits behind an unfinished head
        ready = self.ready
        ready.append(entries.popleft())
        while entries and entries[0].state is _DONE:
            ready.append(entries.popleft())
        return True


class Segment:
    """The records between two watermarks, and the watermark closing them (Flink's
    ``UnorderedStreamElementQueue.Segment``)."""

    __slots__ = ("done", "pending", "queue", "watermark")

    def __init__(self, queue: UnorderedQueue) -> None:
        self.queue = queue
        self.pending = 0  # records of this segment not final yet
        self.done: list[QueueEntry] = []  # final records waiting for earlier segments to drain
        self.watermark: WatermarkEntry | None = None

    def completed(self, handler: ResultHandler) -> bool:
        self.pending -= 1
        queue = self.queue
        if self is not queue.segments[0]:
            self.done.append(handler)  # waits for the earlier segments' watermarks
            return False
        queue.ready.append(handler)
        if self.pending == 0 and self.watermark is not None:
            queue.advance()
        return True


class UnorderedQueue(StreamElementQueue):
    """Emits in completion order, but never across a watermark."""

    def __init__(self) -> None:
        super().__init__()
        self.segments: deque[Segment] = deque([Segment(self)])

    def put(self, handler: ResultHandler) -> None:
        segment = self.segments[-1]
        segment.pending += 1
        handler.slot = segment

    def put_watermark(self, entry: WatermarkEntry) -> bool:
        self.segments[-1].watermark = entry
        self.segments.append(Segment(self))
        return self.advance()

    def advance(self) -> bool:
        """Emit the watermarks whose segments have drained, and what follows each; True when
        entries became ready."""
        segments = self.segments
        ready = self.ready
        advanced = False
        while len(segments) > 1:
            head = segments[0]
            if head.pending or head.watermark is None:
                break
            ready.append(head.watermark)
            segments.popleft()
            following = segments[0]
            ready.extend(following.done)
            following.done = []
            advanced = True
        return advanced
