"""The import graph of the library and the benchmarks has no circle (docs/design.md "Layers"):
every import counts, at module level, inside a function or under ``TYPE_CHECKING``, since each
ties the two modules' designs together whether or not it runs at import time."""

from __future__ import annotations

import ast
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
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                submodules = [f"{node.module}.{a.name}" for a in node.names]
                targets = submodules
                if not all(sub in files for sub in submodules):  # names of the package itself
                    targets = [node.module, *submodules]
            for target in targets:
                if target in files and target != name:
                    edges[name].add(target)
    return edges


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


def test_layers_import_only_downwards() -> None:
    def layer(module: str) -> int | None:
        for i, prefix in enumerate(LAYERS):
            if module == prefix or module.startswith(prefix + "."):
                return i
        return None

    upward = [
        (source, target)
        for source, targets in graph("asyncio_lookup").items()
        for target in targets
        if (a := layer(source)) is not None and (b := layer(target)) is not None and b > a
    ]
    assert upward == []
