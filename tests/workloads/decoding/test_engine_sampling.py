"""Temperature 1 on tiny random-weight models: labels, accept paths, reproducibility and the
KV caches. The joint laws of sampled drafts are tested on enumerable stubs in
`test_exactness_sampled.py` and `test_lenient_law.py`."""

from collections import Counter

import pytest
import torch

from tests.workloads.decoding.stubs import TOK
from workloads.decoding import DecodeConfig, decode
from workloads.decoding.calls import CachedModel, Meter
from workloads.decoding.engine import draft_settings
from workloads.decoding.output import Output
from workloads.decoding.schedules import StandaloneDrafter, speculative
from workloads.decoding.state import DecodeState

PROMPT = "7"
SAMPLING = dict(temperature=1.0, top_k=3, max_new_tokens=3)


def test_drafts_are_sometimes_accepted_and_sometimes_not(uncertain_pair):
    lengths = Counter()
    for seed in range(20):
        config = DecodeConfig(schedule="linear", block=4, seed=seed, **{**SAMPLING, "max_new_tokens": 30})
        lengths.update(decode(uncertain_pair, PROMPT, config).accept_lengths)
    assert lengths[0] > 0 and sum(v for k, v in lengths.items() if k > 0) > 0


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


@pytest.mark.parametrize("steps", [1, 2])
@pytest.mark.parametrize("schedule", ["linear", "packed"])
def test_caches_hold_the_verified_prefix_only(uncertain_pair, schedule, steps):
    """After sampled decodes with rejections, the verifier's cache equals a causal prefill of
    the prompt and every emitted token but the last, and the drafter's (filled lazily) a
    causal prefill of the first tokens of that same sequence: no drafting or rejected rows.
    (After an emitted EOS, tokens accepted beyond it may sit in the caches; the decode is over.)"""
    accepted = drafted = 0
    for seed in range(4):
        config = DecodeConfig(schedule=schedule, block=4, steps=steps, temperature=1.0, top_k=3,
                              max_new_tokens=40, seed=seed)
        prompt = TOK(PROMPT).input_ids
        meter = Meter()
        state = DecodeState(config, Output(TOK, config.max_new_tokens, ()),
                            torch.Generator().manual_seed(seed), meter)
        drafter, verifier = (CachedModel(uncertain_pair.drafter, meter),
                             CachedModel(uncertain_pair.verifier, meter))
        with torch.inference_mode():
            speculative(state, StandaloneDrafter(drafter), verifier, prompt,
                        draft_settings(uncertain_pair, config), config.block)
        accepted, drafted = accepted + state.accepted, drafted + state.drafted
        verified = prompt + state.out.ids[:-1]
        n = len(verified)
        ended = state.out.stop_reason == "length"
        assert verifier.length == n if ended else n <= verifier.length < n + config.block
        assert n - 2 * config.block <= drafter.length <= verifier.length
        for cached, model in ((verifier, uncertain_pair.verifier), (drafter, uncertain_pair.drafter)):
            kept = min(cached.length, n)
            fresh = CachedModel(model, Meter())
            with torch.inference_mode():
                fresh.causal(verified[:kept])
            layers = cached.network.slots.cache.layers, fresh.network.slots.cache.layers
            for ours, theirs in zip(*layers, strict=True):
                assert ours.keys.shape[-2] == cached.length
                assert torch.allclose(ours.keys[..., :kept, :], theirs.keys, atol=1e-5)
                assert torch.allclose(ours.values[..., :kept, :], theirs.values, atol=1e-5)
    assert 0 < accepted < drafted
