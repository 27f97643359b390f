"""Accept paths forced by stub models, on a ragged batch: each row's stub answers for its own
positions, so every row's output is the digits from its own prompt's end."""

import pytest

from tests.workloads.decoding.stubs import DIGITS, TOK, digit_at, stub_pair
from workloads.decoding.config import ConfigError, DecodeConfig
from workloads.decoding.engine import decode_batch

PROMPTS = ("12+3=", "1+2=", "100+20=")  # the first new token sits at position len(prompt)


def run(pair, **kw) -> list:
    return decode_batch(pair, list(PROMPTS), DecodeConfig(**{"max_new_tokens": 12, **kw})).results


def digits(prompt: str, n: int = 12) -> str:
    """The n digits the verifier's stub gives after `prompt`."""
    return "".join(str(p % 10) for p in range(len(prompt), len(prompt) + n))


@pytest.mark.parametrize("schedule", ["linear", "packed"])
def test_always_accept_when_drafter_agrees(schedule):
    for prompt, r in zip(PROMPTS, run(stub_pair(digit_at), schedule=schedule, block=4)):
        assert r.text == digits(prompt)
        assert r.accepted == r.drafted and r.drafted > 0
        assert set(r.accept_lengths[:-1]) == {4} or schedule == "packed"


@pytest.mark.parametrize("schedule", ["linear", "packed"])
def test_never_accept_when_drafter_always_disagrees(schedule):
    for prompt, r in zip(PROMPTS, run(stub_pair(lambda p: DIGITS[(p + 1) % 10]), schedule=schedule, block=4)):
        assert r.text == digits(prompt)
        assert r.accepted == 0
        assert r.iterations == 11  # the first token comes from the prefill, then one per iteration


def test_sometimes_accept_stops_at_first_disagreement():
    # drafter right except at positions that are multiples of 3
    pair = stub_pair(lambda p: DIGITS[(p + 1) % 10] if p % 3 == 0 else digit_at(p))
    for prompt, r in zip(PROMPTS, run(pair, schedule="linear", block=4)):
        assert r.text == digits(prompt)
        assert 0 < r.accepted < r.drafted


def test_linear_iteration_costs_k_drafter_calls_and_one_verifier_call():
    pair = stub_pair(digit_at)
    results = run(pair, schedule="linear", block=4, steps=2, unmask="ltr", max_new_tokens=11)
    iterations = max(r.iterations for r in results)
    assert all(r.nfe <= pair.drafter.calls + pair.verifier.calls for r in results)
    assert pair.verifier.calls == 1 + iterations  # prefill + one per iteration, every row in each
    assert pair.drafter.calls == 2 * iterations


def test_lambda_one_accepts_a_drafter_the_verifier_rules_out():
    for r in run(stub_pair(lambda p: DIGITS[(p + 1) % 10]), schedule="linear", block=4, rule="linear",
                 leniency=1.0):
        assert r.accepted == r.drafted and not r.exact


def test_eos_accepted_mid_block_truncates_the_output():
    eos_at_8 = lambda p: TOK.eos_token_id if p == 8 else digit_at(p)  # noqa: E731
    first, second, third = run(stub_pair(eos_at_8, eos_at_8), schedule="linear", block=8)
    assert first.token_ids[-1] == TOK.eos_token_id and first.new_tokens == 4 and first.stop_reason == "eos"
    assert first.text == "567" and second.text == "4567" and second.stop_reason == "eos"
    assert third.text == "7" and third.new_tokens == 2  # its second token sits at position 8


def test_max_new_tokens_truncates_the_last_block():
    for prompt, r in zip(PROMPTS, run(stub_pair(digit_at), schedule="linear", block=8, max_new_tokens=6)):
        assert r.new_tokens == 6 and r.stop_reason == "length" and r.text == digits(prompt, 6)


def test_stop_string_ends_the_output_mid_block():
    first, second, third = run(stub_pair(digit_at), schedule="linear", block=8, stop=("78",))
    assert first.text == "5678" and first.stop_reason == "stop"
    assert second.text == "45678" and third.text == "78" and third.stop_reason == "stop"


def test_every_iteration_emits_at_least_one_token():
    for schedule in ("ar", "linear", "packed", "diffusion"):
        for r in run(stub_pair(lambda p: DIGITS[(p + 1) % 10]), schedule=schedule, block=3):
            assert r.iterations <= r.new_tokens, schedule


def test_measurements_add_up():
    for r in run(stub_pair(digit_at), schedule="linear", block=4):
        assert r.overhead_s == pytest.approx(r.wall_s - r.model_s)
        assert r.model_s <= r.wall_s and r.rows >= r.nfe


def test_quadratic_on_a_two_model_pair_is_refused():
    with pytest.raises(ConfigError, match="schedule: quadratic needs a dual-mode"):
        run(stub_pair(digit_at), schedule="quadratic")
