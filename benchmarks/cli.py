"""Command line of the harness: pick scenarios, run them with a progress bar, write results."""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks import report
from benchmarks.harness import RESULTS_DIR, Context, ScenarioResult, Skipped, machine_info
from benchmarks.scenarios import BY_NAME, SCENARIOS, Scenario


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    names = [s.name for s in SCENARIOS]
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="asyncio-lookup benchmark harness. Scenarios: " + ", ".join(names),
    )
    parser.add_argument(
        "scenarios", nargs="*", metavar="SCENARIO", default=["all"],
        help="scenario names, 'all' (default; every scenario but the opt-in ones) or 'list'",
    )
    parser.add_argument(
        "--quick", action="store_true",
        help="fast smoke run: small row counts, one repeat; results go to results/quick/",
    )
    parser.add_argument("--repeats", type=int, default=None, help="runs per variant (default 3)")
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    args = parser.parse_args(argv)
    unknown = [s for s in args.scenarios if s not in BY_NAME and s not in ("all", "list")]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {names}, 'all' or 'list'")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=140)
    if "list" in args.scenarios:
        for scenario in SCENARIOS:
            extra = "" if scenario.in_all else "  (opt-in: not part of 'all')"
            console.print(f"{scenario.name:<20} {scenario.title}{extra}")
        return 0
    named = [BY_NAME[name] for name in dict.fromkeys(args.scenarios) if name != "all"]
    if "all" in args.scenarios:
        named = [s for s in SCENARIOS if s.in_all or s in named]
    selected = named
    full_run = {s.name for s in selected} >= {s.name for s in SCENARIOS if s.in_all}
    out_dir = args.out or (RESULTS_DIR / "quick" if args.quick else RESULTS_DIR)
    repeats = args.repeats or (1 if args.quick else 3)
    meta = {**machine_info(), "quick": args.quick, "repeats": repeats}
    results: list[ScenarioResult] = []
    started = time.perf_counter()
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=console, transient=False,
    )
    overall = progress.add_task("all scenarios", total=len(selected))
    ctx = Context(quick=args.quick, repeats=repeats, out_dir=out_dir, progress=progress)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        with progress:
            for scenario in selected:
                progress.update(overall, description=f"scenario {scenario.name}")
                ctx.log(f"[bold cyan]== {scenario.title} ({scenario.name})[/]")
                result = _run_one(ctx, scenario)
                results.append(result)
                report.save(out_dir, meta, results, full_run=full_run)
                progress.advance(overall)
    finally:
        ctx.close()
    meta["total_duration_s"] = round(time.perf_counter() - started, 1)
    path = report.save(out_dir, meta, results, full_run=full_run)
    console.print(f"\nresults: {path} and {path.with_suffix('.md')}")
    _summary(console, results)
    console.print(f"total {meta['total_duration_s']:.0f} s")
    return 1 if any(r.status.startswith("failed") for r in results) else 0


def _run_one(ctx: Context, scenario: Scenario) -> ScenarioResult:
    begin = time.perf_counter()
    when = time.strftime("%Y-%m-%dT%H:%M:%S")
    try:
        result = scenario.load()(ctx)
    except Skipped as skipped:
        result = ScenarioResult(scenario.name, scenario.title, status=f"skipped: {skipped}")
        ctx.log(f"  [yellow]skipped: {skipped}[/]")
    except Exception as error:
        result = ScenarioResult(scenario.name, scenario.title, status=f"failed: {error!r}")
        result.notes.append("```\n" + traceback.format_exc(limit=8) + "```")
        ctx.log(f"  [red]failed: {error!r}[/]\n{traceback.format_exc(limit=8)}")
    ctx.finish()
    result.name, result.title = scenario.name, scenario.title
    result.started_at, result.quick = when, ctx.quick
    result.duration_s = time.perf_counter() - begin
    return result


def _summary(console: Console, results: list[ScenarioResult]) -> None:
    for result in results:
        console.print(f"[bold]{result.name}[/]: {result.status} ({result.duration_s:.0f} s)")
        for target in result.targets:
            colour = "green" if target.met else "red"
            verdict = "MET" if target.met else "MISSED"
            console.print(
                f"   [{colour}]{verdict}[/] {target.name}: {target.value:.3g} "
                f"(required {target.bound})"
            )
