"""A flame graph of the HTTP lookup join's Python workers (``py-spy``, installed separately).

Runs variant (c) of :mod:`benchmarks.http_join` (``lookup_join`` async, capacity 100, no cache,
10 ms) on ``local[2]`` against the bench's server in its own process, attaches ``py-spy record
--subprocesses`` to the session's ``pyspark.daemon`` (the workers it forks are followed) for
``--jobs`` jobs of ``--rows`` rows, and writes the flame graph (``--format flamegraph``: SVG, or
``speedscope``: JSON).

``python -m benchmarks.profile_join [--out docs/flame_lookup_join.svg] [--rows 60000] [--jobs 3]``
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    import psutil

    from benchmarks.data import uniform_keys
    from benchmarks.server_process import ServerProcess
    from benchmarks.spark_env import orders_frame, run_to_noop, spark_session
    from benchmarks.tables import http_connector, lookup_hint, lookup_join, lookup_table

    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_join")
    parser.add_argument("--out", type=Path, default=Path("docs/flame_lookup_join.svg"))
    parser.add_argument("--format", choices=("flamegraph", "speedscope", "raw"),
                        default="flamegraph")
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--server", choices=("latency", "aiohttp"), default="latency")
    parser.add_argument("--rate", type=int, default=500, help="samples per second")
    parser.add_argument("--native", action="store_true", help="C frames too (uvloop, pyarrow)")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    spark = spark_session("asyncio-lookup-profile")
    with ServerProcess(args.server, 0.010) as server:
        keys = uniform_keys(args.rows, 100_000, seed=11)
        orders = orders_frame(spark, keys)
        table = lookup_table("Customers", http_connector(server.base_url),
                             {"lookup.cache": "NONE"})
        hint = lookup_hint("Customers", **{"async": "true", "capacity": 100})
        run_to_noop(lookup_join(orders_frame(spark, keys[:400]), table, hint=hint))  # warm-up
        daemons = [p for p in psutil.Process().children(recursive=True) if _is_daemon(p)]
        if not daemons:
            print("no pyspark.daemon found under this process", file=sys.stderr)
            return 1
        args.out.parent.mkdir(parents=True, exist_ok=True)
        recorder = subprocess.Popen(
            [py_spy, "record", "--pid", str(daemons[0].pid), "--subprocesses", "--rate",
             str(args.rate), "--format", args.format, "-o", str(args.out),
             # native stacks need the process stopped while sampled
             *(["--native"] if args.native else ["--nonblocking"])],
        )
        time.sleep(2)  # py-spy attaches
        start = time.perf_counter()
        for _ in range(args.jobs):
            run_to_noop(lookup_join(orders, table, hint=hint))
        print(f"{args.jobs} jobs of {args.rows:,} rows in {time.perf_counter() - start:.1f} s")
        recorder.send_signal(2)  # SIGINT: py-spy writes the file and exits
        recorder.wait(60)
    spark.stop()
    print(f"wrote {args.out}")
    return 0


def _is_daemon(process: Any) -> bool:
    import psutil

    try:
        return "pyspark.daemon" in " ".join(process.cmdline())
    except psutil.Error:  # gone, or a zombie (a launcher that exited)
        return False


if __name__ == "__main__":
    raise SystemExit(main())
