"""Arrival times of a rate load (`vllm bench serve`'s gamma process), without a server."""

import numpy as np
import pytest

from workloads.serving.load import arrivals


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_arrivals_have_the_rate_and_burstiness_asked(burstiness):
    """Gaps of Gamma(b, 1/(r b)): mean 1/r and coefficient of variation 1/sqrt(b), seeded."""
    times = arrivals(20_001, rate=8.0, burstiness=burstiness, seed=3)
    gaps = np.diff(times)
    assert times[0] == 0.0 and len(times) == 20_001 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 8, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / burstiness ** 0.5, rel=0.05)
    assert arrivals(50, 8.0, burstiness, seed=3) == times[:50]  # the control's requests arrive alike
    assert arrivals(50, 8.0, burstiness, seed=4) != times[:50]


def test_one_request_arrives_at_once():
    assert arrivals(1, 2.0, 1.0, 0) == [0.0] and arrivals(0, 2.0, 1.0, 0) == []
