"""A real Spark Connect client and server: the README's Connect recipe, run for real.

The server is started with the pyspark package's ``sbin/start-connect-server.sh`` on a free
loopback port (its Python workers run this interpreter, which has the package). The client is
a venv with only the client package (``pip install asyncio-lookup[connect]`` of a wheel of
this worktree: ``pyspark-client``, no JVM, no ``SparkContext``); it runs a lookup join on the server
and checks the rows and ``LookupTable.metrics()``. Everything started is stopped, even on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from asyncio_lookup._native import PURE_ENV
from tests.checkout import copy_tracked_files

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]

CLIENT_JOB = r"""
import json, sys
from collections import Counter

import pyspark
from pyspark.sql import SparkSession, functions as F

try:
    from pyspark import SparkContext  # noqa: F401
    classic = True
except ImportError:
    classic = False

from asyncio_lookup.connectors import InMemoryConnector
from asyncio_lookup.spark import LookupTable, async_map, async_map_metrics, lookup_join

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
rows = [{"id": i, "name": f"c{i}"} for i in range(0, 100, 2)]
dim = LookupTable("Customers", "id INT, name STRING", InMemoryConnector(rows, ["id"]))
orders = spark.range(200).select(
    F.col("id").cast("int").alias("order_id"), (F.col("id") % 100).cast("int").alias("cid")
).repartition(3)
joined = lookup_join(orders, dim, on=[("cid", "id")], how="left", hints="SHUFFLE_HASH('Customers')")
got = Counter((r.order_id, r.cid, r.name) for r in joined.collect())
want = Counter((n, n % 100, f"c{n % 100}" if n % 2 == 0 else None) for n in range(200))


async def double(row):
    return [{"n": row["order_id"] * 2}]


mapped = async_map(orders, double, "n INT", timeout=10, metrics_id="double")
doubled = sorted(r.n for r in mapped.collect())
print("RESULT " + json.dumps({
    "client_has_spark_context": classic,
    "pyspark_version": pyspark.__version__,
    "session_type": type(spark).__module__,
    "rows_equal": got == want,
    "metrics": dim.metrics(),
    "async_map_ok": doubled == [2 * n for n in range(200)],
    "async_map_metrics": async_map_metrics("double"),
}))
spark.stop()
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def client_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the client-only package and this worktree, as a Connect-only user has."""
    directory = tmp_path_factory.mktemp("client")
    venv.EnvBuilder(with_pip=False).create(directory / "venv")
    python = directory / "venv" / "bin" / "python"
    # The pure-Python wheel: the client runs no HTTP lookup (the server's workers do), and
    # compiling the HTTP client with mypyc would cost this test about 12 s of CPU for nothing.
    # This interpreter's pip and build tools (no isolated build env, no pip in the venv, no .pyc
    # compiled ahead) halve the setup's CPU; the venv gets what a user's pip install gets.
    env = {**os.environ, PURE_ENV: "1"}

    def pip(*args: str | Path) -> None:
        command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *map(str, args)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]

    # Built from a copy of the tracked files: setuptools builds in the source tree's build/,
    # which the cluster test's wheel build (from the checkout) may be using at the same time.
    source = directory / "src"
    copy_tracked_files(source)
    pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", directory, source)
    (wheel,) = directory.glob("asyncio_lookup-*.whl")
    pip("--python", python, "install", "--quiet", "--no-compile", f"{wheel}[connect]")
    return python


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sbin/start-connect-server.sh`` of the pyspark package on a free loopback port."""
    import pyspark

    home = Path(pyspark.__file__).parent
    work = tmp_path_factory.mktemp("connect-server")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_PID_DIR=str(work / "pids"),
        SPARK_IDENT_STRING=f"asyncio-lookup-{port}",
        PYSPARK_PYTHON=sys.executable,
    )
    start = [
        str(home / "sbin" / "start-connect-server.sh"),
        "--master", "local[2]",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2",
        "--driver-memory", "512m",
    ]  # fmt: skip
    try:
        started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stdout + started.stderr
        _wait_for_port(port, work / "logs", timeout=120)
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run(
            [str(home / "sbin" / "stop-connect-server.sh")],
            env=env,
            capture_output=True,
            timeout=120,
        )
        for pid_file in (work / "pids").glob("*.pid"):  # the daemon, should stop not have
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().strip()), 9)
        shutil.rmtree(work, ignore_errors=True)


def _wait_for_port(port: int, logs: Path, timeout: float) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    tails = "".join(p.read_text()[-3000:] for p in logs.glob("*.out"))
    raise AssertionError(f"the Connect server did not listen on {port}:\n{tails}")


def test_a_client_only_venv_runs_a_lookup_join_on_a_connect_server(
    client_python: Path, connect_server: str, tmp_path: Path
) -> None:
    job = tmp_path / "job.py"
    job.write_text(CLIENT_JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    result = subprocess.run(
        [str(client_python), str(job), connect_server],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    report = f"exit {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    assert result.returncode == 0, report
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))
    got = json.loads(line[len("RESULT ") :])
    assert got["client_has_spark_context"] is False, "the client venv must be client-only"
    assert got["session_type"].startswith("pyspark.sql.connect"), got
    assert got["rows_equal"], report
    metrics = got["metrics"]
    assert metrics["numLookups"] == 200
    assert metrics["numCompleted"] == 200
    assert all(isinstance(metrics[n], int) for n in ("numLookups", "numCompleted")), metrics
    assert got["async_map_ok"], report
    assert got["async_map_metrics"]["numCompleted"] == 200
