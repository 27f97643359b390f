"""The engine on the bundled toy pair: exactness, leniency, reproducibility."""

from collections import Counter

import pytest
from scipy.stats import chi2_contingency

from workloads.decoding import DecodeConfig, decode
from workloads.models import load_pair
from workloads.tasks import get_task

ALPHA = 1e-3  # significance level of the distribution tests (fixed seeds: deterministic)


@pytest.fixture(scope="module")
def pair():
    return load_pair("toy")


@pytest.fixture(scope="module")
def prompts():
    return [e.prompt for e in get_task("arith").examples("test", n=50, seed=1)]


@pytest.fixture(scope="module")
def ar_tokens(pair, prompts):
    config = DecodeConfig(schedule="ar", max_new_tokens=40)
    return [decode(pair, p, config).token_ids for p in prompts]


EFFORTS = [dict(steps=1)] + [dict(steps=k, unmask=u) for k in (2, 4)
                             for u in ("ltr", "confidence", "margin", "entropy", "random")] + \
          [dict(threshold=0.7, unmask=u) for u in ("ltr", "confidence", "margin", "entropy", "random")]


CASES = [(schedule, block, effort) for schedule in ("linear", "packed") for block in (2, 4, 8)
         for effort in EFFORTS if effort.get("steps", 1) <= block]  # K > B is not a configuration




def case_id(value) -> str:
    return "-".join(f"{k}={x}" for k, x in value.items()) if isinstance(value, dict) else str(value)


@pytest.mark.parametrize(("schedule", "block", "effort"), CASES, ids=case_id)
def test_greedy_lossless_reproduces_ar_tokens(pair, prompts, ar_tokens, schedule, block, effort):
    config = DecodeConfig(schedule=schedule, block=block, max_new_tokens=40, **effort)
    for prompt, expected in zip(prompts, ar_tokens):
        assert decode(pair, prompt, config).token_ids == expected, prompt


# -- temperature 1: the joint of the first three tokens ------------------------------------

SAMPLES = 1500
UNCERTAIN = "7"  # inside the prompt region the verifier spreads its mass over many tokens
SAMPLING = dict(temperature=1.0, top_k=3, max_new_tokens=3)


def joint_counts(pair, config: DecodeConfig) -> Counter:
    counts: Counter = Counter()
    for seed in range(SAMPLES):
        one = DecodeConfig.from_dict({**config.to_dict(), "seed": 10_000 + seed})
        counts[tuple(decode(pair, UNCERTAIN, one).token_ids)] += 1
    return counts


@pytest.fixture(scope="module")
def ar_joint(pair):
    counts = joint_counts(pair, DecodeConfig(schedule="ar", **SAMPLING))
    assert len(counts) >= 8, "the test prompt must leave the verifier uncertain"
    return counts


def same_distribution(a: Counter, b: Counter) -> float:
    keys = sorted(set(a) | set(b))
    return chi2_contingency([[a[k] for k in keys], [b[k] for k in keys]]).pvalue


@pytest.mark.parametrize(
    "settings",
    [
        dict(schedule="linear", block=4, steps=2, unmask="ltr"),
        dict(schedule="packed", block=4, steps=1),
        dict(schedule="linear", block=4, steps=2, unmask="confidence", rule="match"),
        dict(schedule="packed", block=3, steps=3, unmask="confidence", rule="match"),
    ],
    ids=["linear-ltr", "packed-K1", "linear-match-confidence", "packed-match-confidence"],
)
def test_sampled_joint_matches_ar(pair, ar_joint, settings):
    config = DecodeConfig(**SAMPLING, **settings)
    assert decode(pair, UNCERTAIN, config).exact
    assert same_distribution(ar_joint, joint_counts(pair, config)) > ALPHA


def test_confidence_ordered_rejection_sampling_is_labelled_inexact(pair):
    config = DecodeConfig(schedule="linear", block=4, steps=2, unmask="confidence", **SAMPLING)
    assert decode(pair, UNCERTAIN, config).exact is False
    assert decode(pair, UNCERTAIN, DecodeConfig(**{**config.to_dict(), "temperature": 0.0})).exact


# -- leniency --------------------------------------------------------------------------------

def acceptance(pair, prompts, **settings) -> float:
    accepted = drafted = 0
    for i, prompt in enumerate(prompts[:20]):
        config = DecodeConfig(schedule="linear", block=8, max_new_tokens=40, seed=i, **settings)
        r = decode(pair, prompt, config)
        accepted, drafted = accepted + r.accepted, drafted + r.drafted
    return accepted / drafted


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_acceptance_rises_with_lambda(pair, prompts, temperature):
    rates = [acceptance(pair, prompts, rule="linear", leniency=lam, temperature=temperature)
             for lam in (0.0, 0.5, 1.0)]
    assert rates[0] < rates[1] < rates[2] == 1.0


def test_acceptance_rises_with_delta_when_sampling(pair, prompts):
    rates = [acceptance(pair, prompts, rule="cactus", leniency=d, temperature=1.0) for d in (0.0, 0.5, 3.0)]
    assert rates[0] < rates[1] < rates[2]


def test_cactus_at_temperature_zero_is_lossless(pair, prompts):
    assert acceptance(pair, prompts, rule="cactus", leniency=2.0) == acceptance(pair, prompts)


@pytest.mark.parametrize("rule", ["linear", "cactus"])
def test_zero_leniency_decodes_exactly_like_lossless(pair, prompts, rule):
    for seed, prompt in enumerate(prompts[:10]):
        base = dict(schedule="linear", block=4, temperature=1.0, max_new_tokens=30, seed=seed)
        assert decode(pair, prompt, DecodeConfig(rule=rule, leniency=0.0, **base)).token_ids == \
            decode(pair, prompt, DecodeConfig(**base)).token_ids


def test_sampling_is_reproducible_per_seed(pair):
    config = DecodeConfig(schedule="packed", block=4, temperature=1.0, max_new_tokens=20, seed=3)
    assert decode(pair, "12+", config).token_ids == decode(pair, "12+", config).token_ids
    others = {tuple(decode(pair, "12+", DecodeConfig(**{**config.to_dict(), "seed": s})).token_ids)
              for s in range(5)}
    assert len(others) > 1
