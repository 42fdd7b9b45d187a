"""A job's metrics as a matplotlib figure (extra ``[plot]``): latency histograms on a log-scale
axis with p50 and p99 marked, and the key counters. The figure is a plain
``matplotlib.figure.Figure`` (no pyplot state): a notebook shows it, ``savefig`` writes it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from asyncio_lookup.lookup.metrics_view import display_bins, duration, number
from asyncio_lookup.runtime.sketch import MIN_MS, LatencySketch

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PLOT_EXTRA = "pip install 'asyncio-lookup[plot]'"

#: The counters of the right-hand panel, in order: (label, metric name).
COUNTERS: tuple[tuple[str, str], ...] = (
    ("lookups", "numLookups"),
    ("records", "numCompleted"),
    ("calls", "numExternalCalls"),
    ("cache hits", "hitCount"),
    ("retries", "numRetries"),
    ("failure retries", "numFailureRetries"),
    ("throttled", "numThrottledCalls"),
    ("errors", "numErrors"),
    ("failed rows", "numFailedRows"),
    ("timeouts", "numTimeouts"),
)
_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple")


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(f"plot() needs matplotlib: {PLOT_EXTRA}") from error
    return Figure


def plot_latency(ax: Axes, latency: Mapping[str, LatencySketch]) -> None:
    """Each non-empty sketch's histogram on ``ax`` (log-scale ms), p50 dashed, p99 dotted."""
    for color, (kind, sketch) in zip(_COLORS, latency.items(), strict=False):
        edges, counts = display_bins(sketch)
        if not counts:
            continue
        ax.stairs(
            counts, edges, fill=True, alpha=0.35, color=color, label=f"{kind} ({sketch.count:,})"
        )
        ax.stairs(counts, edges, color=color)
        for name, q, style in (("p50", 0.5, "--"), ("p99", 0.99, ":")):
            value = max(sketch.quantile(q), MIN_MS)
            ax.axvline(
                value, color=color, linestyle=style, label=f"{kind} {name} {duration(value)}"
            )
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("count")
    ax.grid(which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def plot_counters(ax: Axes, values: Mapping[str, float]) -> None:
    """The key counters ``values`` has, as horizontal bars with their values."""
    rows = [(label, values[name]) for label, name in COUNTERS if name in values]
    labels = [label for label, _ in rows][::-1]
    counts = [float(value) for _, value in rows][::-1]
    bars = ax.barh(labels, counts, color="tab:gray")
    ax.bar_label(bars, labels=[number(v) for v in counts], fontsize=8, padding=2)
    ax.set_xlim(right=max(counts, default=1.0) * 1.25 or 1.0)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_title("counters", fontsize=9)


def plot_metrics(
    values: Mapping[str, float],
    latency: Mapping[str, LatencySketch],
    *,
    title: str,
    ax: Axes | None = None,
) -> Figure:
    """A figure of one table's metrics: the latency histograms (``'record'``, ``'call'``) with
    p50 / p99, and the counters beside them. With ``ax`` only the histograms, drawn on it;
    returns its figure. ImportError naming the ``[plot]`` extra without matplotlib."""
    figure_class = _figure_class()
    if ax is not None:
        plot_latency(ax, latency)
        ax.set_title(title)
        return ax.figure  # type: ignore[return-value]
    figure = figure_class(figsize=(10, 4.2), layout="constrained")
    left, right = figure.subplots(1, 2, width_ratios=(2.2, 1))
    plot_latency(left, latency)
    left.set_title("latency")
    plot_counters(right, values)
    figure.suptitle(title)
    return figure  # type: ignore[no-any-return]
