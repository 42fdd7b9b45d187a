"""A job's metrics as a notebook shows them: an HTML summary (``_repr_html_``) with latency
histograms in inline SVG. No JavaScript and no dependency; every text is escaped (table names
and warnings come from users and services). :mod:`.metrics_plot` draws the same with matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape

from asyncio_lookup.runtime.sketch import GAMMA, MIN_MS, LatencySketch

#: The quantiles the summary reports, by column title.
QUANTILES: tuple[tuple[str, float], ...] = (
    ("p50", 0.5),
    ("p90", 0.9),
    ("p99", 0.99),
    ("p99.9", 0.999),
)
#: Display bins per decade of the histograms (the sketch's 1 % buckets are far finer).
PER_DECADE = 10


def _hit_ratio(values: Mapping[str, float]) -> str | None:
    hits, misses = values.get("hitCount"), values.get("missCount")
    if hits is None or misses is None:
        return None
    asked = hits + misses
    return f"{hits / asked:.1%}" if asked else "no cache lookups"


#: The key figures, in order: (label, metric name or a function of all values); a figure the
#: values do not have is left out.
FIGURES: tuple[tuple[str, str | Callable[[Mapping[str, float]], str | None]], ...] = (
    ("lookups", "numLookups"),
    ("records completed", "numCompleted"),
    ("external calls", "numExternalCalls"),
    ("cache hit ratio", _hit_ratio),
    ("retries", "numRetries"),
    ("failure retries", "numFailureRetries"),
    ("lookup-miss retries", "numLookupMissRetries"),
    ("throttled calls", "numThrottledCalls"),
    ("errors", "numErrors"),
    ("failed rows", "numFailedRows"),
    ("timeouts", "numTimeouts"),
)


def number(value: float) -> str:
    """An int with thousands separators; a float with them too and 4 significant digits
    (never in exponent form: ``248,700``, ``0.1235``)."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return f"{int(value):,}"
    if not math.isfinite(value) or value == 0:
        return str(value)
    rounded = float(f"{value:.4g}")
    decimals = max(0, 3 - math.floor(math.log10(abs(rounded))))
    return _trimmed(f"{rounded:,.{decimals}f}")


def _digits(value: float) -> str:
    """3 significant digits, never in exponent form (``999.7`` is ``1,000``)."""
    rounded = float(f"{value:.3g}")
    if rounded == 0 or not math.isfinite(rounded):
        return f"{rounded:g}"
    decimals = max(0, 2 - math.floor(math.log10(abs(rounded))))
    return _trimmed(f"{rounded:,.{decimals}f}")


def _trimmed(text: str) -> str:
    """Without trailing zeros after the point (as ``g`` formats): ``1.50`` is ``1.5``."""
    return text.rstrip("0").rstrip(".") if "." in text else text


def duration(ms: float) -> str:
    """Milliseconds in the unit that reads best: µs, ms or s, chosen after rounding to 3
    significant digits (999.7 ms is ``1 s``, not ``1e+03 ms``)."""
    if float(f"{ms:.3g}") < 1:
        return f"{_digits(ms * 1000)} µs"
    if float(f"{ms:.3g}") < 1000:
        return f"{_digits(ms)} ms"
    return f"{_digits(ms / 1000)} s"


def key_figures(values: Mapping[str, float]) -> list[tuple[str, str]]:
    """(label, text) of the key figures ``values`` has."""
    rows = []
    for label, source in FIGURES:
        if callable(source):
            text = source(values)
        else:
            text = number(values[source]) if source in values else None
        if text is not None:
            rows.append((label, text))
    return rows


def display_bins(
    sketch: LatencySketch, per_decade: int = PER_DECADE
) -> tuple[list[float], list[int]]:
    """The sketch as a histogram on a log scale: ``per_decade`` bins per decade of ms, from
    the lowest non-empty one to the highest (empty ones between them 0). Returns the bin edges
    (ms, one more than the counts) and the counts; values below 1 µs count in the 1 µs bin."""
    counts: dict[int, int] = {}
    for lower, upper, n in sketch.bins():
        midpoint = 2 * upper / (GAMMA + 1) if lower else MIN_MS
        index = math.floor(math.log10(midpoint) * per_decade + 1e-9)
        counts[index] = counts.get(index, 0) + n
    if not counts:
        return [], []
    first, last = min(counts), max(counts)
    edges = [10 ** (i / per_decade) for i in range(first, last + 2)]
    return edges, [counts.get(i, 0) for i in range(first, last + 1)]


def _svg_histogram(kind: str, sketch: LatencySketch, width: int = 420, height: int = 120) -> str:
    """One latency histogram as inline SVG: bars on a log-scale ms axis, p50 and p99 marked."""
    edges, counts = display_bins(sketch)
    if not counts:
        return ""
    low, high = math.floor(math.log10(edges[0])), math.ceil(math.log10(edges[-1]))
    high = max(high, low + 1)
    left, right, top, bottom = 8, width - 8, 26, height - 18

    def x(ms: float) -> float:
        return left + (math.log10(ms) - low) / (high - low) * (right - left)

    tallest = max(counts)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(kind)} latency histogram" '
        'style="font:10px sans-serif;display:block">'
    ]
    for n, lo, hi in zip(counts, edges, edges[1:], strict=False):
        if not n:
            continue
        h = (bottom - top) * n / tallest
        parts.append(
            f'<rect class="bin" x="{x(lo):.1f}" y="{bottom - h:.1f}" '
            f'width="{max(x(hi) - x(lo) - 0.5, 0.5):.1f}" height="{h:.1f}" fill="#4c78a8">'
            f"<title>{escape(duration(lo))} to {escape(duration(hi))}: {n:,}</title></rect>"
        )
    parts.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/>')
    for decade in range(low, high + 1):
        tick = x(10.0**decade)
        align = "start" if decade == low else "end" if decade == high else "middle"
        parts.append(
            f'<line x1="{tick:.1f}" y1="{bottom}" x2="{tick:.1f}" y2="{bottom + 3}" '
            f'stroke="#888"/><text x="{tick:.1f}" y="{height - 4}" text-anchor="{align}" '
            f'fill="#555">{escape(duration(10.0**decade))}</text>'
        )
    # each mark's label on its own line above the bars, kept inside the picture
    for line, (name, q, color) in enumerate((("p50", 0.5, "#2ca02c"), ("p99", 0.99, "#d62728"))):
        value = sketch.quantile(q)
        if value <= 0:
            continue
        at = x(max(value, MIN_MS))
        y = 10 + 11 * line
        anchor = 'text-anchor="end" ' if at > (left + right) / 2 else ""
        label_x = at - 3 if anchor else at + 3
        parts.append(
            f'<line class="mark" data-mark="{name}" x1="{at:.1f}" y1="{y - 8}" x2="{at:.1f}" '
            f'y2="{bottom}" stroke="{color}" stroke-dasharray="3,2"/>'
            f'<text x="{label_x:.1f}" y="{y}" {anchor}fill="{color}">'
            f"{name} {escape(duration(value))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


_TABLE = 'style="border-collapse:collapse;margin:4px 0"'
_CELL = 'style="padding:1px 8px;text-align:right"'
_HEAD = 'style="padding:1px 8px;text-align:left"'


def metrics_html(
    values: Mapping[str, float],
    latency: Mapping[str, LatencySketch],
    *,
    title: str,
    notes: Sequence[str] = (),
) -> str:
    """The HTML summary of one table's (or ``async_map``'s) metrics: its key figures, the
    quantiles of each latency sketch (``'record'``, ``'call'``) with its histogram, the notes
    (why only part of the job is covered, warnings), and every metric in a ``<details>``."""
    out = [f'<div class="asyncio-lookup-metrics"><strong>{escape(title)}</strong>']
    if notes:
        out.append('<ul class="notes" style="margin:4px 0;color:#a0522d">')
        out.extend(f"<li>{escape(str(note))}</li>" for note in notes)
        out.append("</ul>")
    figures = key_figures(values)
    if figures:
        out.append(f'<table class="figures" {_TABLE}>')
        out.extend(
            f"<tr><th {_HEAD}>{escape(label)}</th><td {_CELL}>{escape(text)}</td></tr>"
            for label, text in figures
        )
        out.append("</table>")
    shown = {kind: sketch for kind, sketch in latency.items() if sketch.count}
    if shown:
        names = ["latency", "count", *(name for name, _ in QUANTILES), "max", "mean"]
        out.append(f'<table class="latency" {_TABLE}><tr>')
        out.extend(f"<th {_HEAD}>{escape(name)}</th>" for name in names)
        out.append("</tr>")
        for kind, sketch in shown.items():
            cells = [
                f"{sketch.count:,}",
                *(duration(sketch.quantile(q)) for _, q in QUANTILES),
                duration(sketch.max_ms),
                duration(sketch.mean_ms),
            ]
            out.append(f'<tr data-latency="{escape(kind)}"><th {_HEAD}>{escape(kind)}</th>')
            out.extend(f"<td {_CELL}>{escape(cell)}</td>" for cell in cells)
            out.append("</tr>")
        out.append("</table>")
        for kind, sketch in shown.items():
            out.append(
                f'<div class="histogram" data-latency="{escape(kind)}">'
                f"<small>{escape(kind)} latency</small>{_svg_histogram(kind, sketch)}</div>"
            )
    elif not figures:
        out.append("<p>no metrics</p>")
    if values:
        out.append(f"<details><summary>all {len(values)} metrics</summary><table {_TABLE}>")
        out.extend(
            f"<tr><th {_HEAD}>{escape(str(name))}</th><td {_CELL}>{escape(number(value))}</td></tr>"
            for name, value in sorted(values.items())
        )
        out.append("</table></details>")
    out.append("</div>")
    return "".join(out)
