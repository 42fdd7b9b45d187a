"""Package attributes imported on first use (PEP 562): a package names what it exports, and a
module with heavy dependencies is imported only when one of its names is first read."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(
    package: str, namespace: dict[str, Any], names: dict[str, str]
) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name of ``names`` (name -> module) is imported
    from its module when first read, then kept in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
