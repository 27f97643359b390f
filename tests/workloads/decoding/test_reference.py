"""The engine against its oracle: every row of a batch decodes exactly as the reference decoder
(reference.py) decodes its prompt alone (tokens, counters, forward passes and their rows),
greedy and sampled, under every schedule, rule and unmasking policy a toy pair runs."""

from __future__ import annotations

import dataclasses

import pytest

from tests.workloads.decoding.reference import reference_decode
from workloads.decoding import DecodeConfig, decode_batch
from workloads.models import load_pair
from workloads.tasks import get_task

MAX_NEW = 24
BASE = DecodeConfig(schedule="linear", block=4, steps=1, max_new_tokens=MAX_NEW)
CONFIGS = {
    "ar": dict(schedule="ar"),
    "ar sampled": dict(schedule="ar", temperature=1.0),
    "linear": {},
    "linear K2": dict(steps=2),
    "linear B8 sampled": dict(block=8, temperature=1.0),
    "linear K2 random": dict(steps=2, temperature=1.0, unmask="random"),
    "linear K3 confidence": dict(steps=3, temperature=1.0, unmask="confidence"),
    "linear cactus": dict(temperature=1.0, rule="cactus", leniency=0.5),
    "linear match": dict(temperature=1.0, rule="match", leniency=0.3),
    "linear tau": dict(steps=None, threshold=0.5, temperature=1.0),
    "packed": dict(schedule="packed"),
    "packed B8 K2 sampled": dict(schedule="packed", block=8, steps=2, temperature=1.0),
    "packed lenient": dict(schedule="packed", temperature=1.0, rule="linear", leniency=0.5),
    # point-mass drafts (q one-hot at each draft, built by the rule that reads it) under a
    # sampled verifier and under a lenient rule at a greedy one
    "packed greedy drafts": dict(schedule="packed", temperature=1.0, draft_temperature=0.0),
    "linear lenient greedy": dict(rule="linear", leniency=0.5),
    "quadratic": dict(schedule="quadratic"),
    "quadratic B8 cactus": dict(schedule="quadratic", block=8, temperature=1.0, rule="cactus", leniency=0.3),
    "diffusion K2": dict(schedule="diffusion", steps=2),
    "diffusion B8 sampled": dict(schedule="diffusion", block=8, steps=2, temperature=1.0),
}


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [e.prompt for e in get_task("arith").examples("test", n=6)]


@pytest.fixture(scope="module")
def pairs():
    return {name: load_pair(name) for name in ("toy", "toy-self", "toy-dflash")}


def runnable(pair, config: DecodeConfig) -> bool:
    try:
        pair.kind.check(config)
    except Exception:
        return False
    return True


def measured(results) -> list[tuple]:
    return [(r.token_ids, r.accepted, r.drafted, r.iterations, r.nfe, r.rows, r.accept_lengths, r.stop_reason)
            for r in results]


def alone(pair, prompts: list[str], config: DecodeConfig, seeds: list[int]) -> list:
    """Each prompt decoded alone by the reference decoder, with its row's seed."""
    return [reference_decode(pair, prompt, config, seed) for prompt, seed in zip(prompts, seeds)]


@pytest.mark.parametrize("name", ["toy", "toy-self", "toy-dflash"])
def test_every_row_decodes_as_the_reference_decodes_it_alone(pairs, prompts, name):
    pair, seeds = pairs[name], list(range(len(prompts)))
    configs = {label: dataclasses.replace(BASE, **changes) for label, changes in CONFIGS.items()}
    configs = {label: c for label, c in configs.items() if runnable(pair, c)}
    together = {label: decode_batch(pair, prompts, c, seeds=seeds).results for label, c in configs.items()}
    for label, config in configs.items():
        assert measured(together[label]) == measured(alone(pair, prompts, config, seeds)), label
    drafting = [label for label in configs if not label.startswith(("ar", "diffusion"))]
    assert all(sum(r.drafted for r in together[label]) > 0 for label in drafting)  # drafted and verified
    assert any(0 < sum(r.accepted for r in together[label]) < sum(r.drafted for r in together[label])
               for label in drafting)


def test_the_reference_tells_a_changed_rule_apart(pairs, prompts):
    """The comparison has teeth: a lenient rule's rows differ from the lossless reference's."""
    config = dataclasses.replace(BASE, temperature=1.0)
    lenient = dataclasses.replace(config, rule="linear", leniency=1.0)
    seeds = list(range(len(prompts)))
    batch = decode_batch(pairs["toy"], prompts, lenient, seeds=seeds).results
    assert measured(batch) != measured(alone(pairs["toy"], prompts, config, seeds))
