"""A vLLM configuration's counts from specsweep's records: `none` one step a token after the
prefill, `ngram` the replay's, a drafter's its own iterations; and what they add up to."""

from workloads.serving.acceptance import Acceptance, served_record
from workloads.serving.config import ServingConfig
from workloads.serving.ngram import replay

GREEDY = {"token_ids": [4, 1, 2, 3, 5], "iterations": 0, "drafted": 0, "accepted": 0, "index": 0}


def test_without_speculation_every_token_after_the_first_is_a_step():
    record = served_record(ServingConfig(), GREEDY, [1, 2, 3])
    assert (record["steps"], record["drafted"], record["nfe"]) == (4, 0, 5)


def test_ngram_counts_are_the_replay_over_the_greedy_output():
    record = served_record(ServingConfig("ngram", 3), GREEDY, [1, 2, 3])
    lookup = replay([1, 2, 3], GREEDY["token_ids"], 3)
    assert (record["steps"], record["iterations"], record["drafted"], record["accepted"]) == (
        lookup.steps, lookup.iterations, lookup.drafted, lookup.accepted) == (3, 1, 3, 1)


def test_a_drafter_steps_once_per_iteration_and_the_gain_counts_tokens_per_step():
    drafted = {"token_ids": list(range(9)), "iterations": 3, "drafted": 9, "accepted": 5, "index": 0}
    accepted = Acceptance.of([served_record(ServingConfig("dflash", 3), drafted, [])] * 2)
    assert (accepted.requests, accepted.tokens, accepted.steps) == (2, 18, 6)
    assert accepted.step_gain == 16 / 6 and accepted.width == 3.0 and accepted.mean_accept_len == 5 / 3
