"""A Spark standalone cluster on this machine, and the README's recipe for shipping to it.

``make cluster-demo`` runs this file: it builds the wheel and the zip that ``--py-files`` ships,
prepares a "cluster node" Python (the dependencies, not asyncio_lookup), starts a master and one
worker from the pyspark package on free loopback ports, ``spark-submit``s
``examples/cluster/enrich_job.py`` and stops both processes. ``tests/cluster`` uses the same
pieces.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import venv
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
JOB = Path(__file__).resolve().with_name("enrich_job.py")
LOCAL_IP = "127.0.0.1"


def spark_home() -> Path:
    """``$SPARK_HOME``, else the pyspark package (pip's pyspark has bin/, jars/, python/lib/)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCAL_IP, 0))
        return int(sock.getsockname()[1])


def spark_env(**extra: str) -> dict[str, str]:
    """The environment for Spark's processes: loopback only, no PYTHONPATH leaking in, and
    no Spark Connect setting (a classic job: ``SPARK_CONNECT_MODE_ENABLED`` would make its
    ``SparkSession.builder`` ask for a remote URL)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONPATH"
        and not k.startswith(("SPARK_CONNECT", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE"))
    }
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=LOCAL_IP, SPARK_DAEMON_MEMORY="256m")
    env.update(extra)
    return env


def build_zip(out_dir: Path) -> Path:
    """``pip wheel --no-deps`` the project as pure Python (``ASYNCIO_LOOKUP_PURE_PYTHON=1``:
    no compiled module, so the wheel suits any node), then the same archive as
    ``asyncio_lookup.zip``.

    A pure-Python wheel is a zip with the package at its root; PySpark puts only ``.zip``,
    ``.egg`` and ``.py`` files from ``--py-files`` on the executors' ``sys.path``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("asyncio_lookup-*.whl"):
        old.unlink()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out_dir), "."],
        cwd=REPO,
        check=True,
        env={**os.environ, "ASYNCIO_LOOKUP_PURE_PYTHON": "1"},
    )
    (wheel,) = out_dir.glob("asyncio_lookup-*.whl")
    return Path(shutil.copyfile(wheel, out_dir / "asyncio_lookup.zip"))


def core_distributions(project: str = "asyncio-lookup") -> list[metadata.Distribution]:
    """The installed distributions ``pip install asyncio-lookup`` pulls in (no extras), minus
    the project itself: what a cluster node's Python needs besides Spark's own pyspark."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [(Requirement(project), frozenset[str]())]
    while todo:
        req, parent_extras = todo.pop()
        if req.marker and not any(
            req.marker.evaluate({"extra": extra}) for extra in parent_extras or {""}
        ):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        todo += [(Requirement(r), frozenset(req.extras)) for r in dist.requires or ()]
    del seen[canonicalize_name(project)]
    return list(seen.values())


def node_python(directory: Path) -> Path:
    """A venv standing for a cluster node's Python: the core dependencies, no asyncio_lookup.

    Its only path entry is a directory of links to the files of :func:`core_distributions`
    in this interpreter's site-packages. Neither pyspark nor pandas is there: the executors
    get pyspark from the Spark installation (``python/lib/pyspark.zip``).
    """
    deps = directory / "site-packages"
    deps.mkdir(parents=True)
    for dist in core_distributions():
        for file in dist.files or ():
            top = file.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth") or (deps / top).exists():
                continue
            source = Path(str(dist.locate_file(top)))
            if source.exists():
                (deps / top).symlink_to(source)
    env_dir = directory / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "cluster_node_deps.pth").write_text(f"{deps}\n")
    return python


class StandaloneCluster:
    """One master and one worker (``bin/spark-class``) on free loopback ports; a context manager.

    Logs go to ``workdir/master.log`` and ``workdir/worker.log``. ``stop()`` ends both processes
    (their process groups), also when start-up failed half-way.
    """

    def __init__(self, workdir: Path, cores: int = 2, memory: str = "1g") -> None:
        self.workdir = workdir
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.ui_port = free_port()
        self.url = f"spark://{LOCAL_IP}:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, main_class: str, *args: str) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed by the child
        with log:
            self.procs.append(
                subprocess.Popen(
                    [str(spark_home() / "bin" / "spark-class"), main_class, *args],
                    cwd=self.workdir,
                    env=spark_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def start(self, timeout: float = 90) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        try:
            self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host", LOCAL_IP, "--port", str(self.port), "--webui-port", str(self.ui_port),
            )  # fmt: skip
            # Spark moves to the next port when one was taken meanwhile: read what it bound.
            self.url = self._wait_for_log(
                "master", r"Starting Spark master at (spark://\S+)", deadline
            )
            self.ui_port = int(
                self._wait_for_log("master", r"service 'MasterUI' on port (\d+)", deadline)
            )
            self._spawn(
                "worker",
                "org.apache.spark.deploy.worker.Worker",
                "--host", LOCAL_IP, "--port", str(free_port()),
                "--webui-port", str(free_port()),
                "--cores", str(self.cores), "--memory", self.memory,
                "--work-dir", str(self.workdir / "work"),
                self.url,
            )  # fmt: skip
            self._wait_for_worker(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_alive(self) -> None:
        for proc, name in zip(self.procs, ("master", "worker"), strict=False):
            if proc.poll() is not None:
                raise RuntimeError(f"the {name} exited: {self.log_tail(name)}")

    def _wait_for_log(self, name: str, pattern: str, deadline: float) -> str:
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            self._check_alive()
            found = regex.search((self.workdir / f"{name}.log").read_text(errors="replace"))
            if found:
                return found.group(1)
            time.sleep(0.3)
        raise TimeoutError(f"the {name} did not log {pattern!r}: {self.log_tail(name)}")

    def _wait_for_worker(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                url = f"http://{LOCAL_IP}:{self.ui_port}/json/"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if json.load(resp).get("aliveworkers", 0) >= 1:
                        return
            except (OSError, ValueError):  # not serving yet
                pass
            time.sleep(0.5)
        raise TimeoutError(f"no worker registered with {self.url}: {self.log_tail('worker')}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.workdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def submit(
        self,
        job: Path,
        *,
        executor_python: Path,
        py_files: Sequence[Path] = (),
        archives: Sequence[str] = (),
        args: Sequence[str] = (),
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """``spark-submit`` ``job`` in client mode; the driver runs this interpreter.

        ``executor_python`` may be relative to the executors' working directory, as
        ``./environment/bin/python`` with ``archives=["env.tar.gz#environment"]``.
        """
        conf = {
            "spark.pyspark.python": str(executor_python),
            "spark.pyspark.driver.python": sys.executable,
            "spark.driver.host": LOCAL_IP,
            "spark.driver.bindAddress": LOCAL_IP,
            "spark.driver.memory": "512m",
            "spark.executor.memory": "512m",
            "spark.cores.max": str(self.cores),
            "spark.task.maxFailures": "1",
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
        }
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", self.url]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        if py_files:
            cmd += ["--py-files", ",".join(map(str, py_files))]
        if archives:
            cmd += ["--archives", ",".join(archives)]
        cmd += [str(job), *args]
        env = spark_env(PYSPARK_PYTHON=str(executor_python), PYSPARK_DRIVER_PYTHON=sys.executable)
        return subprocess.run(
            cmd,
            cwd=self.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def main() -> int:
    workdir = REPO / "build" / "cluster-demo"
    shutil.rmtree(workdir, ignore_errors=True)
    print("1. build: ASYNCIO_LOOKUP_PURE_PYTHON=1 pip wheel --no-deps . -w dist/,")
    print("   copied to dist/asyncio_lookup.zip")
    package = build_zip(REPO / "dist")
    print(f"   {package}")
    print("2. a cluster node's Python: the core dependencies; no asyncio_lookup, pyspark, pandas")
    python = node_python(workdir / "node")
    print(f"   {python}")
    with StandaloneCluster(workdir) as cluster:
        print(f"3. standalone master {cluster.url} (web UI http://{LOCAL_IP}:{cluster.ui_port}),")
        print("   one worker; spark-submit --py-files dist/asyncio_lookup.zip enrich_job.py")
        result = cluster.submit(JOB, executor_python=python, py_files=[package])
        print(result.stdout, end="")
        if result.returncode != 0:
            print(result.stderr[-5000:], file=sys.stderr)
    print("4. master and worker stopped")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
