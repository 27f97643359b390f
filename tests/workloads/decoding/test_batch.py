"""Batched decoding: every row of a batch decodes as if alone.

Greedy rows of batches of 4 and 16 equal each prompt's `ar` tokens decoded alone, on the
three toy pairs and every schedule; sampled rows with a fixed seed are the same alone and in a
batch; and the joint-law harness of `test_exactness_sampled` passes on rows inside batches
of 8 (and still detects the known-inexact configuration there)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from tests.workloads.decoding.laws import PROMPT, ar_joint, law_pair, law_self, marginal
from workloads.decoding import ConfigError, DecodeConfig, decode, decode_batch
from workloads.models import load_pair
from workloads.tasks import get_task

MAX_NEW = 24
SIZES = (4, 16)


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [e.prompt for e in get_task("arith").examples("test", n=16, seed=4)]


@pytest.fixture(scope="module")
def pairs():
    return {name: load_pair(name) for name in ("toy", "toy-self", "toy-dflash")}


@pytest.fixture(scope="module")
def alone(pairs, prompts):
    """Each prompt's greedy tokens decoded alone: `ar` per pair, and the drafter's own
    `diffusion` output (which no verifier checks) per block and K."""
    out = {name: [decode(pair, p, DecodeConfig(schedule="ar", max_new_tokens=MAX_NEW)).token_ids
                  for p in prompts] for name, pair in pairs.items()}
    for block in (4, 8):
        for steps in (1, 2):
            config = DecodeConfig(schedule="diffusion", block=block, steps=steps, max_new_tokens=MAX_NEW)
            out["diffusion", block, steps] = [decode(pairs["toy"], p, config).token_ids for p in prompts]
    return out


def batched(pair, prompts: list[str], config: DecodeConfig, size: int):
    results = []
    for start in range(0, len(prompts), size):
        results += decode_batch(pair, prompts[start:start + size], config).results
    return results


def near_tie(pair, prompt: str, expected: list[int], got: list[int]) -> bool:
    """Whether the verifier's top-2 logit gap is under 1e-4 at the first token where `got`
    leaves `expected`: a flip float rounding in a padded batch may cause."""
    first = next(i for i, (a, b) in enumerate(zip(expected + [-1], got + [-2])) if a != b)
    ids = torch.tensor([pair.tokenizer(prompt).input_ids + expected[:first]])
    with torch.inference_mode():
        top = pair.kind.models(pair)[1](input_ids=ids).logits[0, -1].float().topk(2).values
    return float(top[0] - top[1]) < 1e-4


def assert_rows_match(pair, prompts, expected, results) -> None:
    """Every row equals its prompt's tokens alone, up to near ties on under 1% of prompts."""
    flips = [i for i, r in enumerate(results) if r.token_ids != expected[i]]
    assert all(near_tie(pair, prompts[i], expected[i], results[i].token_ids) for i in flips)
    assert len(flips) <= len(prompts) // 100


CASES = [("toy", "ar", 4, 1)] + [
    (name, schedule, block, steps)
    for name, schedules in (("toy", ("diffusion", "linear", "packed")), ("toy-self", ("linear", "packed",
                                                                                       "quadratic")),
                            ("toy-dflash", ("linear", "packed")))
    for schedule in schedules for block in (4, 8) for steps in (1, 2)
    if not (name == "toy-self" and schedule != "linear" and steps > 1)  # one-call schedules draft once
]


@pytest.mark.parametrize("name,schedule,block,steps", CASES, ids=lambda v: str(v))
def test_greedy_rows_equal_each_prompt_decoded_alone(pairs, prompts, alone, name, schedule, block, steps):
    config = DecodeConfig(schedule=schedule, block=block, steps=steps, max_new_tokens=MAX_NEW)
    expected = alone["diffusion", block, steps] if schedule == "diffusion" else alone[name]
    for size in SIZES:
        results = batched(pairs[name], prompts, config, size)
        assert_rows_match(pairs[name], prompts, expected, results)
        if schedule not in ("ar", "diffusion"):
            assert sum(r.drafted for r in results) > 0 and sum(r.accepted for r in results) > 0


def test_rows_leave_when_they_stop_and_the_batch_reports_its_work(pairs, prompts):
    """Ragged rows: each row's wall time is its own completion time, the batch's wall time is
    the last; the batch's NFE counts forward passes, each row's the calls it took part in."""
    config = DecodeConfig(schedule="linear", block=4, steps=1, max_new_tokens=MAX_NEW)
    batch = decode_batch(pairs["toy"], prompts[:8], config)
    walls = [r.wall_s for r in batch.results]
    assert 0 < min(walls) <= max(walls) <= batch.wall_s
    assert len({r.new_tokens for r in batch.results}) > 1  # rows of different lengths
    assert max(r.nfe for r in batch.results) <= batch.nfe < sum(r.nfe for r in batch.results)
    assert batch.rows >= sum(r.rows for r in batch.results)


@pytest.mark.parametrize("name,schedule", [("toy", "linear"), ("toy", "packed"), ("toy-self", "packed"),
                                           ("toy-dflash", "linear")])
def test_sampled_rows_are_the_same_alone_and_in_a_batch(pairs, prompts, name, schedule):
    config = DecodeConfig(schedule=schedule, block=4, steps=1, temperature=1.0, top_k=4,
                          max_new_tokens=MAX_NEW)
    seeds = list(range(100, 108))
    together = decode_batch(pairs[name], prompts[:8], config, seeds=seeds).results
    for prompt, seed, row in zip(prompts[:8], seeds, together):
        assert decode(pairs[name], prompt, dataclasses.replace(config, seed=seed)).token_ids == row.token_ids
    assert sum(r.drafted for r in together) > 0 and sum(r.accepted for r in together) > 0


def test_any_order_verification_stays_batch_one():
    pair = law_self()
    pair = dataclasses.replace(pair, profile=dataclasses.replace(pair.profile, any_order=True))
    config = DecodeConfig(schedule="packed", verify_order="confidence", max_new_tokens=4)
    assert decode_batch(pair, ["7"], config).results[0].new_tokens == 4
    with pytest.raises(ConfigError, match="batch_size: verify_order: confidence"):
        decode_batch(pair, ["7", "7"], config)


# -- the joint law, on rows inside batches of 8 --------------------------------------------------

ALPHA = 1e-3
SAMPLES = 480
TESTED = slice(1, 5)  # new tokens 2..5
SAMPLING = dict(temperature=1.0, max_new_tokens=5, block=4)
EXPECTED = marginal(ar_joint(5), TESTED)


def sampled_in_batches(pair, config: DecodeConfig, samples: int = SAMPLES) -> tuple[float, float]:
    """The goodness-of-fit p-value of tokens 2..5 over `samples` seeds, decoded as rows of
    batches of 8, and the mean number of drafted tokens per row."""
    counts: Counter = Counter()
    drafted = 0
    for start in range(0, samples, 8):
        seeds = [20_000 + start + i for i in range(8)]
        for result in decode_batch(pair, [PROMPT] * 8, config, seeds=seeds).results:
            counts[tuple(result.token_ids[TESTED])] += 1
            drafted += result.drafted
    cells = sorted(EXPECTED)
    assert sum(counts[c] for c in cells) == samples
    pvalue = chisquare([counts[c] for c in cells], [EXPECTED[c] * samples for c in cells]).pvalue
    return pvalue, drafted / samples


@pytest.mark.parametrize("pair,settings", [
    (law_pair, dict(schedule="linear", threshold=0.7, unmask="ltr")),
    (law_pair, dict(schedule="packed", steps=2, unmask="ltr")),
    (law_self, dict(schedule="packed")),
    (law_self, dict(schedule="quadratic")),
], ids=["two-model-linear-tau", "two-model-packed-K2", "self-packed", "self-quadratic"])
def test_joint_law_holds_for_rows_inside_batches(pair, settings):
    pvalue, drafted = sampled_in_batches(pair(), DecodeConfig(**settings, **SAMPLING))
    assert drafted >= 3
    assert pvalue > ALPHA


@pytest.mark.slow  # the sampled harness, thousands of decodes
def test_the_batched_harness_detects_confidence_ordered_drafts():
    config = DecodeConfig(schedule="linear", steps=2, unmask="confidence", **SAMPLING)
    pvalue, drafted = sampled_in_batches(law_pair(), config, samples=2400)
    assert drafted >= 3
    assert pvalue < ALPHA
