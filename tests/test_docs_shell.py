"""Every fenced ```bash / ```sh / ```console block of README.md and docs/*.md runs as written,
and every example runs from the built wheel in a fresh venv, outside the repository.

The recipes run in document order in one workspace: a copy of the repository's tracked files
(with the repository's ``.venv`` linked in, so ``make demo`` finds it), ``PATH`` starting with a
fresh venv's ``bin`` (so ``pip``, ``python`` and ``spark-submit`` are a user's new environment),
and none of the test run's ``PYSPARK_*`` / ``SPARK_*`` variables. ``console`` blocks run their
``$ `` lines. The line right before a fence may carry a marker the test reads:

- ``<!-- shell: install -->``: builds and installs the package into the fresh venv. It runs
  once, first, and the same venv and wheel then serve every other recipe and every example.
- ``<!-- shell: cluster -->``: runs against a Spark standalone master and worker started by the
  test, named by ``$SPARK_MASTER``; ``$NODE_PYTHON`` is a node's Python (the core dependencies,
  neither the package nor pandas); ``my_job.py`` is ``examples/cluster/enrich_job.py``.
- ``<!-- shell: continue -->``: appended to the block before it (one script: start, use, stop).
- ``<!-- shell: skip (reason) -->``: not run, for the reason given.

Processes a recipe leaves behind with a ``*.pid`` file in the workspace are ended after it.
Wall time here (2 cores, shared with other jobs): 261 s in a quiet moment, about 9 min under
heavy load (then: the venv and the wheel about 1 min, each cluster recipe 1.2 min, ``make demo``
45 s to 1.5 min, the examples 3.5 min).
It runs as its own CI step, ``make test-docs`` (``ASYNCIO_LOOKUP_DOCS_SHELL=1``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import venv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.checkout import copy_tracked_files
from tests.docs_blocks import PAGES, ROOT, Block, fenced_blocks

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

# A CI step of its own (`make test-docs`, .ci/run), not part of `make test`: 4.5 to 9 min.
own_step = pytest.mark.skipif(
    os.environ.get("ASYNCIO_LOOKUP_DOCS_SHELL") != "1",
    reason="runs in its own step: make test-docs (ASYNCIO_LOOKUP_DOCS_SHELL=1)",
)

MARKERS = ("install", "cluster", "continue", "skip")
TIMEOUT = 900


@dataclass
class Recipe:
    blocks: list[Block] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.blocks[0].name

    @property
    def marker(self) -> str | None:
        return self.blocks[0].marker

    @property
    def script(self) -> str:
        return "".join(block.code for block in self.blocks)


def blocks(page: Path) -> list[Block]:
    found = fenced_blocks(page, ("bash", "sh", "console"), "shell")
    for block in found:
        if block.language == "console":  # the commands only: lines after a "$ " prompt
            lines = block.code.splitlines(keepends=True)
            block.code = "".join(line[2:] for line in lines if line.startswith("$ "))
    return found


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def recipes() -> list[Recipe]:
    result: list[Recipe] = []
    for block in all_blocks():
        if block.marker == "continue":
            assert result and result[-1].blocks[-1].page == block.page, block.name
            result[-1].blocks.append(block)
        else:
            result.append(Recipe([block]))
    return result


def test_markers_are_known_and_skips_have_a_reason() -> None:
    install = []
    for block in all_blocks():
        assert block.marker in (None, *MARKERS), f"{block.name}: unknown marker {block.marker!r}"
        if block.marker == "skip":
            assert block.reason and block.reason.strip(), f"{block.name}: a skip needs a reason"
        if block.marker == "install":
            install.append(block)
    assert len(install) == 1, "exactly one recipe installs the wheel (README, Installing)"
    assert any(block.marker == "cluster" for block in all_blocks())


# ---------------------------------------------------------------- the workspace and the venv


def _load_standalone() -> ModuleType:
    path = ROOT / "examples" / "cluster" / "standalone.py"
    spec = importlib.util.spec_from_file_location("docs_shell_standalone", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Workspace:
    path: Path
    venv: Path
    env: dict[str, str]

    def run(
        self, script: str, extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = dict(self.env, **(extra or {}))
        try:
            return subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=self.path,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
        finally:
            self.end_leftovers()

    def end_leftovers(self) -> None:
        """End what a recipe started and left running (its ``*.pid`` files)."""
        for pid_file in self.path.rglob("*.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError, OSError):
                pid = int(pid_file.read_text().split()[0])
                os.kill(pid, signal.SIGTERM)
            pid_file.unlink(missing_ok=True)


def _user_env(venv_dir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK", "SPARK", "PYTHON", "VIRTUAL_ENV", "JAVA_TOOL"))
    }
    env["PATH"] = f"{venv_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv_dir)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"  # one machine: everything on loopback
    return env


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """The repository's files, a fresh venv, and the README's install recipe run in it."""
    base = tmp_path_factory.mktemp("docs-shell")
    path = base / "repo"
    copy_tracked_files(path)
    installed = ROOT / ".venv" / ".installed"
    if installed.is_file():  # `make demo` runs the repository's venv, never reinstalls it
        (path / ".venv").symlink_to(ROOT / ".venv")
        stamp = installed.stat().st_mtime - 1
        os.utime(path / "pyproject.toml", (stamp, stamp))
    venv_dir = base / "venv"
    venv.EnvBuilder(with_pip=True).create(venv_dir)
    space = Workspace(path, venv_dir, _user_env(venv_dir))
    (install,) = [r for r in recipes() if r.marker == "install"]
    done = space.run(install.script)
    assert done.returncode == 0, _report(install, done)
    yield space
    space.end_leftovers()


@pytest.fixture(scope="session")
def cluster_env(
    workspace: Workspace, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """A standalone master and worker, a node's Python, and ``my_job.py``."""
    standalone = _load_standalone()
    work = tmp_path_factory.mktemp("docs-shell-cluster")
    node = standalone.node_python(work / "node")
    shutil.copy2(ROOT / "examples" / "cluster" / "enrich_job.py", workspace.path / "my_job.py")
    with standalone.StandaloneCluster(work / "spark") as running:
        yield {"SPARK_MASTER": running.url, "NODE_PYTHON": str(node)}


def _report(recipe: Recipe, done: subprocess.CompletedProcess[str]) -> str:
    return (
        f"{recipe.name} (exit {done.returncode}):\n{recipe.script}\n--- stdout\n"
        f"{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )


@own_step
@pytest.mark.parametrize("recipe", recipes(), ids=lambda r: r.name)
def test_recipe_runs_as_written(recipe: Recipe, request: pytest.FixtureRequest) -> None:
    if recipe.marker == "skip":
        pytest.skip(recipe.blocks[0].reason or "")
    space: Workspace = request.getfixturevalue("workspace")
    if recipe.marker == "install":
        return  # run by the workspace fixture, which every other recipe needs
    extra = request.getfixturevalue("cluster_env") if recipe.marker == "cluster" else {}
    done = space.run(recipe.script, extra)
    assert done.returncode == 0, _report(recipe, done)
    if recipe.marker == "cluster":
        assert "OK: lookup_join equals the plain Spark join" in done.stdout, _report(recipe, done)


# ---------------------------------------------------------------- examples from the wheel

EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
# what each extra may add to the core package's imports
EXTRA_MODULES = {"spark": {"pyspark", "pandas", "py4j"}, "uvloop": {"uvloop"}}
_EXTRAS = re.compile(r'pip install "?asyncio-lookup(?:\[([\w,]+)\])?"?')

# Blocks the modules of extras an example's header does not name, then runs it as __main__.
_RUNNER = """
import importlib.abc, runpy, sys
blocked = set(sys.argv[2].split(",")) - {""}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (its extra is not named)")
        return None
sys.meta_path.insert(0, Blocker())
sys.argv = sys.argv[1:2]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def header_extras(path: Path) -> set[str]:
    """The extras the example's docstring says to install (``pip install "asyncio-lookup[..]"``)."""
    text = path.read_text(encoding="utf-8")
    docstring = text.split('"""')[1] if text.startswith('"""') else ""
    found = _EXTRAS.findall(docstring)
    assert found, f"examples/{path.name}: its header must say what to pip install"
    return {extra for group in found for extra in group.split(",") if extra}


@own_step
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_from_the_wheel(
    name: str, workspace: Workspace, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    source = ROOT / "examples" / name
    text = source.read_text(encoding="utf-8")
    if "REDIS_URL" in text:
        request.getfixturevalue("redis_url")
    if "POSTGRES_DSN" in text:
        request.getfixturevalue("postgres_dsn")
    extras = header_extras(source)
    blocked = set().union(*EXTRA_MODULES.values()) - set().union(
        *(EXTRA_MODULES.get(e, set()) for e in extras)
    )
    shutil.copy2(source, tmp_path / name)  # outside the repository: the wheel's package only
    env = dict(workspace.env, PYSPARK_PYTHON=str(workspace.venv / "bin" / "python"))
    done = subprocess.run(
        [str(workspace.venv / "bin" / "python"), "-c", _RUNNER, name, ",".join(sorted(blocked))],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, (
        f"examples/{name} (extras {sorted(extras)}, exit {done.returncode})\n--- stdout\n"
        f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )


def _installed(workspace: Workspace, module: str) -> Any:
    return subprocess.run(
        [
            str(workspace.venv / "bin" / "python"),
            "-c",
            f"import {module}; print({module}.__file__)",
        ],
        cwd=workspace.venv,
        capture_output=True,
        text=True,
    )


@own_step
def test_the_venv_has_the_wheel_not_the_checkout(workspace: Workspace) -> None:
    found = _installed(workspace, "asyncio_lookup")
    assert found.returncode == 0, found.stderr
    assert str(workspace.venv) in found.stdout  # site-packages, from the wheel
    assert _installed(workspace, "aiohttp").returncode != 0  # no extra brings it
