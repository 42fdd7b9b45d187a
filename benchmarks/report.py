"""Results on disk: ``latest.json`` (merged per scenario) and ``latest.md`` rendered from it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from benchmarks.harness import ScenarioResult
from benchmarks.scenarios import SCENARIOS


def load(path: Path) -> dict[str, Any]:
    if path.exists():
        try:
            loaded: dict[str, Any] = json.loads(path.read_text())
            if isinstance(loaded.get("scenarios"), dict):
                return loaded
        except (OSError, ValueError):
            pass
    return {"meta": {}, "scenarios": {}}


def save(
    out_dir: Path, meta: dict[str, Any], results: list[ScenarioResult], *, full_run: bool = True
) -> Path:
    """Merge ``results`` into ``out_dir/latest.json`` and re-render ``latest.md``.

    A run of some scenarios only keeps the last full run's ``meta`` and is listed under
    ``meta["partial_runs"]``; each scenario carries its own start time and duration.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "latest.json"
    document = load(path)
    if full_run or not document.get("meta"):
        document["meta"] = meta
    else:
        partial = document["meta"].setdefault("partial_runs", [])
        entry = {**meta, "scenarios": [r.name for r in results]}
        if partial and partial[-1].get("date") == meta.get("date"):
            partial[-1] = entry
        else:
            partial.append(entry)
    for result in results:
        document["scenarios"][result.name] = result.to_json()
    order = {s.name: i for i, s in enumerate(SCENARIOS)}
    document["scenarios"] = dict(
        sorted(document["scenarios"].items(), key=lambda item: order.get(item[0], len(order)))
    )
    path.write_text(json.dumps(document, indent=2, default=_jsonable) + "\n")
    (out_dir / "latest.md").write_text(render_markdown(document))
    return path


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def fmt(value: Any) -> str:
    """A table cell: thousands separators, about three significant digits."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 100:
            return f"{value:.0f}"
        if magnitude >= 10:
            return f"{value:.1f}"
        if magnitude >= 1:
            return f"{value:.2f}"
        if magnitude >= 0.1:
            return f"{value:.3f}"
        return f"{value:.3g}"
    return str(value).replace("|", "\\|")


def table(columns: list[str], rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(fmt(row.get(c)) for c in columns) + " |" for row in rows]
    return lines


def targets_table(document: dict[str, Any]) -> list[str]:
    rows = []
    for scenario in document["scenarios"].values():
        for target in scenario.get("targets", []):
            rows.append(
                {
                    "scenario": scenario["name"],
                    "target": target["name"],
                    "value": target["value"],
                    "required": _bound(target),
                    "met": "MET" if target["met"] else "MISSED",
                }
            )
        if not scenario["status"].startswith("ok"):
            rows.append(
                {"scenario": scenario["name"], "target": scenario["status"], "value": None,
                 "required": "", "met": ""}
            )
    return table(["scenario", "target", "value", "required", "met"], rows)


def _bound(target: dict[str, Any]) -> str:
    parts = []
    if target.get("minimum") is not None:
        parts.append(f">= {target['minimum']:g}")
    if target.get("maximum") is not None:
        parts.append(f"<= {target['maximum']:g}")
    return " and ".join(parts)


def _client_build(meta: dict[str, Any]) -> str:
    compiled = meta.get("http_client_compiled")
    if compiled is None:
        return ""  # a run from before the compiled client
    return ", HTTP client compiled (mypyc)" if compiled else ", HTTP client pure Python"


def render_markdown(document: dict[str, Any]) -> str:
    meta = document.get("meta", {})
    lines = [
        "# asyncio-lookup benchmarks",
        "",
        f"Run {meta.get('date', '?')} on `{meta.get('host', '?')}` ({meta.get('cpus', '?')} CPUs, "
        f"load average at start {meta.get('load_average_at_start', '?')}), Python "
        f"{meta.get('python', '?')}, PySpark {meta.get('pyspark', '?')}, commit "
        f"`{meta.get('git_commit', '?')}`{_client_build(meta)}"
        f"{' — QUICK smoke run' if meta.get('quick') else ''}"
        + (f", {meta['total_duration_s']:.0f} s in all." if meta.get("total_duration_s") else "."),
        "Times are medians over repeated runs; every ratio compares variants measured in the same "
        "run. The machine has 2 shared cores, so absolute figures are noisy; ratios less so.",
        "Regenerate with `make bench` (or `python -m benchmarks all`).",
        *[
            f"Re-run later on their own: {', '.join(p['scenarios'])} ({p.get('date', '?')}, load "
            f"average at start {p.get('load_average_at_start', '?')}{_client_build(p)})."
            for p in meta.get("partial_runs", [])
        ],
        "",
        "## Targets",
        "",
        *targets_table(document),
        "",
    ]
    for scenario in document["scenarios"].values():
        lines += [f"## {scenario['title']} (`{scenario['name']}`)", ""]
        when = scenario.get("started_at", "")
        lines.append(
            f"Status: {scenario['status']}; ran {when}, {scenario.get('duration_s', 0):.0f} s"
            f"{', quick' if scenario.get('quick') else ''}."
        )
        lines.append("")
        if scenario.get("table"):
            lines += table(scenario["columns"], scenario["table"])
            lines.append("")
        for target in scenario.get("targets", []):
            verdict = "MET" if target["met"] else "MISSED"
            lines.append(
                f"- Target {target['name']}: {fmt(target['value'])} (required "
                f"{_bound(target)}) — **{verdict}**"
                + (f". {target['detail']}" if target.get("detail") else "")
            )
        for note in scenario.get("notes", []):
            lines.append(f"- {note}")
        for plot in scenario.get("plots", []):
            lines += ["", f"![{Path(plot).stem}]({plot})"]
        lines.append("")
    return "\n".join(lines)
