"""Build: the modules named in ``asyncio_lookup/_native.py`` compiled with mypyc.

Everything else (metadata, dependencies, packages) is in ``pyproject.toml``. Without a C
compiler, or with ``ASYNCIO_LOOKUP_PURE_PYTHON=1``, the package installs as pure Python: every
compiled module is also a ``.py`` that works alone.
"""

from __future__ import annotations

import os
import runpy
import sys
import sysconfig
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

# mypyc type-checks what it compiles. A build environment has none of the package's
# dependencies, so not `mypy --strict` there (that is `make lint`'s, with them installed).
MYPY_FLAGS = ["--config-file=", "--ignore-missing-imports", "--python-version=3.11"]


def compiled_extensions() -> list[Any]:
    native = runpy.run_path("asyncio_lookup/_native.py")
    if os.environ.get(native["PURE_ENV"]) == "1":
        return []
    paths = [name.replace(".", "/") + ".py" for name in native["COMPILED"]]
    group = native["SHARED_LIBRARY"].removesuffix("__mypyc")
    try:
        from mypyc.build import mypycify

        extensions = mypycify(MYPY_FLAGS + paths, opt_level="3", group_name=group)
    except (SystemExit, Exception) as error:  # no mypyc; or mypyc exits on a type error
        print(f"asyncio-lookup: not compiled, pure Python ({error!r})", file=sys.stderr)
        return []
    return list(extensions)


class AllOrNothing(build_ext):
    """mypyc's extensions all built, or none: the per-module ones call into one shared library,
    so a failed compile (no C compiler, say) removes every one built, here or before, and
    leaves the pure-Python package."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # a compiler's or setuptools' error
            suffix = sysconfig.get_config_var("EXT_SUFFIX")
            for extension in self.extensions:
                relative = Path(*extension.name.split("."))
                for root in (Path(self.build_lib), Path(".")):
                    root.joinpath(f"{relative}{suffix}").unlink(missing_ok=True)
            print(f"asyncio-lookup: not compiled, pure Python ({error!r})", file=sys.stderr)


setup(ext_modules=compiled_extensions(), cmdclass={"build_ext": AllOrNothing})
