"""The HTTP/1.1 client's modules compiled with mypyc, and the pure-Python fallback.

A wheel or ``pip install`` built with a C compiler holds, beside each module named in
:data:`COMPILED`, a mypyc extension of the same source (``setup.py``). Python imports the
extension first. The source stays the truth and always works alone:

- ``ASYNCIO_LOOKUP_PURE_PYTHON=1`` in the environment imports the ``.py`` files instead (a
  before/after in one run; a build without a compiler gives the same);
- a build that is not whole (an extension or the shared library missing) and, in a source
  checkout (an editable install), a build older than an edited ``.py`` are not imported: every
  module of :data:`COMPILED` then comes from its ``.py``, with a warning, so an edit is never
  shadowed by a stale build (``make setup`` builds again);
- a package shipped as a ``.zip`` (``--py-files``) imports no extension at all.

The package's ``__init__`` imports this module first, which installs the fallback's finder.
It imports nothing of the package: ``setup.py`` reads :data:`COMPILED` from it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# What a lookup runs per request inside the HTTP client, and what it calls. mypyc compiles no
# async generator and no subclass of a built-in exception, and drops the cause of `raise X from
# Y` (`__cause__` stays None); a compiled coroutine that awaits in an `except` or `finally`
# block leaks the exception it handles into the thread (the `__context__` of other tasks'
# errors), and a compiled call with **kwargs binds the dict itself: none of these modules has
# one (tests/test_native.py checks). mypyc also enforces at run time a type mypy narrowed (`if
# q[0] is not x` narrows `q[0]` even after `q.popleft()`): read such a value into a local.
# No class of theirs is pickled to executors, where a driver's build may meet pure workers.
COMPILED = (
    "asyncio_lookup.connectors.http11",
    "asyncio_lookup.connectors.http11_connection",
    "asyncio_lookup.connectors.http11_request",
    "asyncio_lookup.runtime.deadlines",
)
PURE_ENV = "ASYNCIO_LOOKUP_PURE_PYTHON"
SHARED_LIBRARY = "asyncio_lookup._compiled__mypyc"  # setup.py's group: the modules' C code


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was imported from a compiled extension."""
    return isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader)


def compiled_modules() -> dict[str, bool]:
    """Each module of :data:`COMPILED`, imported, and whether it runs compiled."""
    return {name: is_compiled(importlib.import_module(name)) for name in COMPILED}


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the modules of :data:`COMPILED` in their ``.py`` files when the build must not be
    used. All of them or none: compiled modules call each other inside one shared library."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED or not _use_source():
            return None
        source = _source(fullname)
        return (
            importlib.util.spec_from_file_location(fullname, source) if source.is_file() else None
        )


def _source(name: str) -> Path:
    return Path(__file__).parent.joinpath(*name.split(".")[1:]).with_suffix(".py")


def _build(name: str) -> Path | None:
    source = _source(name)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        built = source.with_name(source.stem + suffix)
        if built.is_file():
            return built
    return None


@functools.cache
def _use_source() -> bool:
    """Whether to import the sources: asked to, a build that is not whole, or, in a checkout,
    a build older than an edited source."""
    if os.environ.get(PURE_ENV) == "1":
        return True
    built = {name: _build(name) for name in (*COMPILED, SHARED_LIBRARY)}
    if not any(built.values()):
        return False  # pure Python: nothing to choose
    if not all(built.values()):
        missing = sorted(name for name, path in built.items() if path is None)
        return _warn(f"the compiled build is not whole (no {', '.join(missing)})")
    if any(part in ("site-packages", "dist-packages") for part in Path(__file__).parts):
        return False  # an installed copy: its files' times are the installer's, not edits
    for name in COMPILED:
        path = built[name]
        if path is not None and path.stat().st_mtime < _source(name).stat().st_mtime:
            return _warn(f"{_source(name)} is newer than its compiled build {path.name}")
    return False


def _warn(why: str) -> bool:
    warnings.warn(
        f"asyncio_lookup: {why}; importing the .py sources of all compiled modules "
        "(`make setup` or `pip install` builds them again)",
        RuntimeWarning,
        stacklevel=3,
    )
    return True


def install() -> None:
    """Put the fallback's finder in front of the normal import (once per process)."""
    if not any(isinstance(finder, _SourceFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst())


install()  # on the package's import, before any module of COMPILED is imported
