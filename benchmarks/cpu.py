"""Where the CPU goes during a run: this process (driver + latency server thread), the JVM,
and Spark's Python workers, from psutil's per-process CPU times."""

from __future__ import annotations

import psutil


def snapshot() -> dict[int, tuple[str, float]]:
    """{pid: (role, user + system CPU seconds)} for this process and its descendants."""
    me = psutil.Process()
    out = {me.pid: ("driver+server", _cpu(me))}
    for proc in me.children(recursive=True):
        try:
            role = "jvm" if "java" in proc.name() else "python_workers"
            out[proc.pid] = (role, _cpu(proc))
        except psutil.Error:
            continue
    return out


def delta_by_role(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds spent per role between two snapshots (processes born in between count
    from zero; processes that ended in between are lost, Spark reuses its workers)."""
    spent: dict[str, float] = {}
    for pid, (role, seconds) in after.items():
        previous = before.get(pid, (role, 0.0))[1]
        spent[role] = spent.get(role, 0.0) + max(0.0, seconds - previous)
    return spent


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)
