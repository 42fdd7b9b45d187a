"""The import graph of the library and the benchmarks has no circle, and the library's layers
import only downwards (docs/design.md "Layers"): every import counts, absolute or relative, at
module level, inside a function or under ``TYPE_CHECKING``, since each ties the two modules'
designs together whether or not it runs at import time. ``runtime`` and ``lookup`` import
without pyspark."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("asyncio_lookup", "benchmarks")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (``from pkg import mod`` names ``mod``)."""
    files = {module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}
    edges: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = absolute(name, path, node.level, node.module)
                submodules = [f"{module}.{a.name}" if module else a.name for a in node.names]
                targets = submodules
                if module and not all(sub in files for sub in submodules):  # the package's names
                    targets = [module, *submodules]
            for target in targets:
                if target in files and target != name:
                    edges[name].add(target)
    return edges


def absolute(name: str, path: Path, level: int, module: str | None) -> str:
    """The module ``from <level dots><module> import ...`` in module ``name`` names."""
    if level == 0:
        return module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, module] if module else base)


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circles(package: str) -> None:
    edges = graph(package)
    assert len(edges) > 20
    assert circles(edges) == []


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


LAYERS = (
    "asyncio_lookup.runtime",
    "asyncio_lookup.lookup",
    "asyncio_lookup.connectors",
    "asyncio_lookup.spark",
)


def layer(module: str) -> int | None:
    """A module's layer: 0 for runtime ... 3 for spark, -1 for the package's own modules below
    every layer (errors, validation, masking, _lazy, _native), None for the package itself."""
    for i, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return i
    return -1 if module.startswith("asyncio_lookup.") else None


def test_layers_import_only_downwards() -> None:

    upward = [
        (source, target)
        for source, targets in graph("asyncio_lookup").items()
        for target in targets
        if (a := layer(source)) is not None and (b := layer(target)) is not None and b > a
    ]
    assert upward == []


def test_relative_and_base_module_imports_are_seen() -> None:
    """The graph reads relative imports, and a module below the layers counts as one."""
    assert absolute("asyncio_lookup.runtime.loop", ROOT / "loop.py", 2, "spark") == (
        "asyncio_lookup.spark"
    )
    assert absolute("asyncio_lookup.runtime", ROOT / "__init__.py", 1, "loop") == (
        "asyncio_lookup.runtime.loop"
    )
    assert absolute("asyncio_lookup.spark.task", ROOT / "task.py", 1, None) == (
        "asyncio_lookup.spark"
    )
    assert layer("asyncio_lookup.validation") == -1 and layer("asyncio_lookup") is None


def test_runtime_and_lookup_import_without_pyspark() -> None:
    """The DataStream-style API (runtime, lookup) and the connectors load with pyspark made
    unimportable, and load no pyspark module."""
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "import asyncio_lookup, asyncio_lookup.runtime, asyncio_lookup.lookup\n"
        "import asyncio_lookup.connectors\n"
        "from asyncio_lookup import *\n"
        "from asyncio_lookup.runtime import *\n"
        "from asyncio_lookup.lookup import *\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('pyspark.'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)
