"""The latency sketch: quantiles within 1 % of the true ones, merges that equal one sketch."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncio_lookup.runtime.sketch import MAX_MS, MIN_MS, RELATIVE_ACCURACY, LatencySketch

latencies = st.lists(
    st.floats(min_value=MIN_MS, max_value=MAX_MS, allow_nan=False), min_size=1, max_size=300
)
quantiles = st.sampled_from([0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0])


def true_quantile(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))]


def sketch_of(values: list[float]) -> LatencySketch:
    sketch = LatencySketch()
    for value in values:
        sketch.add(value)
    return sketch


@given(latencies, quantiles)
def test_quantiles_are_within_the_relative_accuracy(values: list[float], q: float) -> None:
    expected = true_quantile(values, q)
    got = sketch_of(values).quantile(q)
    assert abs(got - expected) <= RELATIVE_ACCURACY * expected * (1 + 1e-9)


@given(st.lists(latencies, min_size=1, max_size=6), quantiles)
def test_merged_sketches_answer_like_one_sketch_of_all_values(
    parts: list[list[float]], q: float
) -> None:
    merged = LatencySketch()
    for part in parts:
        merged.merge(sketch_of(part))
    whole = sketch_of([v for part in parts for v in part])
    assert merged.counts == whole.counts
    assert merged.count == whole.count
    assert merged.quantile(q) == whole.quantile(q)
    assert merged.max_ms == whole.max_ms and merged.min_ms == whole.min_ms


@given(latencies)
def test_json_round_trip_keeps_every_count(values: list[float]) -> None:
    sketch = sketch_of(values)
    back = LatencySketch.from_json(json.loads(json.dumps(sketch.to_json())))
    assert back.counts == sketch.counts
    assert (back.count, back.zero, back.min_ms, back.max_ms) == (
        sketch.count,
        sketch.zero,
        sketch.min_ms,
        sketch.max_ms,
    )
    assert math.isclose(back.sum_ms, sketch.sum_ms)


def test_values_outside_the_range_are_counted_and_the_extremes_are_exact() -> None:
    sketch = sketch_of([0.0, 1e-6, 5.0, 1e12])
    assert sketch.count == 4 and sketch.zero == 2
    assert sketch.quantile(0.0) == 0.0
    assert sketch.quantile(1.0) == 1e12
    assert sum(n for _, _, n in sketch.bins()) == 4


def test_a_negative_nan_or_infinite_duration_never_breaks_the_sketch() -> None:
    # a clock stepping back gives a negative duration; inf failed the fold, NaN hid every figure
    sketch = sketch_of([-5.0, math.nan, math.inf, 2.0])
    assert sketch.count == 4 and sketch.zero == 2
    assert sketch.min_ms == 0.0 and sketch.max_ms == 1e8 and sketch.sum_ms == 2.0 + 1e8
    assert sketch.quantile(0.7) == pytest.approx(2.0, rel=0.01)


def test_drain_hands_over_the_values_and_starts_empty() -> None:
    sketch = sketch_of([1.0, 2.0, 3.0])
    taken = sketch.drain()
    assert taken.count == 3 and taken.quantile(1.0) == 3.0
    assert sketch.count == 0 and sketch.quantile(0.5) == 0.0 and not any(sketch.counts)
    sketch.add(7.0)
    assert sketch.min_ms == 7.0


def test_an_empty_sketch_reports_zeros() -> None:
    sketch = LatencySketch()
    assert sketch.quantile(0.99) == 0.0 and sketch.mean_ms == 0.0
    assert sketch.to_json()["min"] == 0.0
    assert LatencySketch.from_json(sketch.to_json()).count == 0


def test_another_format_is_refused_by_name() -> None:
    data = LatencySketch().to_json() | {"accuracy": 0.02}
    with pytest.raises(ValueError, match=r"accuracy 0\.02"):
        LatencySketch.from_json(data)
    with pytest.raises(ValueError, match="between 0 and 1"):
        LatencySketch().quantile(1.5)
