"""PNG plots (matplotlib, Agg backend); each function writes one file and returns its name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt


def grouped_bars(
    path: Path,
    title: str,
    groups: Mapping[str, Mapping[str, float]],
    ylabel: str,
    *,
    log: bool = False,
) -> str:
    """One cluster of bars per group (e.g. per latency), one bar per variant, values on top."""
    variants: list[str] = []
    for values in groups.values():
        variants += [v for v in values if v not in variants]
    fig, ax = plt.subplots(figsize=(9, 5.4))
    width = 0.8 / max(len(variants), 1)
    for i, variant in enumerate(variants):
        xs = [g + (i - (len(variants) - 1) / 2) * width for g in range(len(groups))]
        ys = [groups[name].get(variant, 0.0) for name in groups]
        bars = ax.bar(xs, ys, width, label=variant)
        ax.bar_label(bars, labels=[f"{y:,.0f}" if y >= 10 else f"{y:.2g}" for y in ys],
                     fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    top = max((v for values in groups.values() for v in values.values()), default=1.0)
    if log:
        ax.set_yscale("log")
        ax.set_ylim(top=top * 2.5)
    else:
        ax.set_ylim(top=top * 1.15)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1),
              ncol=min(len(variants), 3), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def capacity_sweep(
    path: Path,
    title: str,
    capacities: Sequence[int],
    throughput: Sequence[float],
    little: Sequence[float],
    cpu_ceiling: float,
) -> str:
    """Throughput vs capacity against Little's law and the measured CPU ceiling (log-log)."""
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(capacities, little, "--", color="gray",
            label="Little's law: partitions x capacity / latency")
    ax.axhline(cpu_ceiling, color="red", linestyle=":",
               label=f"CPU ceiling {cpu_ceiling:,.0f} rows/s")
    bound = [min(a, cpu_ceiling) for a in little]
    ax.plot(capacities, [0.8 * b for b in bound], ":", color="orange",
            label="80% of min(Little, CPU)")
    ax.plot(capacities, throughput, "o-", color="tab:blue", label="lookup_join measured")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("capacity (in-flight lookups per partition)")
    ax.set_ylabel("rows / s")
    ax.set_title(title)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def lines(
    path: Path,
    title: str,
    xs: Sequence[float],
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    *,
    logx: bool = False,
) -> str:
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, ys in series.items():
        ax.plot(xs, ys, "o-", label=name)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
