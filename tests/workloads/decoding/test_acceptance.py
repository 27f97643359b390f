import math

import pytest
import torch

from tests.workloads.decoding.onedraft import verify
from workloads.decoding.acceptance import (
    bernoulli_kl,
    cactus_gamma,
    draw,
    target,
    verify_greedy_rows,
    verify_rows,
)

V = 5


def onehot(ids, v=V):
    return torch.nn.functional.one_hot(torch.tensor(ids), v).float()


def exp_noise(rows, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.empty(rows, V).exponential_(generator=g)


def test_greedy_accepts_the_matching_prefix_and_recovers_the_verifier_token():
    p = onehot([1, 2, 3, 4])  # verifier argmax at each of B + 1 = 4 positions
    q = onehot([1, 2, 0])  # drafter agrees on two tokens, then disagrees
    v = verify("lossless", p, q, torch.tensor([1, 2, 0]), torch.rand(3), exp_noise(4))
    assert (v.accepted, v.token) == (2, 3)


def test_fully_accepted_draft_earns_the_bonus_token():
    p = onehot([1, 2, 3, 4])
    v = verify("lossless", p, onehot([1, 2, 3]), torch.tensor([1, 2, 3]), torch.rand(3), exp_noise(4))
    assert (v.accepted, v.token) == (3, 4)


def test_verifier_that_rules_out_every_draft_never_accepts():
    p = onehot([0, 0, 0])
    for rule, leniency in (("lossless", 0.0), ("cactus", 0.5), ("match", 0.0)):
        v = verify(rule, p, onehot([3, 3]), torch.tensor([3, 3]), torch.zeros(2), exp_noise(3), leniency)
        assert (v.accepted, v.token) == (0, 0), rule


def test_linear_lambda_one_accepts_every_draft_token():
    p = onehot([0, 0, 0, 1])
    q = onehot([3, 2, 4])
    v = verify("linear", p, q, torch.tensor([3, 2, 4]), torch.full((3,), 0.999), exp_noise(4), 1.0)
    assert (v.accepted, v.token) == (3, 1)


def test_sometimes_accept_follows_the_ratio():
    # p(y) = 0.3, q(y) = 0.6: accepted iff u < 0.5
    p = torch.tensor([[0.3, 0.7, 0, 0, 0], [0, 0, 1.0, 0, 0]])
    q = torch.tensor([[0.6, 0.4, 0, 0, 0]])
    draft = torch.tensor([0])
    assert verify("lossless", p, q, draft, torch.tensor([0.49]), exp_noise(2)).accepted == 1
    rejected = verify("lossless", p, q, draft, torch.tensor([0.51]), exp_noise(2))
    assert (rejected.accepted, rejected.token) == (0, 1)  # residual [p - q]+ is all on token 1


@pytest.mark.parametrize("rule", ["linear", "cactus"])
def test_zero_leniency_equals_lossless(rule):
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        p = torch.rand(4, V, generator=g).softmax(-1)
        q = torch.rand(3, V, generator=g).softmax(-1)
        draft = torch.multinomial(q, 1, generator=g).squeeze(1)
        u, e = torch.rand(3, generator=g), torch.empty(4, V).exponential_(generator=g)
        assert verify(rule, p, q, draft, u, e, 0.0) == verify("lossless", p, q, draft, u, e)


def test_cactus_gamma_meets_the_kl_budget_with_equality():
    pi = torch.tensor([0.01, 0.2, 0.5, 0.9], dtype=torch.float64)
    for delta in (0.001, 0.05, 0.3):
        gamma = cactus_gamma(pi, delta)
        kl = bernoulli_kl(gamma, pi)
        below = gamma < 1
        assert (kl <= delta + 1e-12).all()
        assert torch.allclose(kl[below], torch.full_like(kl[below], delta), atol=1e-9)
        assert (gamma >= pi).all()


def test_cactus_gamma_is_one_when_budget_covers_minus_log_pi():
    pi = torch.tensor([0.5, 0.9], dtype=torch.float64)
    assert torch.equal(cactus_gamma(pi, -math.log(0.5)), torch.ones(2, dtype=torch.float64))
    assert cactus_gamma(torch.tensor([0.0]), 10.0).item() == 0.0


def test_cactus_target_is_a_distribution_with_gamma_on_the_draft():
    p = torch.tensor([[0.2, 0.5, 0.3, 0, 0]])
    t = target("cactus", p, p, torch.tensor([0]), 0.1)
    assert torch.isclose(t.sum(), torch.tensor(1.0))
    assert torch.isclose(t[0, 0], cactus_gamma(torch.tensor([0.2]), 0.1)[0])
    assert torch.isclose(t[0, 1] / t[0, 2], torch.tensor(5 / 3))


def test_residual_that_is_numerically_zero_falls_back_to_the_target():
    p = torch.tensor([[0.5, 0.5, 0, 0, 0], [1.0, 0, 0, 0, 0]])
    v = verify("lossless", p, p[:1].clone(), torch.tensor([0]), torch.tensor([1.0 + 1e-6]), exp_noise(2))
    assert v.accepted == 0 and v.token in (0, 1)


def test_draw_samples_proportionally_to_unnormalised_weights():
    g = torch.Generator().manual_seed(0)
    noise = torch.empty(20000, 3).exponential_(generator=g)
    counts = torch.bincount(draw(torch.tensor([2.0, 1.0, 0.0]), noise), minlength=3)
    assert counts[2] == 0 and abs(counts[0] / 20000 - 2 / 3) < 0.015


def test_greedy_fast_path_equals_lossless_verification_at_temperature_zero():
    from workloads.decoding.sampling import distribution

    gen = torch.Generator().manual_seed(3)
    for trial in range(300):
        n, v = trial % 6, 7
        logits = torch.randn(n + 1, v, generator=gen)
        best = logits.argmax(-1)
        other = torch.randint(0, v, (n,), generator=gen)
        drafted = torch.where(torch.rand(n, generator=gen) < 0.7, best[:n], other)
        # a greedy drafter's one-hot proposals, or a sampled drafter's full ones
        q = onehot(drafted.tolist(), v) if trial % 2 else torch.randn(n, v, generator=gen).softmax(-1)
        p = distribution(logits, 0.0, 0, 1.0)
        noise = torch.empty(n + 1, v).exponential_(generator=gen)
        full = verify("lossless", p, q, drafted, torch.rand(n, generator=gen), noise, 0.0)
        accepted, token = verify_greedy_rows(logits[None], drafted[None], torch.tensor([n]))
        assert (int(accepted[0]), int(token[0])) == (full.accepted, full.token)


def test_the_acceptance_rules_over_rows_equal_them_row_by_row():
    generator = torch.Generator().manual_seed(0)
    rows, width, vocab = 6, 5, 7
    p = torch.rand(rows, width + 1, vocab, generator=generator).softmax(-1)
    q = torch.rand(rows, width, vocab, generator=generator).softmax(-1)
    draft = torch.randint(vocab, (rows, width), generator=generator)
    draft[:, :2] = p[:, :2].argmax(-1)  # some acceptance
    lengths = torch.tensor([0, 1, 3, 5, 5, 2])
    uniforms = torch.rand(rows, width, generator=generator)
    noise = torch.empty(rows, width + 1, vocab).exponential_(generator=generator)
    for rule, leniency in (("lossless", 0.0), ("linear", 0.4), ("cactus", 0.3), ("match", 0.2)):
        accepted, token = verify_rows(rule, p, q, draft, lengths, uniforms, noise, leniency)
        for r in range(rows):
            n = int(lengths[r])
            one = verify(rule, p[r, :n + 1], q[r, :n], draft[r, :n], uniforms[r, :n], noise[r, :n + 1],
                         leniency)
            assert (one.accepted, one.token) == (int(accepted[r]), int(token[r])), (rule, r)


def test_greedy_verification_over_rows_keeps_each_rows_matching_prefix():
    """Row r accepts its drafts while each equals the verifier's argmax, then emits the argmax
    at the first mismatch (or the bonus one past its own draft length)."""
    generator = torch.Generator().manual_seed(1)
    rows, width, vocab = 6, 5, 7
    logits = torch.randn(rows, width + 1, vocab, generator=generator)
    draft = logits[:, :width].argmax(-1)
    draft[1, 0] = (draft[1, 0] + 1) % vocab  # rejected at once
    draft[2, 3] = (draft[2, 3] + 1) % vocab  # rejected at its fourth draft
    lengths = torch.tensor([5, 5, 5, 2, 0, 4])
    accepted, token = verify_greedy_rows(logits, draft, lengths)
    assert accepted.tolist() == [5, 0, 3, 2, 0, 4]
    best = logits.argmax(-1)
    assert token.tolist() == [int(best[r, a]) for r, a in enumerate(accepted.tolist())]
