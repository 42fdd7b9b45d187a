"""The benchmark's servers in their own processes answer alike and count what they serve; the
client-alone ceiling looks every key up; the machine's CPU clock moves (no timed assertions)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from benchmarks import cpu
from benchmarks.ceiling import ClientAlone
from benchmarks.data import customer_row
from benchmarks.server_process import KINDS, ServerProcess


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.parametrize("kind", KINDS)
def test_both_servers_answer_the_same_rows_and_count_requests(kind: str) -> None:
    with ServerProcess(kind, latency=0.0, n_customers=1_000) as server:
        assert server.pid > 0
        status, body = _get(f"{server.base_url}/customers/42")
        assert status == 200
        assert json.loads(body) == customer_row(42)
        assert _get(f"{server.base_url}/customers/5000")[0] == 404
        assert server.stats()["requests"] == 2
        server.reset()
        assert server.stats().get("requests", 0) == 0
        server.configure(0.001)
        assert _get(f"{server.base_url}/customers/1")[0] == 200
        assert server.stats()["requests"] == 1
        assert server.cpu_s() > 0


def test_the_client_alone_looks_up_every_key() -> None:
    keys = np.arange(300, dtype=np.int64) % 250  # 250 distinct customers, some twice
    with (
        ServerProcess("latency", latency=0.002, n_customers=1_000) as server,
        ClientAlone(server.base_url, keys, capacity=8, processes=2) as alone,
    ):
        server.reset()
        figures = alone.run()
        assert figures["found"] == len(keys)
        assert server.stats()["requests"] == len(keys)
        assert figures["p50_ms"] >= 2.0  # no answer before the injected latency
        assert figures["p99_ms"] >= figures["p50_ms"]


def test_machine_busy_time_never_goes_back() -> None:
    first = cpu.machine_busy_s()
    sum(i * i for i in range(200_000))
    assert cpu.machine_busy_s() >= first > 0


def test_jit_time_is_read_from_a_child_jvm_s_compiler_threads(tmp_path: Path) -> None:
    """A JVM child running (and compiling: source-file mode) a hot loop adds JIT CPU (this test
    process may have a Spark JVM child already). No timing is asserted beyond "some"."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH (Spark needs one; the machine's set-up installs it)")
    source = tmp_path / "Hot.java"
    source.write_text(
        "public class Hot { public static void main(String[] a) throws Exception {"
        " long s = 0; long end = System.nanoTime() + 3_000_000_000L;"
        " while (System.nanoTime() < end) { for (int i = 0; i < 100_000; i++) s += i % 7; }"
        " System.out.println(s); } }"
    )

    def jit() -> float:  # the JIT CPU of every JVM child of this process
        return cpu.jit_s(cpu.snapshot())

    before = jit()
    child = subprocess.Popen([java, str(source)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while jit() <= before and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if child.returncode:
            pytest.skip("this java cannot run a source file (a JRE without jdk.compiler)")
        assert jit() > before
    finally:
        child.kill()
        child.wait()


def test_one_jobs_latencies_come_from_two_cumulative_sketches() -> None:
    from asyncio_lookup.runtime.sketch import LatencySketch
    from benchmarks.http_join import _since

    first, cumulative, second = LatencySketch(), LatencySketch(), LatencySketch()
    for ms in (1.0, 2.0, 3.0, 500.0, 0.0001):
        first.add(ms)
        cumulative.add(ms)
    before = LatencySketch().merge(cumulative)
    for ms in np.linspace(10.0, 20.0, 101):
        second.add(float(ms))
        cumulative.add(float(ms))
    job = _since(before, cumulative)
    assert job.count == 101 and job.zero == 0
    assert job.sum_ms == pytest.approx(second.sum_ms)
    for q in (0.5, 0.99):
        assert job.quantile(q) == pytest.approx(second.quantile(q))
        assert job.quantile(q) == pytest.approx(np.quantile(np.linspace(10, 20, 101), q), rel=0.02)
