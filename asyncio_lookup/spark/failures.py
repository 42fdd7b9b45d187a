"""How a failed task hands its error to Spark: the library's message once, readably.

Spark prints a failed task's Python traceback several times (the executor's log, the task set
manager's, the driver's exception). The library's own errors already say what failed, where
(table, target, key) and why, so the frames of the library, of installed packages and of the
standard library are dropped from them; frames of the user's code (a lookup function, a
condition) are kept. The full traceback is logged at DEBUG on the executor.
"""

from __future__ import annotations

import logging
import os
import sysconfig
from types import TracebackType

import asyncio_lookup
from asyncio_lookup.errors import AsyncLookupError

log = logging.getLogger(__name__)

_HIDDEN = tuple(
    {
        os.path.dirname(os.path.abspath(asyncio_lookup.__file__)) + os.sep,
        *(
            os.path.abspath(path) + os.sep
            for name in ("stdlib", "platstdlib", "purelib", "platlib")
            if (path := sysconfig.get_paths().get(name))
        ),
    }
)


def is_readable(error: BaseException) -> bool:
    """An error whose message says it all: the library's, or the operator's timeout."""
    return isinstance(error, (AsyncLookupError, TimeoutError))


def readable(error: BaseException) -> BaseException:
    """``error`` with only the user's frames (of its own traceback and its cause's). Its cause
    stays: PySpark leaves causes out of a task's error (its simplified traceback, the default)
    and the message names it."""
    log.debug("lookup task failed", exc_info=error)
    frames: list[TracebackType] = []
    cause = error.__cause__
    for tb in (error.__traceback__, cause.__traceback__ if cause is not None else None):
        while tb is not None:
            if _is_users(tb.tb_frame.f_code.co_filename):
                frames.append(tb)
            tb = tb.tb_next
    trimmed: TracebackType | None = None
    for tb in reversed(frames):
        trimmed = TracebackType(trimmed, tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
    return error.with_traceback(trimmed)


def _is_users(path: str) -> bool:
    if path.startswith("<frozen") or path.endswith((".pyx", ".pxd")):
        return False
    return not os.path.abspath(path).startswith(_HIDDEN)
