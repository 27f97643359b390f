"""Why confidence-ordered multi-step drafts break rejection sampling's joint distribution.

A hand-built two-token world over the vocabulary {0, 1}: the verifier's second token copies
the first with probability 0.95. The drafter is a perfect denoiser, so each of its per-position
marginals equals the verifier's. Drafting position 2 first (as confidence order may) and
then position 1 given it stores q_1 = p(y_1 | y_2), a distribution y_1 was drawn from given
a *later* draft token. Verified left to right with those stored proposals, each emitted
position keeps the right marginal but the joint is wrong. Committed left to right, the same
machinery reproduces the joint exactly.
"""

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from tests.workloads.decoding.onedraft import verify

P1 = torch.tensor([0.5, 0.5])
P2 = torch.tensor([[0.95, 0.05], [0.05, 0.95]])  # p(y2 | y1)
JOINT = P1[:, None] * P2  # (2, 2)
M2 = JOINT.sum(0)  # marginal of y2
N = 20000
ALPHA = 1e-3  # significance level of the goodness-of-fit tests


def sample_outputs(order: str, seed: int = 0) -> Counter:
    g = torch.Generator().manual_seed(seed)
    pick = lambda probs: int(torch.multinomial(probs, 1, generator=g))  # noqa: E731
    counts: Counter = Counter()
    for _ in range(N):
        if order == "right-to-left":
            y2 = pick(M2)
            q1 = JOINT[:, y2] / M2[y2]
            y1 = pick(q1)
            q = torch.stack([q1, M2])
        else:  # left to right, with an imperfect drafter
            q1, q2 = torch.tensor([0.7, 0.3]), torch.tensor([0.6, 0.4])
            y1, y2 = pick(q1), pick(q2)
            q = torch.stack([q1, q2])
        # the verifier row for position 2 conditions on the drafted y1
        p = torch.stack([P1, P2[y1], torch.tensor([0.5, 0.5])])
        noise = torch.empty(3, 2).exponential_(generator=g)
        v = verify("lossless", p, q, torch.tensor([y1, y2]), torch.rand(2, generator=g), noise)
        if v.accepted == 0:  # recovered first token; the next iteration samples p(. | x1)
            x1 = v.token
            x2 = pick(P2[x1])
        elif v.accepted == 1:
            x1, x2 = y1, v.token
        else:
            x1, x2 = y1, y2
        counts[x1, x2] += 1
    return counts


def fit_pvalue(counts: Counter, probs: torch.Tensor) -> float:
    observed = [counts[i, j] for i in range(2) for j in range(2)]
    return chisquare(observed, (probs.flatten() * N).tolist()).pvalue


def test_left_to_right_commits_reproduce_the_joint():
    assert fit_pvalue(sample_outputs("left-to-right"), JOINT) > ALPHA


def test_confidence_order_keeps_marginals_but_breaks_the_joint():
    counts = sample_outputs("right-to-left")
    assert fit_pvalue(counts, JOINT) < 1e-12
    first = Counter({i: counts[i, 0] + counts[i, 1] for i in range(2)})
    second = Counter({j: counts[0, j] + counts[1, j] for j in range(2)})
    for marginal in (first, second):
        assert chisquare([marginal[0], marginal[1]], [N / 2, N / 2]).pvalue > ALPHA
    # exact output law: disagreeing pairs have mass 0.01375 instead of 0.025
    assert counts[0, 1] / N == pytest.approx(0.01375, abs=0.004)
