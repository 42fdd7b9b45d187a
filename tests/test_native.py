"""The compiled build of the HTTP client's modules and its pure-Python fallback (_native.py)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from asyncio_lookup import _native

PACKAGE = Path(_native.__file__).parent
ROOT = PACKAGE.parent
SHOW = (
    "from asyncio_lookup._native import compiled_modules; "
    "print(sorted(set(compiled_modules().values())))"
)


def _built() -> bool:
    names = (*_native.COMPILED, _native.SHARED_LIBRARY)
    return all(_native._build(name) is not None for name in names)


def _run(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.mark.parametrize("name", _native.COMPILED)
def test_compiled_modules_avoid_what_mypyc_gets_wrong(name: str) -> None:
    """mypyc drops `raise X from Y`'s cause (`__cause__` stays None), compiles no async
    generator and no subclass of a built-in exception; a compiled coroutine suspended in an
    `except` or `finally` block leaves the exception it handles as the thread's handled
    exception (the `__context__` of every other task's exceptions; after a `finally`, for
    good), and a compiled call with **kwargs passes the dict itself as each parameter it fills
    (both found compiling the operator, docs/performance.md): none of them in a compiled
    module."""
    tree = ast.parse(_native._source(name).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if not isinstance(inner, ast.Try):
                    continue
                blocks = [inner.finalbody, *(handler.body for handler in inner.handlers)]
                if any(
                    isinstance(n, ast.Await | ast.AsyncFor | ast.AsyncWith)
                    for block in blocks
                    for stmt in block
                    for n in ast.walk(stmt)
                ):
                    found.append(f"line {inner.lineno}: await in an except or finally block")
        if isinstance(node, ast.Call) and any(k.arg is None for k in node.keywords):
            found.append(f"line {node.lineno}: a call with **kwargs")
        if isinstance(node, ast.Raise) and node.cause is not None:
            found.append(f"line {node.lineno}: raise ... from ...")
        if isinstance(node, ast.AsyncFunctionDef) and any(
            isinstance(inner, ast.Yield | ast.YieldFrom) for inner in ast.walk(node)
        ):
            found.append(f"line {node.lineno}: async generator {node.name}")
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(base) for base in node.bases]
            if any(base.endswith(("Error", "Exception")) for base in bases):
                found.append(f"line {node.lineno}: exception class {node.name}")
    assert not found, f"{name} is compiled by mypyc (asyncio_lookup/_native.py): {found}"


def test_the_suite_runs_the_compiled_build() -> None:
    """`make setup` compiles the client (CI's machine has a compiler): the tests then run the
    code a `pip install` gives, and the pure-Python fallback has its own tests below."""
    if not _built() and os.environ.get("CI") != "true":
        pytest.skip("no compiled build in this checkout (installed without a C compiler)")
    assert _native.compiled_modules() == dict.fromkeys(_native.COMPILED, True)


def test_pure_python_switch_imports_the_sources() -> None:
    out = _run(SHOW, ROOT, ASYNCIO_LOOKUP_PURE_PYTHON="1")
    assert out.stdout.strip() == "[False]"


def test_the_client_tests_pass_on_the_pure_python_fallback() -> None:
    """What a package shipped as a .zip on --py-files runs (no extension there)."""
    tests = ROOT / "tests" / "connectors"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            str(tests / "test_http11.py"),
            str(tests / "test_http11_answers.py"),
            str(tests / "test_http11_split.py"),
            str(tests / "test_http.py"),
        ],
        cwd=ROOT,
        env={**os.environ, "ASYNCIO_LOOKUP_PURE_PYTHON": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_an_edited_source_is_never_shadowed_by_a_stale_build(tmp_path: Path) -> None:
    if not _built():
        pytest.skip("no compiled build in this checkout")
    shutil.copytree(
        PACKAGE, tmp_path / "asyncio_lookup", ignore=shutil.ignore_patterns("__pycache__")
    )
    assert _run(SHOW, tmp_path).stdout.strip() == "[True]"
    edited = tmp_path / "asyncio_lookup" / "connectors" / "http11_request.py"
    built = _native._build("asyncio_lookup.connectors.http11_request")
    assert built is not None
    later = built.stat().st_mtime + 10
    os.utime(edited, (later, later))
    out = _run(SHOW, tmp_path)
    assert out.stdout.strip() == "[False]"  # all of them from source, not a mix
    assert "newer than its compiled build" in out.stderr


def test_a_build_that_is_not_whole_is_not_imported(tmp_path: Path) -> None:
    """The compiled modules call into one shared library: one of them missing (a partial copy,
    a failed build's leftovers) and none is imported."""
    if not _built():
        pytest.skip("no compiled build in this checkout")
    shutil.copytree(
        PACKAGE, tmp_path / "asyncio_lookup", ignore=shutil.ignore_patterns("__pycache__")
    )
    shared = _native._build(_native.SHARED_LIBRARY)
    assert shared is not None
    (tmp_path / "asyncio_lookup" / shared.name).unlink()
    out = _run(SHOW, tmp_path)
    assert out.stdout.strip() == "[False]"
    assert "not whole" in out.stderr and _native.SHARED_LIBRARY in out.stderr
