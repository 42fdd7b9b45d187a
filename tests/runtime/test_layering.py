"""The runtime layer imports no Spark and nothing from the lookup layer (DESIGN.md layers)."""

from __future__ import annotations

import ast
from pathlib import Path

import asyncio_lookup
import asyncio_lookup.runtime as runtime

RUNTIME = Path(runtime.__file__).parent


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_runtime_imports_neither_spark_nor_lookup() -> None:
    files = sorted(RUNTIME.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        for name in imported_modules(path):
            assert not name.startswith(
                ("pyspark", "asyncio_lookup.lookup", "asyncio_lookup.spark")
            ), (
                path.name,
                name,
            )
            assert not name.startswith("asyncio_lookup.connectors"), (path.name, name)


def test_public_names_are_exported_and_reexported() -> None:
    expected = {
        "AsyncFunction",
        "OutputMode",
        "Watermark",
        "AsyncWaitOperator",
        "OperatorMetrics",
        "AsyncRetryStrategy",
        "AsyncRetryPredicate",
        "RetryStrategies",
        "RetryPredicates",
        "AsyncDataStream",
        "new_event_loop",
        "process_loop",
    }
    assert expected <= set(runtime.__all__)
    for name in runtime.__all__:
        assert getattr(asyncio_lookup, name) is getattr(runtime, name)
