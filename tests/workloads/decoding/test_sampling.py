"""Sampling settings at their limits: a tiny positive temperature or top-p is the point mass
it tends to, never NaN weights that draw token 0."""

import pytest
import torch

from workloads.decoding import DecodeConfig, decode
from workloads.decoding.sampling import distribution
from workloads.models import load_pair
from workloads.tasks import get_task


@pytest.mark.parametrize("settings", [dict(temperature=1e-300), dict(temperature=1e-38),
                                      dict(temperature=1e-30), dict(temperature=1.0, top_p=1e-300),
                                      dict(temperature=1.0, top_p=1e-45)])
def test_a_tiny_temperature_or_top_p_is_the_argmax(settings):
    logits = torch.randn(4, 50) * 3
    logits[:, 0] = -5.0  # token 0 is never the argmax here
    probs = distribution(logits, **settings)
    assert torch.isfinite(probs).all()
    assert torch.equal(probs, torch.nn.functional.one_hot(logits.argmax(-1), 50).float())


def test_ordinary_settings_are_unchanged_by_the_shift():
    logits = torch.randn(3, 20)
    assert torch.allclose(distribution(logits, 0.7), torch.softmax(logits / 0.7, -1), atol=1e-6)


@pytest.mark.parametrize("settings", [dict(temperature=1e-300), dict(temperature=1.0, top_p=1e-300)])
def test_a_decode_at_a_tiny_temperature_or_top_p_gives_the_greedy_tokens(settings):
    pair = load_pair("toy")
    for example in get_task("arith").examples("test", n=3, seed=2):
        greedy = decode(pair, example.prompt, DecodeConfig(block=4, steps=1, max_new_tokens=24))
        tiny = decode(pair, example.prompt, DecodeConfig(block=4, steps=1, max_new_tokens=24, **settings))
        assert tiny.drafted > 0 and tiny.accepted > 0  # drafted and verified, not a degenerate path
        assert tiny.token_ids == greedy.token_ids and tiny.exact
        assert 0 not in tiny.token_ids[-tiny.new_tokens:] or 0 in greedy.token_ids[-greedy.new_tokens:]
