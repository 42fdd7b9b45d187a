"""Where the CPU goes during a run: this process (driver + latency server thread), the JVM,
and Spark's Python workers, from psutil's per-process CPU times; and the whole machine's busy
CPU time, from ``/proc/stat``."""

from __future__ import annotations

import os

import psutil

_TICKS = float(os.sysconf("SC_CLK_TCK"))


def snapshot(named: dict[int, str] | None = None) -> dict[int, tuple[str, float]]:
    """{pid: (role, user + system CPU seconds)} for this process and its descendants;
    ``named`` gives some children their own role (a server process: ``{pid: "server"}``)."""
    me = psutil.Process()
    named = named or {}
    out = {me.pid: ("driver+server", _cpu(me))}
    for proc in me.children(recursive=True):
        try:
            role = named.get(proc.pid) or ("jvm" if "java" in proc.name() else "python_workers")
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


def jit_s(tree: dict[int, tuple[str, float]]) -> float:
    """CPU seconds the JIT compiler threads of the ``jvm`` processes of ``tree`` (a
    :func:`snapshot`) have used, a part of their CPU: HotSpot's ``C1``/``C2 CompilerThread``s,
    which keep compiling the driver's and executors' code for many jobs after start (query
    planning, new code paths)."""
    total = 0.0
    for pid, (role, _) in tree.items():
        if role != "jvm":
            continue
        try:
            for task in os.scandir(f"/proc/{pid}/task"):
                with open(f"{task.path}/stat") as stat:
                    text = stat.read()
                if "CompilerThre" in text[text.index("(") : text.rindex(")")]:
                    fields = text[text.rindex(")") + 2 :].split()
                    total += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
        except OSError:  # the process or thread ended meanwhile
            continue
    return total


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy since boot (every core: user, nice, system,
    irq, softirq, steal; not idle nor iowait), from ``/proc/stat``."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / _TICKS
