"""Reading the Spark conf on the driver, alike on classic and Spark Connect sessions.

``spark-submit --conf`` and a Connect server's ``--conf`` pass on ``spark.*`` keys only: a
library key (``table.exec.async-lookup.timeout``) set that way arrives as ``spark.<key>``,
which :func:`library_conf` reads too. A managed Connect server may refuse to read some keys:
:func:`conf_get` reads such a key as unset.
"""

from __future__ import annotations

from typing import Any


def conf_get(conf: Any, key: str) -> Any:
    """``conf.get(key, None)``; None when the session refuses to read it."""
    try:
        return conf.get(key, None)
    except Exception:  # a managed server's "not available" (Connect wraps it): unset
        return None


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def library_conf(conf: Any, key: str) -> tuple[str, Any]:
    """The library ``key``'s value, or else ``spark.<key>``'s (as spark-submit passes it on),
    with the key that held it (``key`` and None when neither is set)."""
    value = conf_get(conf, key)
    if _blank(value):
        submitted = "spark." + key
        other = conf_get(conf, submitted)
        if not _blank(other):
            return submitted, other
    return key, value


__all__ = ["conf_get", "library_conf"]
