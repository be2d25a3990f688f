"""Ranks within bootstrap resamples counted instead of sorted (``stats.resampled_ranks``):
bit-identical to ``scipy.stats.rankdata``, so Spearman correlation changes are unchanged for
the same seed."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from rlmdistill import stats
from rlmdistill.stats import correlation_change, resampled_ranks


@pytest.mark.parametrize("n_distinct", [1, 2, 5, 40, 500])
def test_resampled_ranks_equal_rankdata(n_distinct: int) -> None:
    rng = np.random.default_rng(n_distinct)
    values = rng.integers(0, n_distinct, size=300).astype(float) * 1.5 - 3.0
    idx = rng.integers(0, values.size, size=(400, values.size))
    got = resampled_ranks(values, idx)
    want = scipy.stats.rankdata(values[idx], axis=1)
    assert got.dtype == want.dtype == np.float64
    assert np.array_equal(got, want)


def test_resampled_ranks_hand_computed() -> None:
    # row [2, 1, 2, 3]: 1 -> rank 1, the two 2s share ranks 2 and 3 -> 2.5, 3 -> 4
    values = np.array([1.0, 2.0, 3.0])
    idx = np.array([[1, 0, 1, 2], [2, 2, 2, 2]])
    assert resampled_ranks(values, idx).tolist() == [[2.5, 1.0, 2.5, 4.0], [2.5] * 4]


def _sorted_ranks(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return scipy.stats.rankdata(values[idx], axis=1)


def test_correlation_change_identical_to_sorting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(2, 60, size=500).astype(float)  # room sizes with ties
    ya = rng.poisson(x * 0.8).astype(float)
    yb = rng.poisson(x * 0.5 + 3).astype(float)
    fast = [correlation_change(x, ya, yb, kind="spearman", seed=3)]
    small = correlation_change(x[:4], ya[:4], yb[:4])  # exhaustive: all 4^4 resamples
    monkeypatch.setattr(stats, "resampled_ranks", _sorted_ranks)
    slow = [correlation_change(x, ya, yb, kind="spearman", seed=3)]
    assert [r.model_dump() for r in fast] == [r.model_dump() for r in slow]
    assert small.model_dump() == correlation_change(x[:4], ya[:4], yb[:4]).model_dump()
    assert fast[0].low is not None  # the interval was computed
