"""Build: the modules named in ``asyncio_lookup/_native.py`` compiled with mypyc.

Everything else (metadata, dependencies, packages) is in ``pyproject.toml``. Without a C
compiler, or with ``ASYNCIO_LOOKUP_PURE_PYTHON=1``, the package installs as pure Python: every
compiled module is also a ``.py`` that works alone.
"""

from __future__ import annotations

import os
import runpy
import sys

from setuptools import setup

# mypyc type-checks what it compiles. A build environment has none of the package's
# dependencies, so not `mypy --strict` there (that is `make lint`'s, with them installed).
MYPY_FLAGS = ["--config-file=", "--ignore-missing-imports", "--python-version=3.11"]


def compiled_extensions() -> list[object]:
    if os.environ.get("ASYNCIO_LOOKUP_PURE_PYTHON") == "1":
        return []
    names = runpy.run_path("asyncio_lookup/_native.py")["COMPILED"]
    paths = [name.replace(".", "/") + ".py" for name in names]
    try:
        from mypyc.build import mypycify

        extensions = mypycify(
            MYPY_FLAGS + paths, opt_level="3", group_name="asyncio_lookup._compiled"
        )
    except (ImportError, SystemExit, Exception) as error:  # mypyc exits on a type error
        print(f"asyncio-lookup: not compiled, pure Python ({error!r})", file=sys.stderr)
        return []
    for extension in extensions:
        extension.optional = True  # a failed C compile leaves the pure-Python package
    return list(extensions)


setup(ext_modules=compiled_extensions())
