"""Scenarios whose measurements live in modules other helpers own, run through the harness:

- ``operator-overhead``: :mod:`benchmarks.operator_overhead` (``measure(use_uvloop, n, runs)``);
- ``connectors``: :mod:`benchmarks.connectors` (its ``main(argv)`` with ``--json``);
- ``hash-lookup-join`` (opt-in): :mod:`benchmarks.hash_lookup_join` (``run(quick) -> dict``).
"""

from __future__ import annotations

import importlib
import json
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import plots
from benchmarks.harness import Context, ScenarioResult, Skipped, Target


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise Skipped(f"{name} is not available ({error})") from error


def run_operator_overhead(ctx: Context) -> ScenarioResult:
    """The async wait operator vs a minimal hand-rolled pipeline, no-op function, per element."""
    module = _module("benchmarks.operator_overhead")
    if not hasattr(module, "measure"):
        raise Skipped("benchmarks.operator_overhead has no measure(use_uvloop, n, runs)")
    from asyncio_lookup.runtime.loop import uvloop_available

    result = ScenarioResult("operator-overhead", "Operator overhead")
    elements = 20_000 if ctx.quick else 200_000
    runs = ctx.repeats if ctx.quick else max(ctx.repeats, 5)
    loops = [("asyncio", False)] + ([("uvloop", True)] if uvloop_available() else [])
    ctx.begin("operator overhead", len(loops))
    bars: dict[str, dict[str, float]] = {}
    for loop_name, use_uvloop in loops:
        medians = {name: _cpu_wall(value)
                   for name, value in module.measure(use_uvloop, elements, runs).items()}
        ctx.advance(f"operator overhead on {loop_name}")
        base_cpu, base_wall = medians["hand-rolled"]
        for pipeline, (cpu, wall) in medians.items():
            ctx.log(f"  {loop_name:<8} {pipeline:<16} CPU {cpu:7.2f} µs/element "
                    f"({cpu / base_cpu:5.2f}x), wall {wall:7.2f} µs/element")
            bars.setdefault(loop_name, {})[pipeline] = cpu
            result.add_row(loop=loop_name, pipeline=pipeline, cpu_us_per_element=cpu,
                           cpu_vs_hand_rolled=cpu / base_cpu, wall_us_per_element=wall,
                           wall_vs_hand_rolled=wall / base_wall)
            if pipeline != "hand-rolled":
                result.targets.append(Target(
                    f"{pipeline} / hand-rolled on {loop_name} (CPU time)", cpu / base_cpu,
                    maximum=1.5, detail=f"{cpu:.2f} vs {base_cpu:.2f} µs/element"))
                if use_uvloop:
                    result.targets.append(Target(
                        f"{pipeline} CPU µs/element on uvloop", cpu, maximum=6.0))
    result.notes.append(
        f"No-op async function, {elements:,} elements, capacity 100, median of {runs} "
        "interleaved runs in one process (benchmarks/operator_overhead.py). The hand-rolled "
        "pipeline starts its tasks as the operator does (on 3.11, asyncio.Task with a fixed "
        "name; before 2026-11-27 asyncio.ensure_future, which formats a Task-<n> name for each "
        "and took 1.8-2x as long). CPU time of the "
        "process is the primary figure (the machine is shared; wall time is shown too). "
        "Targets are that module's: <= 1.5x hand-rolled, <= 6 µs/element on uvloop."
    )
    result.plots.append(plots.grouped_bars(
        ctx.out_dir / "operator_overhead.png",
        "Async wait operator overhead (CPU µs per element)",
        bars, "µs / element",
    ))
    return result


def _cpu_wall(value: Any) -> tuple[float, float]:
    """``measure`` gives (CPU, wall) µs/element; an older version gave wall time alone."""
    if isinstance(value, (tuple, list)):
        return float(value[0]), float(value[1])
    return float(value), float(value)


def run_connectors(ctx: Context) -> ScenarioResult:
    """Per-key vs batched async lookups on Redis and PostgreSQL (benchmarks/connectors.py)."""
    module = _module("benchmarks.connectors")
    if not hasattr(module, "main"):
        raise Skipped("benchmarks.connectors has no main(argv)")
    result = ScenarioResult("connectors", "Connectors: per-key vs batched lookups")
    keys = 10_000 if ctx.quick else 100_000
    ctx.begin("connectors", 1)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "connectors.json"
        argv = ["--keys", str(keys), "--runs", str(ctx.repeats), "--uvloop", "--json", str(out)]
        status = module.main(argv)
        if status:
            raise RuntimeError(f"benchmarks.connectors exited with {status}")
        document = json.loads(out.read_text())
    ctx.advance("connectors")
    bars: dict[str, dict[str, float]] = {}
    for r in document["results"]:
        result.add_row(store=r["store"], keys=keys, per_key_keys_per_s=r["per_key"],
                       batched_keys_per_s=r["batched"], ratio=r["ratio"])
        result.targets.append(Target(f"{r['store']} batched / per-key", r["ratio"],
                                     minimum=r["target"],
                                     detail=f"{r['batched']:,.0f} vs {r['per_key']:,.0f} keys/s"))
        bars[r["store"]] = {"per-key": r["per_key"], "batched": r["batched"]}
    args = document.get("args", {})
    result.notes.append(
        f"{keys:,} keys, median of {ctx.repeats} runs, uvloop; per-key "
        f"{args.get('concurrency')} in flight; batched {args.get('batch_size')} keys per call, "
        f"{args.get('batch_concurrency')} calls in flight (benchmarks/connectors.py)."
    )
    result.data["connectors"] = document
    result.plots.append(plots.grouped_bars(
        ctx.out_dir / "connectors.png", "Connector lookups: per-key vs batched (keys/s)", bars,
        "keys / s",
    ))
    return result


def run_hash_lookup_join(ctx: Context) -> ScenarioResult:
    """Issue 6's figures: calls with vs without shuffle, salting a hot key, partitioned FULL."""
    module = _module("benchmarks.hash_lookup_join")
    if not hasattr(module, "run"):
        raise Skipped("benchmarks.hash_lookup_join has no run(quick)")
    result = ScenarioResult("hash-lookup-join",
                            "Hash lookup join: shuffle, salting, partitioned FULL cache")
    ctx.begin("hash lookup join", 1)
    ctx.stop_spark()  # it builds its own sessions (16 and 2 task slots)
    figures: dict[str, Any] = module.run(quick=ctx.quick)
    ctx.advance("hash lookup join")
    hits, hot, full = figures["cache_hits"], figures["hot_key"], figures["full_cache"]
    for name in ("plain", "shuffled"):
        h = hits[name]
        result.add_row(part="Zipf keys, PARTIAL cache", variant=name,
                       external_calls=h["external_calls"], hit_ratio=h["hit_ratio"],
                       wall_s=h["wall_s"])
    for name in ("unsalted", "salted"):
        h = hot[name]
        result.add_row(part="one hot key (50% of rows)", variant=name,
                       slowest_task_s=h["slowest_task_s"], wall_s=h["wall_s"],
                       external_calls=h["external_calls"])
    for name in ("whole_table", "partitioned"):
        h = full[name]
        result.add_row(part="FULL cache per task", variant=name,
                       max_records_per_task=h["max_records_per_task"],
                       max_bytes_per_task=h["max_bytes_per_task"])
    result.targets += [
        Target("external calls without / with shuffle", hits["calls_ratio"], minimum=3.0),
        Target("slowest task unsalted / salted", hot["slowest_task_ratio"], minimum=2.0),
        Target("FULL bytes per task partitioned / whole", full["bytes_share"],
               maximum=full["target_share"], detail=f"1/P + 10%, P = {full['partitions']}"),
    ]
    result.notes.append(
        "Figures from benchmarks/hash_lookup_join.py (its own sessions: 16 partitions; see that "
        "module for the set-up). On its own: `python -m benchmarks hash-lookup-join`."
    )
    result.data["hash_lookup_join"] = figures
    return result
