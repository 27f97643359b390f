"""Temperature 1, lossless: speculative outputs follow the verifier's joint distribution.

Two-sample chi-square tests (significance level ALPHA, fixed seeds so the outcome is
deterministic) between AR sampling and each exact configuration, on the joint of the first
three new tokens.
"""

import dataclasses
from collections import Counter

import pytest
from scipy.stats import chi2_contingency

from workloads.decoding import DecodeConfig, decode

ALPHA = 1e-3
SAMPLES = 2000
PROMPT = "7"
SAMPLING = dict(temperature=1.0, top_k=3, max_new_tokens=3)


def joint_counts(pair, config: DecodeConfig) -> Counter:
    counts: Counter = Counter()
    for seed in range(SAMPLES):
        one = dataclasses.replace(config, seed=10_000 + seed)
        counts[tuple(decode(pair, PROMPT, one).token_ids)] += 1
    return counts


def pvalue(a: Counter, b: Counter) -> float:
    keys = sorted(set(a) | set(b))
    return chi2_contingency([[a[k] for k in keys], [b[k] for k in keys]]).pvalue


@pytest.fixture(scope="module")
def ar_joint(uncertain_pair):
    counts = joint_counts(uncertain_pair, DecodeConfig(schedule="ar", **SAMPLING))
    assert len(counts) >= 15 and max(counts.values()) < SAMPLES / 4, "the verifier must be uncertain"
    return counts


@pytest.mark.parametrize(
    "settings",
    [
        dict(schedule="linear", block=4, steps=2, unmask="ltr"),
        dict(schedule="packed", block=4, steps=1),
        dict(schedule="linear", block=4, steps=2, unmask="confidence", rule="match"),
        dict(schedule="packed", block=3, steps=2, unmask="confidence", rule="match"),
    ],
    ids=["linear-ltr-K2", "packed-K1", "linear-match-confidence-K2", "packed-match-confidence-K2"],
)
def test_sampled_joint_matches_ar(uncertain_pair, ar_joint, settings):
    config = DecodeConfig(**SAMPLING, **settings)
    assert decode(uncertain_pair, PROMPT, config).exact
    assert pvalue(ar_joint, joint_counts(uncertain_pair, config)) > ALPHA


def test_drafts_are_sometimes_accepted_and_sometimes_not(uncertain_pair):
    lengths = Counter()
    for seed in range(20):
        config = DecodeConfig(schedule="linear", block=4, seed=seed, **{**SAMPLING, "max_new_tokens": 30})
        lengths.update(decode(uncertain_pair, PROMPT, config).accept_lengths)
    assert lengths[0] > 0 and sum(v for k, v in lengths.items() if k > 0) > 0


def test_a_biased_sampler_is_detected(uncertain_pair, ar_joint):
    """The test has power: sampling at temperature 0.7 instead of 1 is rejected."""
    config = DecodeConfig(schedule="ar", **{**SAMPLING, "temperature": 0.7})
    assert pvalue(ar_joint, joint_counts(uncertain_pair, config)) < ALPHA


def test_confidence_ordered_rejection_sampling_is_labelled_inexact(uncertain_pair):
    config = DecodeConfig(schedule="linear", block=4, steps=2, unmask="confidence", **SAMPLING)
    assert decode(uncertain_pair, PROMPT, config).exact is False
    greedy = DecodeConfig(**{**config.to_dict(), "temperature": 0.0})
    assert decode(uncertain_pair, PROMPT, greedy).exact


@pytest.mark.parametrize("schedule", ["ar", "linear", "packed", "diffusion"])
def test_sampling_is_reproducible_per_seed(uncertain_pair, schedule):
    config = DecodeConfig(schedule=schedule, block=4, temperature=1.0, max_new_tokens=12, seed=3)
    ids = lambda c: tuple(decode(uncertain_pair, PROMPT, c).token_ids)  # noqa: E731
    assert ids(config) == ids(config)
    others = {ids(DecodeConfig(**{**config.to_dict(), "seed": s})) for s in range(5)}
    assert len(others) > 1
