"""The client alone, outside Spark: what the HTTP join could reach at best on this machine.

One plain process per Spark partition, each with the library's ``HttpConnector`` (default
``asyncio`` client, uvloop, ``max_connections=capacity``) keeping ``capacity`` point lookups in
flight over its share of the same keys (``keys[i::processes]``), against the same server, the
garbage collector's young generation set as a Spark worker sets it for a partition. No Spark, no
Arrow, no operator: the lookup function and the client only. The processes open
their connections and warm up, then start together; the wall time runs from the start signal
to the last answer. Each reports its lookups' latency (p50/p99, from ``async_lookup`` being
called to its answer), so the observed latency can be set beside the configured one.

``ClientAlone(base_url, keys, capacity, processes)`` starts them; each ``run()`` returns one
pass's figures; the parent measures CPU around it (the children are its own). ``run(rows)``
passes over the first ``rows`` keys only (each process over its share of them), with the same
processes and connections: a short pass beside the whole one gives the ceiling's steady state
(the extra rows over the extra time), its own fixed costs per pass (the start signal, the
ramp-up, the drain, the JSON reports) taken out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class ClientAlone:
    """``processes`` started and warmed up once; :meth:`run` times one pass over the keys."""

    def __init__(self, base_url: str, keys: np.ndarray, capacity: int, processes: int) -> None:
        self.base_url, self.capacity, self.processes = base_url, capacity, processes
        self.rows = len(keys)
        self._dir = tempfile.TemporaryDirectory(prefix="ceiling-")
        self._keys = Path(self._dir.name) / "keys.npy"
        np.save(self._keys, np.asarray(keys, dtype=np.int64))
        self._children: list[subprocess.Popen[str]] = []

    def start(self) -> ClientAlone:
        for index in range(self.processes):
            child = subprocess.Popen(
                [sys.executable, __file__, self.base_url, str(self._keys), str(index),
                 str(self.processes), str(self.capacity)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            )
            self._children.append(child)
        for child in self._children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                self.stop()
                raise RuntimeError("a client-alone process failed to start")
        return self

    def run(self, rows: int | None = None) -> dict[str, Any]:
        """One timed pass: every process over its keys (of the first ``rows`` keys when given),
        started together."""
        rows = self.rows if rows is None else rows
        if not 0 < rows <= self.rows:
            raise ValueError(f"rows must be in 1..{self.rows}, not {rows}")
        start = time.perf_counter()
        for child in self._children:
            assert child.stdin is not None
            child.stdin.write(f"go {rows}\n")
            child.stdin.flush()
        reports = []
        for child in self._children:
            assert child.stdout is not None
            reports.append(json.loads(child.stdout.readline()))
        wall = time.perf_counter() - start
        latencies = np.concatenate([np.asarray(r["latencies_ms"]) for r in reports])
        return {
            "wall_s": wall,
            "p50_ms": float(np.percentile(latencies, 50)),
            "p99_ms": float(np.percentile(latencies, 99)),
            "found": sum(r["found"] for r in reports),
            "lookups": len(latencies),
        }

    def stop(self) -> None:
        for child in self._children:
            try:
                if child.stdin is not None:
                    child.stdin.close()
                child.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                child.kill()
        self._children = []
        self._dir.cleanup()

    def __enter__(self) -> ClientAlone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# the young-generation threshold a Spark worker runs a partition with (spark/worker_gc.py)
GC_YOUNG_THRESHOLD = 10_000


def _child(base_url: str, keys_path: str, index: int, processes: int, capacity: int) -> None:
    import asyncio
    import gc

    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])  # as in the Spark worker

    from asyncio_lookup.connectors import HttpConnector
    from asyncio_lookup.runtime.loop import new_event_loop

    keys = [int(k) for k in np.load(keys_path)[index::processes]]

    async def main() -> None:
        connector = HttpConnector(
            f"{base_url}/customers/{{id}}", ["id"], max_connections=capacity, timeout=60,
        )
        fn = connector.async_lookup_function()
        await fn.open()
        loop = asyncio.get_running_loop()

        async def one_pass(todo: list[int]) -> tuple[list[float], int]:
            latencies: list[float] = []
            found = 0
            pending = iter(todo)

            async def worker() -> None:
                nonlocal found
                lookup, clock = fn.async_lookup, time.perf_counter
                for key in pending:
                    start = clock()
                    rows = await lookup((key,))
                    latencies.append(clock() - start)
                    found += len(rows)

            await asyncio.gather(*(worker() for _ in range(capacity)))
            return latencies, found

        try:
            await one_pass(keys[: capacity * 3])  # open the connections, warm up
            print("ready", flush=True)
            while True:
                command = (await loop.run_in_executor(None, sys.stdin.readline)).split()
                if not command or command[0] != "go":
                    break
                # "go ROWS": its share of the first ROWS keys, keys[:ROWS][index::processes]
                share = len(range(index, int(command[1]), processes)) if command[1:] else len(keys)
                latencies, found = await one_pass(keys[:share])
                print(json.dumps({"latencies_ms": [round(x * 1e3, 3) for x in latencies],
                                  "found": found}), flush=True)
        finally:
            await fn.close()

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
