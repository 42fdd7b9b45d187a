"""The library's log level in the executors' Python workers, from their environment.

``ASYNCIO_LOOKUP_LOG_LEVEL=DEBUG`` (``spark.executorEnv.ASYNCIO_LOOKUP_LOG_LEVEL`` on a cluster; in
local mode the workers inherit the driver's environment) sets the ``asyncio_lookup`` logger's
level in each worker when its first task starts, with a handler on the worker's stderr (the
executor's log) unless logging is configured there already. At DEBUG the connectors log every
failed attempt that is retried (``lookup.max-retries``) and the full traceback of a failed task
(docs/tuning.md, "Seeing retries").
"""

from __future__ import annotations

import logging
import os
import sys

ENV = "ASYNCIO_LOOKUP_LOG_LEVEL"
_configured = False


def configure_from_env() -> None:
    """Once per process: apply ``ASYNCIO_LOOKUP_LOG_LEVEL`` if set (an unknown name is ignored
    with a warning on stderr rather than failing the task)."""
    global _configured
    if _configured:
        return
    _configured = True
    name = os.environ.get(ENV, "").strip().upper()
    if not name:
        return
    level = logging.getLevelName(name)
    if not isinstance(level, int):
        print(f"asyncio_lookup: ignoring {ENV}={name!r} (not a logging level)", file=sys.stderr)
        return
    logger = logging.getLogger("asyncio_lookup")
    logger.setLevel(level)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s [pid %(process)d] %(name)s: %(message)s")
        )
        logger.addHandler(handler)


__all__ = ["ENV", "configure_from_env"]
