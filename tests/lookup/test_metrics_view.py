"""The HTML summary and the matplotlib figure of a job's metrics (lookup/metrics_view.py,
lookup/metrics_plot.py)."""

from __future__ import annotations

import itertools
import math
import sys
from html.parser import HTMLParser

import matplotlib
import pytest

from asyncio_lookup.lookup.metrics_plot import plot_metrics
from asyncio_lookup.lookup.metrics_view import display_bins, metrics_html
from asyncio_lookup.runtime.sketch import LatencySketch

matplotlib.use("Agg")


def sketch_of(values_ms: list[float]) -> LatencySketch:
    sketch = LatencySketch()
    for ms in values_ms:
        sketch.add(ms)
    return sketch


VALUES: dict[str, float] = {
    "numLookups": 2000,
    "numExternalCalls": 1500,
    "hitCount": 500,
    "missCount": 1500,
    "numRetries": 406,
    "numErrors": 2,
    "numTimeouts": 1,
    "latencyP99Ms": 300.0,
}
# 95 % at 10 ms, 5 % at 300 ms
RECORD = sketch_of([10.0] * 1900 + [300.0] * 100)
CALL = sketch_of([2.0] * 1000 + [0.0005] * 500)


class Page(HTMLParser):
    """Elements with their attributes, and the text of each table row."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[list[str]] = []
        self.texts: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def row(self, first: str) -> list[str]:
        (found,) = [r for r in self.rows if r and r[0] == first]
        return found

    def named(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [
            a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())
        ]


def test_the_summary_shows_the_key_figures_and_latency_quantiles() -> None:
    page = Page(metrics_html(VALUES, {"record": RECORD, "call": CALL}, title="customers"))
    assert page.row("lookups") == ["lookups", "2,000"]
    assert page.row("external calls") == ["external calls", "1,500"]
    assert page.row("cache hit ratio") == ["cache hit ratio", "25.0%"]
    assert page.row("retries") == ["retries", "406"]
    assert page.row("errors") == ["errors", "2"]
    assert page.row("timeouts") == ["timeouts", "1"]
    assert page.row("latency") == ["latency", "count", "p50", "p90", "p99", "p99.9", "max", "mean"]
    record = page.row("record")
    assert record[1] == "2,000"
    assert record[2] == "10.1 ms"  # within 1 % of 10 ms
    assert record[4] == "300 ms"  # p99 is in the 5 % at 300 ms
    assert record[6] == "300 ms"  # the exact maximum
    call = page.row("call")
    assert call[1:3] == ["1,500", "1.99 ms"]  # 500 of 1,500 below 1 µs, the rest at 2 ms
    # every metric, in <details>
    assert page.row("latencyP99Ms") == ["latencyP99Ms", "300"]
    assert f"all {len(VALUES)} metrics" in page.texts


def test_the_histograms_hold_every_value_on_a_log_axis_with_p50_and_p99() -> None:
    page = Page(metrics_html(VALUES, {"record": RECORD}, title="customers"))
    (svg,) = page.named("svg")
    assert svg["aria-label"] == "record latency histogram"
    bars = page.named("rect", **{"class": "bin"})
    assert len(bars) == 2  # the 10 ms bin and the 300 ms bin
    titles = [t for t in page.texts if " to " in t and ":" in t]
    assert sum(int(t.rsplit(":", 1)[1].replace(",", "")) for t in titles) == RECORD.count
    assert [m["data-mark"] for m in page.named("line", **{"class": "mark"})] == ["p50", "p99"]
    ticks = [t for t in page.texts if t.endswith(("ms", "s")) and t[0].isdigit()]
    assert {"10 ms", "100 ms", "1 s"} <= set(ticks)  # decades


def test_display_bins_are_a_decade_split_in_ten_and_keep_every_count() -> None:
    edges, counts = display_bins(CALL)
    assert sum(counts) == CALL.count
    assert len(edges) == len(counts) + 1
    assert edges[0] == pytest.approx(1e-3)  # the values below 1 µs count at 1 µs
    ratios = {round(b / a, 6) for a, b in itertools.pairwise(edges)}
    assert ratios == {round(10**0.1, 6)}
    assert display_bins(LatencySketch()) == ([], [])


def test_everything_rendered_is_escaped() -> None:
    evil = '<script>alert("x")</script>'
    html = metrics_html(
        {"numLookups": 1, evil: 2},
        {evil: sketch_of([1.0])},
        title=f"table {evil}",
        notes=[f"warning from the service: {evil} & more"],
    )
    page = Page(html)
    assert not page.named("script")
    assert "<script>" not in html
    assert f"table {evil}" in page.texts
    assert f"warning from the service: {evil} & more" in page.texts
    assert [evil, "2"] in page.rows  # the metric, in <details>
    assert [r[0] for r in page.rows].count(evil) == 2  # and the latency row
    assert page.named("svg")[0]["aria-label"] == f"{evil} latency histogram"


def test_without_latency_or_figures_it_says_so() -> None:
    page = Page(metrics_html({}, {"record": LatencySketch()}, title="t", notes=["partial"]))
    assert "no metrics" in page.texts
    assert "partial" in page.texts
    assert not page.named("svg")


def test_the_figure_has_the_histograms_marks_and_counters() -> None:
    figure = plot_metrics(VALUES, {"record": RECORD, "call": CALL}, title="customers")
    latency, counters = figure.axes
    assert latency.get_xscale() == "log"
    assert figure.get_suptitle() == "customers"
    labels = [line.get_label() for line in latency.get_lines()]
    assert labels == [
        "record p50 10.1 ms",
        "record p99 300 ms",
        "call p50 1.99 ms",
        "call p99 1.99 ms",
    ]
    p99 = latency.get_lines()[1].get_xdata()[0]
    assert p99 == pytest.approx(300, rel=0.01)
    fills = [p for p in latency.patches if p.get_label().startswith("record")]
    assert fills  # the record histogram is drawn
    heights = {p.get_width(): p.get_y() for p in counters.patches}
    assert sorted(heights) == [1, 2, 406, 500, 1500, 2000]
    assert [t.get_text() for t in counters.get_yticklabels()][-1] == "lookups"


def test_the_histograms_go_on_a_given_axes() -> None:
    from matplotlib.figure import Figure

    figure = Figure()
    ax = figure.subplots()
    assert plot_metrics(VALUES, {"record": RECORD}, title="one", ax=ax) is figure
    assert ax.get_title() == "one"
    assert len(ax.get_lines()) == 2
    assert math.isclose(ax.get_lines()[0].get_xdata()[0], RECORD.quantile(0.5))


def test_without_matplotlib_plot_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'asyncio-lookup\[plot\]'"):
        plot_metrics(VALUES, {}, title="t")


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (999.7, "1 s"),  # was '1e+03 ms'
        (0.9996, "1 ms"),  # was '1e+03 µs'
        (1234567.0, "1,230 s"),  # was '1.23e+03 s'
        (12.345, "12.3 ms"),
        (0.5, "500 µs"),
        (1.5, "1.5 ms"),
    ],
)
def test_durations_never_read_in_exponent_form(ms: float, text: str) -> None:
    from asyncio_lookup.lookup.metrics_view import duration

    assert duration(ms) == text


def test_numbers_never_read_in_exponent_form() -> None:
    from asyncio_lookup.lookup.metrics_view import number

    assert number(248731.512) == "248,700"  # was '2.487e+05'
    assert number(0.12345) == "0.1235"
    assert number(1_000_000) == "1,000,000"
    assert number(12.5) == "12.5"
