"""Sampled exactness of target-conditioned and chained drafting (`toy-dflash`, DFlash 2,
`toy-eagle3`, `toy-dspark` and `toy-draft`'s autoregressive drafter, over the toy verifier) at
temperature 16, top-k 2
(so every position has two outcomes of real mass, and the verifier's joint of the first
four new tokens can be enumerated exactly from the verifier itself). Of five new tokens,
2..4 are one draft of three (block 4: the anchor and three drafts) verified together. Each exact
configuration matches the enumerated joint (16 cells, the smallest of mass 0.017) by a
chi-square test at ALPHA over SAMPLES seeds; the same harness rejects a lossy rule (whose
drafts leave the verifier's support, or miss its law)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from tests.workloads.decoding.laws import seeded_decodes
from workloads.decoding import DecodeConfig, is_exact
from workloads.decoding.sampling import distribution
from workloads.models.families.dflash import DFlashPair
from workloads.models.pair import load_pair

pytestmark = pytest.mark.slow  # sampled joint-law harness: thousands of decodes per case

ALPHA = 1e-3
SAMPLES = 300
PROMPT = "45+"
SAMPLING = dict(temperature=16.0, top_k=2, max_new_tokens=5, block=4)
TESTED = 4  # new tokens 1..4 (token 5 follows so that 2..4 fit one draft)


@pytest.fixture(scope="module")
def toy_dflash():
    return load_pair("toy-dflash")


@pytest.fixture(scope="module")
def toy_dflash2(toy_dflash):
    """A DFlash 2 drafter (random weights: its candidate chain is mostly rejected, so the
    recovered tokens come from residuals of sparse proposals) over the same verifier."""
    from dflash.model import DFlash2DraftModel

    base = toy_dflash.drafter.config.to_dict()
    base["dflash_config"] = {**base["dflash_config"], "conv_kernel_size": 2, "conv_group_size": 16,
                             "selector_rank": 8, "selector_top_k": 4}
    torch.manual_seed(13)
    drafter = DFlash2DraftModel(type(toy_dflash.drafter.config).from_dict(base)).eval()
    for module in drafter.modules():  # the convolutions' base kernels start uninitialised
        if hasattr(module, "base_kernel"):
            module.base_kernel.data.normal_(0, 0.02)
    return DFlashPair("toy-dflash2", drafter, toy_dflash.verifier, toy_dflash.tokenizer, toy_dflash.profile)


@pytest.fixture(scope="module")
def exact_joint(toy_dflash) -> dict[tuple, float]:
    """The verifier's law of the first TESTED new tokens, from full forward passes."""
    joint: dict[tuple, float] = {}

    def walk(prefix: list[int], path: tuple, mass: float) -> None:
        if len(path) == TESTED:
            joint[path] = mass
            return
        with torch.inference_mode():
            logits = toy_dflash.verifier(input_ids=torch.tensor([prefix])).logits[0, -1:].float()
        p = distribution(logits, SAMPLING["temperature"], SAMPLING["top_k"], 1.0)[0]
        for token in p.nonzero().flatten().tolist():
            walk(prefix + [token], path + (token,), mass * float(p[token]))

    walk(toy_dflash.tokenizer(PROMPT).input_ids, (), 1.0)
    return joint


def sampled(pair, config: DecodeConfig, joint: dict) -> tuple[int, float, float]:
    """Over SAMPLES seeds, decoded as rows of batches of 10 (a row's tokens are those it has
    alone): how many decodes left the verifier's support (the top-2 paths), the
    goodness-of-fit p-value of the first TESTED tokens of the rest, and the mean number of
    drafted (verified) tokens per decode."""
    counts: Counter = Counter()
    drafted = 0
    for result in seeded_decodes(pair, config, range(20_000, 20_000 + SAMPLES), PROMPT, batch=10):
        counts[tuple(result.token_ids[:TESTED])] += 1
        drafted += result.drafted
    cells = sorted(joint)
    inside = sum(counts[c] for c in cells)
    total = sum(joint.values())  # 1 up to float rounding, which chisquare checks to 1e-8
    expected = [joint[c] / total * inside for c in cells]
    pvalue = chisquare([counts[c] for c in cells], expected).pvalue if inside else 0.0
    return SAMPLES - inside, pvalue, drafted / SAMPLES


@pytest.mark.parametrize("rule", ["lossless", "match"])
@pytest.mark.parametrize("schedule", ["linear", "packed"])
def test_the_joint_of_a_whole_draft_matches_the_verifier(toy_dflash, exact_joint, schedule, rule):
    config = DecodeConfig(schedule=schedule, rule=rule, **SAMPLING)
    assert is_exact(config)
    outside, pvalue, drafted = sampled(toy_dflash, config, exact_joint)
    assert drafted >= 3  # the three drafts after the first token were drafted and verified
    assert outside == 0 and pvalue > ALPHA, f"{schedule} {rule}: {outside} outside, p = {pvalue:.2g}"


@pytest.mark.parametrize(("schedule", "rule"), [("linear", "lossless"), ("packed", "match")])
def test_dflash2_candidate_chains_keep_the_verifiers_joint(toy_dflash2, exact_joint, schedule, rule):
    outside, pvalue, drafted = sampled(toy_dflash2, DecodeConfig(schedule=schedule, rule=rule, **SAMPLING),
                                       exact_joint)
    assert drafted >= 3
    assert outside == 0 and pvalue > ALPHA, f"DFlash 2 {schedule} {rule}: {outside} outside, p = {pvalue:.2g}"


@pytest.mark.parametrize("name", ["toy-eagle3", "toy-draft", "toy-dspark"])
def test_greedy_chains_keep_the_verifiers_joint(name, exact_joint):
    """EAGLE-3, autoregressive and DSpark drafts are argmax chains, as vLLM drafts them: q is a
    point mass at the draft, so lossless verification keeps the verifier's law."""
    config = DecodeConfig(schedule="linear", **SAMPLING)
    outside, pvalue, drafted = sampled(load_pair(name), config, exact_joint)
    assert drafted >= 3
    assert outside == 0 and pvalue > ALPHA, f"{name}: {outside} outside, p = {pvalue:.2g}"


@pytest.mark.parametrize("name", ["toy-dflash", "toy-eagle3", "toy-draft", "toy-dspark"])
def test_the_same_harness_rejects_a_lossy_rule(name, exact_joint):
    config = DecodeConfig(schedule="linear", rule="linear", leniency=1.0, **SAMPLING)
    assert not is_exact(config)
    outside, pvalue, _ = sampled(load_pair(name), config, exact_joint)
    assert outside > SAMPLES // 10 or pvalue < ALPHA
