"""The engine on the bundled toy pair: exactness, leniency, reproducibility."""

import pytest

from workloads.decoding import DecodeConfig, decode, decode_batch
from workloads.models import load_pair
from workloads.tasks import get_task


@pytest.fixture(scope="module")
def pair():
    return load_pair("toy")


@pytest.fixture(scope="module")
def prompts():
    return [e.prompt for e in get_task("arith").examples("test", n=30, seed=1)]


@pytest.fixture(scope="module")
def ar_tokens(pair, prompts):
    config = DecodeConfig(schedule="ar", max_new_tokens=40)
    return [decode(pair, p, config).token_ids for p in prompts]


POLICIES = ("ltr", "confidence", "margin", "entropy", "random")


def efforts(block: int) -> list[dict]:
    """K = 1, and two policies each for K = 2, K = 4 (<= B) and τ = 0.7, rotating with B so
    that across B ∈ {2, 4, 8} every policy runs under K = 2, K = 4 and τ (B = 8 adds a third
    K = 4 policy, the one B = 2 could not run)."""
    turn = {2: 0, 4: 2, 8: 4}[block]
    pick = lambda *offsets: [POLICIES[(turn + o) % len(POLICIES)] for o in offsets]  # noqa: E731
    out = [dict(steps=1)] + [dict(steps=2, unmask=u) for u in pick(0, 1)]
    if block >= 4:
        out += [dict(steps=4, unmask=u) for u in pick(3, 4, *((0,) if block == 8 else ()))]
    return out + [dict(threshold=0.7, unmask=u) for u in pick(1, 2)]


CASES = [(schedule, block, effort) for schedule in ("linear", "packed") for block in (2, 4, 8)
         for effort in efforts(block)]


def test_the_cases_cover_every_policy_under_every_effort():
    for schedule in ("linear", "packed"):
        for kind in ({"steps": 2}, {"steps": 4}, {"threshold": 0.7}):
            ran = {e["unmask"] for s, _, e in CASES if s == schedule and kind.items() <= e.items()}
            assert ran == set(POLICIES), (schedule, kind)


def case_id(value) -> str:
    return "-".join(f"{k}={x}" for k, x in value.items()) if isinstance(value, dict) else str(value)


@pytest.mark.parametrize(("schedule", "block", "effort"), CASES, ids=case_id)
def test_greedy_lossless_reproduces_ar_tokens(pair, prompts, ar_tokens, schedule, block, effort):
    """Every row of batches of 15 equals its prompt's `ar` tokens decoded alone."""
    config = DecodeConfig(schedule=schedule, block=block, max_new_tokens=40, **effort)
    for start in range(0, len(prompts), 15):
        rows = decode_batch(pair, prompts[start:start + 15], config).results
        for prompt, expected, row in zip(prompts[start:], ar_tokens[start:], rows):
            assert row.token_ids == expected, prompt


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
