"""Peers side by side (``make bench-peers``): the same lookup over the same server and keys in
PyFlink's ``AsyncDataStream.ordered_wait`` (:mod:`benchmarks.peers_flink`, in its own venv
``.venv-peers``), in ``lookup_join`` on a classic Spark session, in ``lookup_join`` through
Spark Connect, and the strongest hand-rolled Spark baseline (b2) beside them.

Every engine runs in its own child process, started once and warmed up (a JVM, its Python
workers; a Spark child also builds and caches the frame of each job size and runs each of its
variants on it once before it says ready: until 2026-11-27 the first job of each size did that
inside the first measured repeat, doubling its server requests and inflating its CPU), then
driven job by job over stdin (``go <variant> <rows>``): the CPU of a job is the
child's whole process tree (its JVM and Python workers included) over the job, and the
machine's busy CPU minus the server process's is reported beside it. The server is
``aiohttp.web`` at 10 ms in its own process (:mod:`benchmarks.server_process`); capacity 100,
parallelism 2 (``local[2]``; PyFlink ``set_parallelism(2)``), ordered output everywhere
(Spark's ``lookup_join`` keeps each partition's order).

A PyFlink job pays a fixed start of several seconds (a local mini-cluster and the Beam Python
workers, per ``execute()``), a Spark job a fraction of a second, so each engine runs a short and
a long job, interleaved: the **steady** rows/s and CPU per row are the extra rows over the
extra time (and CPU) of the long job over the short one, the median over the repeats; the long
job's own rows/s is reported too.

``PEERS_PYTHON`` names PyFlink's interpreter (default ``.venv-peers/bin/python``); without it
the PyFlink row says why it was not run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import cpu
from benchmarks.harness import Context, ScenarioResult
from benchmarks.paths import REPO_ROOT
from benchmarks.server_process import TITLES, ServerProcess

LATENCY = 0.010
CAPACITY = 100
N_CUSTOMERS = 100_000
SERVER = "aiohttp"
PEERS_PYTHON = Path(os.environ.get("PEERS_PYTHON", REPO_ROOT / ".venv-peers" / "bin" / "python"))


def _sizes(ctx: Context, engine: str) -> tuple[int, int]:
    """(short, long) rows per job: a few seconds of steady work between the two."""
    if engine == "pyflink":
        return (500, 2_000) if ctx.quick else (2_000, 12_000)
    return (1_000, 4_000) if ctx.quick else (10_000, 60_000)


class _Child:
    """One engine's process, started and warmed up once, then driven over stdin."""

    def __init__(self, name: str, argv: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1, env=env,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if line != "ready":
            error = self.process.stderr.read()[-3000:] if self.process.stderr else ""
            self.process.kill()
            raise RuntimeError(f"{name} did not start: {line!r} {error}")

    def run(self, command: str) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            error = self.process.stderr.read()[-3000:] if self.process.stderr else ""
            raise RuntimeError(f"{command!r}: the child ended without an answer: {error}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{command!r}: {reply['error']}")
        return float(reply["wall_s"])

    def tree_cpu_s(self) -> float:
        """CPU seconds of the process and its descendants (a JVM, Python workers)."""
        import psutil

        try:
            root = psutil.Process(self.process.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0.0
        total = 0.0
        for proc in procs:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                continue
        return total

    def stop(self) -> None:
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(30)


@dataclasses.dataclass
class _Engine:
    name: str
    child: _Child
    variant: str  # "c" or "b2" for a Spark child; "" for PyFlink

    def run(self, rows: int) -> float:
        return self.child.run(f"go {self.variant} {rows}" if self.variant else f"go {rows}")


def run(ctx: Context) -> ScenarioResult:
    result = ScenarioResult("peers", "Peers: PyFlink AsyncDataStream, Spark classic, Spark Connect")
    engines: list[_Engine] = []
    me = [sys.executable, str(Path(__file__).resolve()), "--child"]
    with ServerProcess(SERVER, LATENCY, N_CUSTOMERS) as server:
        ctx.log(f"  {TITLES[SERVER]} at {LATENCY * 1e3:g} ms: pid {server.pid}")
        base, most = server.base_url, max(_sizes(ctx, "spark")[1], _sizes(ctx, "pyflink")[1])
        spark_sizes = ",".join(str(n) for n in _sizes(ctx, "spark"))
        children: list[_Child] = []
        try:
            classic = _Child("Spark classic", [*me, "classic", base, str(most), spark_sizes])
            children.append(classic)
            connect = _Child("Spark Connect", [*me, "connect", base, str(most), spark_sizes])
            children.append(connect)
            engines += [
                _Engine("Spark classic, lookup_join (c)", classic, "c"),
                _Engine("Spark classic, hand-rolled mapInArrow (b2)", classic, "b2"),
                _Engine("Spark Connect, lookup_join (c)", connect, "c"),
            ]
            if PEERS_PYTHON.exists():
                flink = _Child("PyFlink", [str(PEERS_PYTHON),
                                           str(Path(__file__).with_name("peers_flink.py")),
                                           base, str(most)])
                children.append(flink)
                engines.append(_Engine("PyFlink AsyncDataStream.ordered_wait", flink, ""))
            else:
                result.notes.append(
                    f"PyFlink not run: no interpreter at {PEERS_PYTHON} (`make bench-peers` "
                    "creates .venv-peers with apache-flink)."
                )
            ctx.begin("peers", len(engines) * 2 * ctx.repeats)
            runs: dict[str, list[dict[str, float]]] = {e.name: [] for e in engines}
            for _ in range(ctx.repeats):
                for engine in engines:
                    kind = "pyflink" if engine.variant == "" else "spark"
                    runs[engine.name].append(_pair(server, engine, *_sizes(ctx, kind)))
                    ctx.advance(engine.name)
        finally:
            for child in children:
                child.stop()
    for engine in engines:
        med = {k: statistics.median(r[k] for r in runs[engine.name])
               for k in runs[engine.name][0]}
        result.add_row(engine=engine.name, **med)
        ctx.log(f"  {engine.name:<44} steady {med['steady_rows_per_s']:8,.0f} rows/s, "
                f"{med['steady_cpu_us_per_row']:6.1f} µs CPU/row; long job "
                f"{med['job_rows_per_s']:8,.0f} rows/s")
    result.data["runs"] = runs
    result.notes += [
        f"Server: {TITLES[SERVER]}, {LATENCY * 1e3:g} ms, its own process; capacity {CAPACITY}, "
        "parallelism 2, ordered output, no cache; one child process per engine, warmed up "
        "(every Spark variant run once on each job size before the first measured job); every "
        "job fails unless the server saw 0.99-1.01 requests per row over it.",
        "steady_*: (long job - short job) rows over the extra time / CPU, median of the "
        "repeats; job_rows_per_s: the long job's rows over its time (fixed start included); "
        "fixed_s: the long job's time less its rows at the steady rate.",
        "steady_cpu_us_per_row: the engine's process tree (JVM, Python workers); "
        "steady_client_cpu_us_per_row: the machine's busy CPU minus the server's (the other "
        "engines' idle JVMs included); server_cpu_us_per_request beside them.",
    ]
    return result


# server requests per row each job must show: one a row, give or take (c)'s coalescing of a
# key already in flight in its partition (about 0.1 % of the rows); a warm-up job or a lost
# partition inside the measured window moves it far outside
REQUESTS_PER_ROW = (0.99, 1.01)


def _pair(server: ServerProcess, engine: _Engine, short: int, long: int) -> dict[str, float]:
    """A short and a long job of ``engine``: their times, CPU and server work. Each job fails
    unless the server saw ``REQUESTS_PER_ROW`` requests per row over it."""
    figures = []
    for rows in (short, long):
        server.reset()
        tree0, machine0, server0 = engine.child.tree_cpu_s(), cpu.machine_busy_s(), server.cpu_s()
        wall = engine.run(rows)
        tree1, machine1, server1 = engine.child.tree_cpu_s(), cpu.machine_busy_s(), server.cpu_s()
        requests = server.stats().get("requests", 0)
        low, high = REQUESTS_PER_ROW
        if not low <= requests / rows <= high:
            raise RuntimeError(f"{engine.name}, {rows:,}-row job: {requests:,} server requests "
                               f"({requests / rows:.3f} a row, outside [{low}, {high}])")
        figures.append((rows, wall, tree1 - tree0, machine1 - machine0 - (server1 - server0),
                        server1 - server0, requests))
    (r0, w0, t0, m0, s0, q0), (r1, w1, t1, m1, s1, q1) = figures
    steady = (r1 - r0) / (w1 - w0)
    return {
        "rows": r1,
        "steady_rows_per_s": steady,
        "job_rows_per_s": r1 / w1,
        "fixed_s": w1 - r1 / steady,
        "steady_cpu_us_per_row": (t1 - t0) / (r1 - r0) * 1e6,
        "steady_client_cpu_us_per_row": (m1 - m0) / (r1 - r0) * 1e6,
        "server_cpu_us_per_request": (s0 + s1) / (q0 + q1) * 1e6 if q0 + q1 else 0.0,
        "server_requests_per_row": q1 / r1,
    }


# -- the Spark child ----------------------------------------------------------------------------


def _spark_child(mode: str, base_url: str, max_rows: int, sizes: list[int]) -> None:
    """A classic or Connect ``local[2]`` session; ``go c|b2 <rows>`` runs one job. Before it
    says ``ready``, it builds and caches the frame of each of ``sizes`` rows and runs every
    variant of its mode on each once, untimed, so that no job the parent measures includes a
    frame's building or a warm-up job; a ``go`` for any other size is an error."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from benchmarks.baselines import JOINED_SCHEMA, hand_rolled_arrow
    from benchmarks.data import uniform_keys
    from benchmarks.spark_env import orders_frame, run_to_noop
    from benchmarks.tables import http_connector, lookup_hint, lookup_join, lookup_table

    builder = SparkSession.builder.appName(f"bench-peers-{mode}")
    builder = builder.remote("local[2]") if mode == "connect" else builder.master("local[2]")
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "3g")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    keys = uniform_keys(max_rows, N_CUSTOMERS, seed=11)
    frames: dict[int, Any] = {}
    table = lookup_table("Customers", http_connector(base_url, connections=CAPACITY),
                         {"lookup.cache": "NONE"})
    hint = lookup_hint("Customers", **{"async": "true", "capacity": CAPACITY})
    b2 = hand_rolled_arrow(base_url, CAPACITY)

    def job(variant: str, rows: int) -> None:
        frame = frames[rows]
        if variant == "b2":
            run_to_noop(frame.mapInArrow(b2, JOINED_SCHEMA))
        else:
            run_to_noop(lookup_join(frame, table, hint=hint))

    variants = ["c", "b2"] if mode == "classic" else ["c"]
    for rows in [400, *sizes]:  # built, cached and joined once before the parent's clock
        frames[rows] = orders_frame(spark, keys[:rows])
        for variant in variants:
            job(variant, rows)
    print("ready", flush=True)
    for line in sys.stdin:
        command, variant, rows = [*line.split(), "", "", ""][:3]
        if command != "go":
            break
        if int(rows) not in frames or variant not in variants:
            print(json.dumps({"error": f"{mode} was not warmed up for {variant} on {rows} rows "
                                       f"(only {variants} on {sorted(frames)})"}), flush=True)
            continue
        start = time.perf_counter()
        job(variant, int(rows))
        print(json.dumps({"wall_s": time.perf_counter() - start}), flush=True)
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _spark_child(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                     [int(n) for n in sys.argv[5].split(",")])
        raise SystemExit(0)
    from benchmarks.cli import main as cli_main

    raise SystemExit(cli_main(["peers", *sys.argv[1:]]))
