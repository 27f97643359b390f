"""Temperature 1: every configuration labelled exact reproduces the verifier's joint law over
whole drafts.

The stubs of `laws.py` have context-dependent laws and an AR joint known exactly. Each
configuration decodes MAX_NEW = 5 tokens from SAMPLES fixed seeds (so the outcome is
deterministic): the first comes from the prefill, tokens 2..4 are always one draft of three
verified together (block 4; a dual-mode draft holds block − 1 = 3), and token 5, like any
token after a rejection, comes from a later draft (on two-model `packed`, the one computed
from the older prefix). The joint of tokens 2..5 (16 cells, the smallest of mass 0.027) is
tested against the exact law by a chi-square goodness-of-fit test at level ALPHA. The same
harness rejects a known-inexact configuration, so a pass means something.
"""

from __future__ import annotations

from collections import Counter

import pytest
from scipy.stats import chisquare

from tests.workloads.decoding.laws import ar_joint, law_pair, law_self, marginal, seeded_decodes
from workloads.decoding import DecodeConfig, is_exact

pytestmark = pytest.mark.slow  # sampled joint-law harness: thousands of decodes per case

ALPHA = 1e-3
SAMPLES = 1200
MAX_NEW = 5
TESTED = slice(1, 5)  # new tokens 2..5
SAMPLING = dict(temperature=1.0, max_new_tokens=MAX_NEW, block=4)
EXPECTED = marginal(ar_joint(MAX_NEW), TESTED)


def sampled(pair, config: DecodeConfig) -> tuple[float, float]:
    """The goodness-of-fit p-value of tokens 2..5 over SAMPLES seeds, and the mean number of
    drafted (verified) tokens per decode."""
    counts: Counter = Counter()
    drafted = 0
    for result in seeded_decodes(pair, config, range(10_000, 10_000 + SAMPLES)):
        counts[tuple(result.token_ids[TESTED])] += 1
        drafted += result.drafted
    cells = sorted(EXPECTED)
    assert sum(counts[c] for c in cells) == SAMPLES  # nothing outside {a, b}
    pvalue = chisquare([counts[c] for c in cells], [EXPECTED[c] * SAMPLES for c in cells]).pvalue
    return pvalue, drafted / SAMPLES


TWO_MODEL_DRAFTS = {
    "K1": dict(steps=1),
    "K2-ltr": dict(steps=2, unmask="ltr"),
    "tau-ltr": dict(threshold=0.7, unmask="ltr"),
    "K1-greedy-drafts": dict(steps=1, draft_temperature=0.0),  # q one-hot at each draft, built by the rule
}


@pytest.mark.parametrize("rule", ["lossless", "match"])
@pytest.mark.parametrize("draft", TWO_MODEL_DRAFTS)
@pytest.mark.parametrize("schedule", ["linear", "packed"])
def test_two_model_joint_matches_ar(schedule, draft, rule):
    config = DecodeConfig(schedule=schedule, rule=rule, **TWO_MODEL_DRAFTS[draft], **SAMPLING)
    assert is_exact(config)
    pvalue, drafted = sampled(law_pair(), config)
    assert drafted >= 3
    assert pvalue > ALPHA


SELF_CONFIGS = {
    "linear-K1": dict(schedule="linear"),
    "linear-K2-ltr": dict(schedule="linear", steps=2, unmask="ltr"),
    "linear-tau-ltr": dict(schedule="linear", threshold=0.7, unmask="ltr"),
    "packed": dict(schedule="packed"),
    "quadratic": dict(schedule="quadratic"),
    "packed-greedy-drafts": dict(schedule="packed", draft_temperature=0.0),
}


@pytest.mark.parametrize("rule", ["lossless", "match"])
@pytest.mark.parametrize("settings", SELF_CONFIGS)
def test_self_speculative_joint_matches_ar(settings, rule):
    config = DecodeConfig(rule=rule, **SELF_CONFIGS[settings], **SAMPLING)
    assert is_exact(config)
    pvalue, drafted = sampled(law_self(), config)
    assert drafted >= 3
    assert pvalue > ALPHA


@pytest.mark.parametrize("schedule", ["linear", "packed"])
def test_confidence_ordered_multistep_drafts_are_detected(schedule):
    """The harness has power: committing the most confident slots first (K = 2) skews the
    joint, and the configuration is labelled inexact."""
    config = DecodeConfig(schedule=schedule, steps=2, unmask="confidence", **SAMPLING)
    assert not is_exact(config)
    pvalue, drafted = sampled(law_pair(), config)
    assert drafted >= 3
    assert pvalue < ALPHA
