"""The jobs-by-state-and-tier count of a scrape agrees with counting the pairs one by one."""

from __future__ import annotations

import random
from collections import Counter

from wloadctl.metrics import pair_counts


def test_pair_counts_agree_with_counting_each_pair() -> None:
    rng = random.Random(7)
    for n in (0, 1, 2, 17, 5000):
        a = bytearray(rng.choice([0, 1, 5, 9, 15]) for _ in range(n + 3))
        b = bytearray(rng.choice([0, 3, 15]) for _ in range(n + 3))
        want = Counter(zip(bytes(a[:n]), bytes(b[:n]), strict=True))
        assert pair_counts(a, b, n) == want
        assert sum(pair_counts(a, b, n).values()) == n


def test_pair_counts_of_one_value_throughout() -> None:
    a, b = bytearray([15] * 1000), bytearray([0] * 1000)
    assert pair_counts(a, b, 1000) == Counter({(15, 0): 1000})
