"""The driver's split of a job-wide rate limit into per-task shares (docs/design.md "Rate limits").

Every task that runs a join gets ``rate / parallelism`` requests per second, where
``parallelism`` is the number of tasks that run at once: ``lookup.rate-limit.parallelism`` when
set, else the task slots the Spark conf describes (read with ``spark.conf.get``, so classic and
Spark Connect sessions alike), capped by the number of partitions when the driver knows it (a
hash lookup join). The assumption: every slot runs this join. With fewer tasks at once (a small
input, other jobs on the cluster) the job stays under the budget; it never goes over it unless
more tasks than slots run at once (dynamic allocation beyond ``maxExecutors``).
"""

from __future__ import annotations

import os
import re
from typing import Any

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.option_names import RATE_LIMIT_PARALLELISM
from asyncio_lookup.lookup.options import OPTIONS, LookupOptions
from asyncio_lookup.lookup.rate import TaskRate
from asyncio_lookup.spark.conf import conf_get

_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]$")
_UNBOUNDED = 2**31 - 1  # spark.dynamicAllocation.maxExecutors' default: no bound


def _int(conf: Any, key: str) -> int | None:
    value = conf_get(conf, key)
    if value is None or str(value).strip() == "":
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number > 0 else None


def _remote(conf: Any) -> bool:
    """Whether ``conf`` is a Spark Connect session's (its server may run on another host)."""
    return type(conf).__module__.startswith("pyspark.sql.connect")


def task_slots(conf: Any, session: Any = None) -> tuple[int | None, str]:
    """How many tasks the application can run at once, and where that number came from; None
    when the conf does not say (a cluster manager that sizes executors itself). ``session``:
    the Spark Connect session of ``conf``, asked for its server's cores under ``local[*]``."""
    master = str(conf_get(conf, "spark.master") or "").strip()
    cpus = _int(conf, "spark.task.cpus") or 1
    local = _LOCAL.match(master)
    if local:
        cores = local.group(1)
        if cores == "*":
            if _remote(conf):  # the server's cores, which this client cannot count
                n = server_parallelism(session) if session is not None else None
                if n is not None:
                    return max(1, n // cpus), f"spark.master={master} on a Spark Connect server"
                return None, f"spark.master={master} on a Spark Connect server"
            # the CPUs this process (and its JVM) may run on, not all the machine has
            affinity = getattr(os, "sched_getaffinity", None)
            n = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
        else:
            n = 1 if cores is None else int(cores)
        return max(1, n // cpus), f"spark.master={master}"
    cluster = _LOCAL_CLUSTER.match(master)
    if cluster:
        n = int(cluster.group(1)) * int(cluster.group(2))
        return max(1, n // cpus), f"spark.master={master}"
    cores = _int(conf, "spark.executor.cores")
    dynamic = str(conf_get(conf, "spark.dynamicAllocation.enabled") or "").lower() == "true"
    if dynamic:
        executors = _int(conf, "spark.dynamicAllocation.maxExecutors")
        source = "spark.dynamicAllocation.maxExecutors"
        if executors == _UNBOUNDED:
            executors = None
    else:
        executors = _int(conf, "spark.executor.instances")
        source = "spark.executor.instances"
    if cores is not None and executors is not None:
        return max(1, cores * executors // cpus), (
            f"{source}={executors} x spark.executor.cores={cores} / spark.task.cpus={cpus}"
        )
    total = _int(conf, "spark.cores.max")
    if total is not None and not dynamic:
        return max(1, total // cpus), f"spark.cores.max={total} / spark.task.cpus={cpus}"
    parallelism = _int(conf, "spark.default.parallelism")
    if parallelism is not None and not dynamic:  # a partition count, no bound on executors
        return parallelism, f"spark.default.parallelism={parallelism}"
    return None, f"spark.master={master or '(unset)'} without executor counts"


def server_parallelism(session: Any) -> int | None:
    """The server's default parallelism (its cores under ``local[*]``), read from a planned
    ``range``'s splits (a plan, no job), or on a classic session from its SparkContext. None
    when neither tells."""
    try:
        explain = getattr(session.range(1), "_explain_string", None)
        if explain is None:  # a classic session
            return int(session.sparkContext.defaultParallelism)
        plan = explain(mode="simple")
    except Exception:
        return None
    found = re.search(r"splits=(\d+)", str(plan))
    return int(found.group(1)) if found else None


def task_rate(
    rate: float,
    adaptive: bool,
    parallelism: int | None,
    conf: Any,
    *,
    partitions: int | None = None,
    what: str,
    parallelism_option: str = RATE_LIMIT_PARALLELISM,
) -> TaskRate:
    """Each task's share of a job-wide ``rate``. Raises a :class:`ConfigurationError` naming
    ``parallelism_option`` when the number of tasks at once cannot be derived from the conf."""
    if parallelism is None:
        slots, source = task_slots(conf)
        if slots is None:
            raise ConfigurationError(
                parallelism_option,
                None,
                OPTIONS[RATE_LIMIT_PARALLELISM].allowed,
                reason=f"{what}: the job's budget is split over the tasks that run at once, "
                f"which the Spark conf does not tell ({source}); set it to the number of "
                "executors x cores per executor the job runs with",
            )
        parallelism = slots if partitions is None else max(1, min(slots, partitions))
    return TaskRate(rate / parallelism, adaptive=adaptive)


def table_task_rate(
    options: LookupOptions, conf: Any, *, partitions: int | None = None, table: str = ""
) -> TaskRate | None:
    """The share of a table's ``lookup.rate-limit`` each task of a join gets (None: none)."""
    if options.rate_limit is None:
        return None
    return task_rate(
        options.rate_limit,
        bool(options.rate_limit_adaptive),
        options.rate_limit_parallelism,
        conf,
        partitions=partitions,
        what=f"lookup table {table!r}",
    )
