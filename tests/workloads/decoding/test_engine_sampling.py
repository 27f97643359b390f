"""Temperature 1 on tiny random-weight models: labels, accept paths, reproducibility and the
KV caches. The joint laws of sampled drafts are tested on enumerable stubs in
`test_exactness_sampled.py` and `test_lenient_law.py`."""

from collections import Counter

import pytest

from tests.workloads.decoding.caches import caches_when_rows_leave, holds_prefix, prefilled
from tests.workloads.decoding.stubs import TOK
from workloads.decoding import DecodeConfig, decode, decode_batch

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
def test_caches_hold_the_verified_prefix_only(uncertain_pair, monkeypatch, schedule, steps):
    """When a row of a sampled batch with rejections leaves, the verifier's cache equals a
    causal prefill of its prompt and every emitted token but the last, and the drafter's
    (filled lazily) a causal prefill of the first tokens of that same sequence: no drafting
    or rejected rows. (After an emitted EOS, tokens accepted beyond it may sit in the
    caches; the decode is over.)"""
    config = DecodeConfig(schedule=schedule, block=4, steps=steps, temperature=1.0, top_k=3,
                          max_new_tokens=40)
    seen = caches_when_rows_leave(monkeypatch)
    results = decode_batch(uncertain_pair, [PROMPT] * 4, config, seeds=list(range(4))).results
    for row, result in enumerate(results):
        verified = TOK(PROMPT).input_ids + result.token_ids[:-1]
        n = len(verified)
        (_, verifier, v_layers), (_, drafter, d_layers) = seen[row]
        assert verifier == n if result.stop_reason == "length" else n <= verifier < n + config.block
        assert n - 2 * config.block <= drafter <= verifier
        for layers, length, model in ((v_layers, verifier, uncertain_pair.verifier),
                                      (d_layers, drafter, uncertain_pair.drafter)):
            assert holds_prefix(layers, length, prefilled(model, verified[:min(length, n)]))
    assert 0 < sum(r.accepted for r in results) < sum(r.drafted for r in results)
