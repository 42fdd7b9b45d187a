"""The runtime layer imports no Spark and nothing from the lookup layer (docs/design.md
"Layers")."""

from __future__ import annotations

import ast
from pathlib import Path

import asyncio_lookup
import asyncio_lookup.errors as errors
import asyncio_lookup.lookup as lookup
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


def test_the_top_level_exports_the_public_api_and_nothing_internal() -> None:
    exported = set(asyncio_lookup.__all__)
    assert len(exported) == len(asyncio_lookup.__all__)  # no name twice
    for name in exported:
        assert getattr(asyncio_lookup, name) is not None, name
    for name in lookup.__all__:
        assert getattr(asyncio_lookup, name) is getattr(lookup, name)
    exceptions = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == errors.__name__
    }
    assert exceptions <= exported  # every exception of errors.py
    user_facing = {
        "LookupFunction",
        "AsyncLookupFunction",
        "LookupTableSource",
        "FullCachingLookupProvider",
        "DefaultLookupCache",
        "LookupOptions",
        "LookupHint",
        "parse_hints",
        "OutputMode",
        "AsyncDataStream",
    }
    assert user_facing <= exported
    internal = {
        "acquire_chain",
        "release_chain",
        "merge_metrics",
        "metrics_delta",
        "LookupChain",
        "MissRetry",
        "PartitionRouting",
        "PartitionFilteredSource",
        "parse_duration",
    }
    assert not internal & exported
    assert not internal & set(lookup.__all__)
