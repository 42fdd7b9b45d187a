"""The README's cluster recipe, run for real on a Spark standalone master and worker.

One master and one worker (started from the pyspark package on free loopback ports) serve both
submissions. The executors' Python stands for a cluster node: it has the core dependencies
(what ``pip install asyncio-lookup`` installs) but neither asyncio_lookup nor pyspark (that comes
from the Spark installation), so the executors can import the library only from what
``--py-files`` ships.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
MISSING = "ModuleNotFoundError: No module named 'asyncio_lookup'"


def _load_standalone() -> ModuleType:
    path = REPO / "examples" / "cluster" / "standalone.py"
    spec = importlib.util.spec_from_file_location("cluster_standalone", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


standalone = _load_standalone()


# the core dependencies' modules (pyproject's `dependencies`), which a node must have
CORE_MODULES = "asyncpg, httptools, orjson, pyarrow, redis, sqlglot, tenacity, xxhash"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster")


@pytest.fixture(scope="module")
def package(workdir: Path) -> Path:
    """The recipe's build step: ``pip wheel --no-deps``, the wheel copied to a ``.zip``."""
    return standalone.build_zip(workdir / "dist")


@pytest.fixture(scope="module")
def node_python(workdir: Path) -> Path:
    python = standalone.node_python(workdir / "node")
    deps = subprocess.run(
        [str(python), "-c", f"import {CORE_MODULES}"],
        capture_output=True,
        text=True,
    )
    assert deps.returncode == 0, deps.stderr
    lib = subprocess.run(
        [str(python), "-c", "import asyncio_lookup"], cwd=workdir, capture_output=True, text=True
    )
    assert MISSING in lib.stderr, "the executors' Python must not have asyncio_lookup itself"
    return python


@pytest.fixture(scope="module")
def cluster(workdir: Path) -> Iterator[Any]:
    with standalone.StandaloneCluster(workdir / "spark") as running:
        yield running


def _report(result: subprocess.CompletedProcess[str]) -> str:
    # spark-submit (client mode) sends the Python driver's output and traceback to stdout.
    out, err = result.stdout[-6000:], result.stderr[-3000:]
    return f"exit {result.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"


def test_shipped_zip_runs_the_lookup_join_on_the_executors(
    cluster: Any, package: Path, node_python: Path
) -> None:
    result = cluster.submit(standalone.JOB, executor_python=node_python, py_files=[package])
    assert result.returncode == 0, _report(result)
    assert "OK: lookup_join equals the plain Spark join (10000 rows)" in result.stdout, _report(
        result
    )
    assert f"master: {cluster.url}" in result.stdout
    assert "asyncio_lookup from: ./asyncio_lookup.zip/asyncio_lookup/__init__.py" in (
        result.stdout
    ), _report(result)


def test_without_the_shipping_step_the_executors_cannot_import_the_library(
    cluster: Any, node_python: Path
) -> None:
    result = cluster.submit(standalone.JOB, executor_python=node_python)
    output = result.stdout + result.stderr
    assert result.returncode != 0, _report(result)
    assert MISSING in output, _report(result)
    # Raised in a Python worker on an executor, while it unpickles the join's function.
    assert "pyspark/worker.py" in output[output.index("Traceback") :], _report(result)
