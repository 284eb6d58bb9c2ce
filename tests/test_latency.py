"""Latency histograms of the pipeline meter: buckets, the last minute's window, quantiles, Prometheus buckets."""

from __future__ import annotations

import math

from wloadctl.latency import NB, Histogram, Rate, bucket_of, quantile


def test_each_value_lands_in_the_bucket_of_its_quarter_power_of_two() -> None:
    h = Histogram()
    values = [0.0, -0.001, 1e-9, 0.001, 0.0011, 0.5, 1.0, 3.0, 5000.0]
    h.observe_many(values, 100.0)
    expected = [0] * NB
    for v in values:
        expected[bucket_of(v)] += 1
    assert h.counts == expected and h.count == len(values)
    assert bucket_of(0.9) == bucket_of(1.0) == bucket_of(0.5) + 4  # (2**-0.25, 1]; four buckets a doubling
    assert bucket_of(5000.0) == NB - 1 and bucket_of(-1.0) == 0
    assert math.isclose(h.sum, sum(max(v, 0.0) for v in values))


def test_quantiles_of_the_last_minute_fall_within_a_quarter_doubling_of_the_truth() -> None:
    h = Histogram()
    h.observe_many([0.010] * 98 + [2.0, 2.0], 1000.0)
    s = h.summary(1000.5)
    assert s["n"] == 100
    assert 0.010 / 2 ** 0.25 <= s["p50"] <= 0.010 * 2 ** 0.25
    assert 2.0 / 2 ** 0.25 <= s["p99"] <= 2.0 * 2 ** 0.25
    # A minute later those values have left the window, but not the totals
    assert h.summary(1061.0) == {"n": 0, "p50": None, "p99": None} and h.count == 100
    assert quantile({}, 0.5) is None


def test_prometheus_buckets_are_cumulative_at_the_powers_of_two_and_end_at_inf() -> None:
    h = Histogram()
    h.observe_many([0.003, 0.003, 0.7, 9999.0], 5.0)
    buckets = h.prometheus_buckets()
    les = [le for le, _c in buckets]
    assert les[-1] == "+Inf" and buckets[-1][1] == 4
    assert all(math.log2(float(le)).is_integer() for le in les[:-1])
    counts = [c for _le, c in buckets]
    assert counts == sorted(counts)
    assert dict(buckets)[repr(2.0 ** -8)] == 2 and dict(buckets)[repr(1.0)] == 3


def test_a_rate_is_taken_over_its_span() -> None:
    r = Rate(span=10.0)
    assert r.update(0.0, 0) == 0.0
    assert r.update(1.0, 50) == 50.0
    for t in range(2, 30):
        rate = r.update(float(t), 50 * t)
    assert rate == 50.0
