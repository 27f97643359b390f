"""Self-speculative schedules on one dual-mode network: exactness, layouts, the KV cache,
rows per iteration and Packed-SS against Linear-SS (paper 2610.33379)."""

import dataclasses

import pytest
import torch

from tests.workloads.decoding.caches import caches_when_rows_leave, holds_prefix, prefilled
from tests.workloads.decoding.stubs import TOK, StubLM, digit_at
from workloads.decoding import DecodeConfig, decode, decode_batch
from workloads.decoding.anyorder import anyorder_packed
from workloads.decoding.config import ConfigError
from workloads.decoding.engine import draft_settings
from workloads.decoding.masks import additive, packed
from workloads.decoding.rows import Rows
from workloads.models import load_pair
from workloads.models.families.selfspec import SelfPair
from workloads.models.profiles import DiffusionProfile
from workloads.tasks import get_task

SCHEDULES = ("linear", "packed", "quadratic")
BLOCKS = (4, 8, 16)


def test_packed_layout_matches_appendix_d1():
    """Verify rows causal; each region sees the verify rows before its anchor and itself."""
    visible = packed(3, [(0, 2), (2, 2)])
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [0, 0, 0, 1, 1, 0, 0],
        [0, 0, 0, 1, 1, 0, 0],
        [1, 1, 0, 0, 0, 1, 1],
        [1, 1, 0, 0, 0, 1, 1],
    ], dtype=torch.bool)
    assert torch.equal(visible, expected)


# -- toy-self at temperature 0 ------------------------------------------------------------------

@pytest.fixture(scope="module")
def toy_self():
    return load_pair("toy-self")


@pytest.fixture(scope="module")
def greedy(toy_self):
    """Every schedule and B over 30 arith prompts, decoded in batches of 10: (schedule, B) ->
    results, plus 'ar' decoded one prompt at a time."""
    prompts = [e.prompt for e in get_task("arith").examples("test", n=30, seed=2)]
    runs = {"ar": [decode(toy_self, p, DecodeConfig(schedule="ar", max_new_tokens=64)) for p in prompts]}
    for schedule in SCHEDULES:
        for block in BLOCKS:
            config = DecodeConfig(schedule=schedule, block=block, max_new_tokens=64)
            runs[schedule, block] = [r for i in range(0, len(prompts), 10)  # rows of batches of 10
                                     for r in decode_batch(toy_self, prompts[i:i + 10], config).results]
    runs["prompt_lengths"] = [len(toy_self.tokenizer(p).input_ids) for p in prompts]
    return runs


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_greedy_reproduces_ar_tokens(greedy, schedule, block):
    for r, ar in zip(greedy[schedule, block], greedy["ar"]):
        assert r.token_ids == ar.token_ids
        assert r.exact and r.stop_reason == "eos"


@pytest.mark.parametrize("block", BLOCKS)
def test_rows_per_iteration(greedy, block):
    """Linear 2B over two calls, packed 2B in one, quadratic B + B(B + 1); the start is the
    prompt (and, for one-call schedules, a first region of B + 1 rows)."""
    for schedule, per_iteration, start in (("linear", 2 * block, 0), ("packed", 2 * block, block + 1),
                                           ("quadratic", block * (block + 2), block + 1)):
        for r, prompt in zip(greedy[schedule, block], greedy["prompt_lengths"]):
            assert r.rows == prompt + start + per_iteration * r.iterations, schedule
            calls = 2 * r.iterations + 1 if schedule == "linear" else r.iterations + 1
            assert r.nfe == calls


@pytest.mark.parametrize("block", BLOCKS)
def test_packed_uses_no_more_nfe_than_linear_on_most_prompts(greedy, block):
    packed_runs, linear_runs = greedy["packed", block], greedy["linear", block]
    holds = sum(p.nfe <= q.nfe for p, q in zip(packed_runs, linear_runs)) / len(packed_runs)
    assert holds >= 0.9
    per_nfe = lambda runs: sum(r.new_tokens for r in runs) / sum(r.nfe for r in runs)  # noqa: E731
    assert per_nfe(packed_runs) > per_nfe(linear_runs)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_acceptance_rules_run_on_every_schedule(toy_self, schedule):
    prompt = get_task("arith").examples("test", n=1, seed=4)[0].prompt
    lenient = DecodeConfig(schedule=schedule, block=4, rule="linear", leniency=1.0, temperature=1.0,
                           max_new_tokens=24)
    everything = decode(toy_self, prompt, lenient)
    assert everything.accepted == everything.drafted > 0 and not everything.exact
    ar = decode(toy_self, prompt, DecodeConfig(schedule="ar", max_new_tokens=24)).token_ids
    for rule in ("cactus", "match"):  # δ = 0 and λ = 0: the lossless output, exactly labelled
        r = decode(toy_self, prompt, DecodeConfig(schedule=schedule, block=4, rule=rule, max_new_tokens=24))
        assert r.exact and r.token_ids == ar


# -- stubs: every draft token right ----------------------------------------------------------

def stub_self() -> SelfPair:
    return SelfPair("stub-self", StubLM(digit_at), TOK, DiffusionProfile(TOK.mask_token_id, shifted=True))


@pytest.mark.parametrize(("schedule", "expected"), [
    ("linear", [3, 3, 3, 3]),
    ("quadratic", [3, 3, 3, 3]),
    ("packed", [3, 0, 2, 0, 2, 0, 2]),  # a full draft leaves no proposal; then W - 1 of W survive
])
def test_always_accepted_drafts(schedule, expected):
    config = DecodeConfig(schedule=schedule, block=4, max_new_tokens=1 + 4 * 4)
    r = decode(stub_self(), "1", config)
    assert r.accept_lengths[: len(expected)] == expected
    assert r.token_ids == [digit_at(p) for p in range(1, 1 + config.max_new_tokens)]


def test_self_settings_refused():
    pair = stub_self()
    with pytest.raises(ConfigError, match="steps: packed on a dual-mode pair"):
        decode(pair, "1", DecodeConfig(schedule="packed", block=4, steps=2))
    with pytest.raises(ConfigError, match="steps: quadratic on a dual-mode pair"):
        decode(pair, "1", DecodeConfig(schedule="quadratic", block=4, threshold=0.5))
    with pytest.raises(ConfigError, match="block: a dual-mode pair needs block >= 2"):
        decode(pair, "1", DecodeConfig(schedule="linear", block=1))


def test_diffusion_on_a_dual_mode_pair_drafts_alone():
    """The `diffusion` baseline of a dual-mode pair is its diffusion mode decoding alone: B
    tokens per call and iteration, nothing verified (it once ran the packed loop instead)."""
    r = decode(stub_self(), "1", DecodeConfig(schedule="diffusion", block=4, max_new_tokens=8))
    assert (r.drafted, r.accepted, r.accept_lengths, r.exact) == (0, 0, [], False)
    assert r.iterations == 2 and r.nfe == 2 and r.token_ids == [digit_at(p) for p in range(1, 9)]


# -- temperature 1 ---------------------------------------------------------------------------

PROMPT = "7"


@pytest.fixture(scope="module")
def uncertain_self(uncertain_pair):
    """The uncertain verifier as a dual-mode network (its mask rows draft, its causal rows verify)."""
    return SelfPair("uncertain-self", uncertain_pair.verifier, TOK, DiffusionProfile(TOK.mask_token_id, True))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_cache_holds_the_verified_prefix_only(uncertain_self, monkeypatch, schedule):
    """When a row of a sampled batch with rejections leaves, the cache equals a causal
    prefill of its prompt and every emitted token but the last: nothing from drafting or
    rejected rows. (Tokens accepted after an emitted EOS may sit beyond it; the decode is
    over then.)"""
    config = DecodeConfig(schedule=schedule, block=4, temperature=1.0, max_new_tokens=30)
    seen = caches_when_rows_leave(monkeypatch)
    results = decode_batch(uncertain_self, [PROMPT] * 3, config, seeds=[3, 4, 5]).results
    for row, result in enumerate(results):
        prefix = TOK(PROMPT).input_ids + result.token_ids[:-1]
        n = len(prefix)
        ((_, length, layers),) = seen[row]
        assert length == n if result.stop_reason == "length" else n <= length < n + 4
        assert holds_prefix(layers, length, prefilled(uncertain_self.model, prefix))
    assert sum(r.accepted for r in results) < sum(r.drafted for r in results)


# -- any-order (confidence-ordered) Packed-SS, greedy ------------------------------------------

@pytest.fixture(scope="module")
def any_order_self(toy_self):
    """toy-self's weights declared as an any-order model (its diffusion mode verifies)."""
    profile = dataclasses.replace(toy_self.profile, any_order=True)
    return SelfPair("toy-self-any-order", toy_self.model, toy_self.tokenizer, profile)


def serial_reference(pair, prompt: list[int], steps, block: int, end: int) -> list[int]:
    """Proposition C.1's serial reference, without a cache or packing: at iteration t,
    positions π_t(1 .. A_t) one at a time, each from its own canvas call over the prompt,
    the contiguous output and the window holding the tokens accepted so far and the
    reference tokens of earlier ranks."""
    mask, width, eos = pair.profile.mask_token_id, block - 1, pair.tokenizer.eos_token_id
    accepted: dict[int, int] = {}
    contiguous = 0
    for step in steps:
        window = range(contiguous, min(end, contiguous + width))
        context = prompt + [accepted[j] for j in range(contiguous)]
        made: dict[int, int] = {}
        for j in step.order[: step.accepted]:
            shown = {**accepted, **made}
            slots = [shown.get(i, mask) for i in window] + [mask] * (width - len(window))
            ids = context + [context[-1]] + slots
            positions = list(range(len(context))) + list(range(len(context) - 1, len(context) + width))
            visible = additive(packed(len(context), [(len(context) - 1, width + 1)])[None])
            logits = pair.model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]),
                                attention_mask=visible).logits[0, len(context):].float()
            logits = logits[:-1] if pair.profile.shifted else logits[1:]
            logits[:, mask] = float("-inf")
            made[j] = int(logits[j - contiguous].argmax())
        accepted.update(made)
        end = min([end, *(j + 1 for j, t in accepted.items() if t == eos)])
        accepted = {j: t for j, t in accepted.items() if j < end}
        while contiguous in accepted:
            contiguous += 1
    return [accepted[j] for j in range(end)]


@pytest.mark.parametrize("block", [4, 8])
def test_any_order_packed_equals_its_serial_reference(any_order_self, block):
    config = DecodeConfig(schedule="packed", block=block, verify_order="confidence", max_new_tokens=24)
    out_of_order = 0
    for example in get_task("arith").examples("test", n=8, seed=3):
        prompt = TOK(example.prompt).input_ids
        rows = Rows(config, TOK, [torch.Generator()], torch.device("cpu"))
        model = any_order_self.kind.networks(any_order_self, config, 1, None)["verifier"]
        with torch.inference_mode():
            steps = anyorder_packed(rows, model, [prompt], draft_settings(any_order_self, config),
                                    any_order_self.kind.draft_width(config.block))
            expected = serial_reference(any_order_self, prompt, steps, block, config.max_new_tokens)
        assert rows.out[0, :rows.count[0]].tolist() == expected
        out_of_order += sum(s.order != sorted(s.order) for s in steps)
        assert decode(any_order_self, example.prompt, config).token_ids == expected
    assert out_of_order > 0  # confidence really reordered verification


def test_any_order_with_a_right_verifier_gives_its_tokens():
    pair = stub_self()
    pair = SelfPair(pair.name, pair.model, pair.tokenizer, dataclasses.replace(pair.profile, any_order=True))
    config = DecodeConfig(schedule="packed", block=4, verify_order="confidence", max_new_tokens=9)
    r = decode(pair, "1", config)
    assert r.token_ids == [digit_at(p) for p in range(1, 10)] and r.exact is False
    assert r.accepted > 0


def test_any_order_is_refused_where_it_is_not_supported(toy_self):
    with pytest.raises(ConfigError, match="verify_order: confidence needs a model trained for any-order"):
        decode(toy_self, "1", DecodeConfig(schedule="packed", verify_order="confidence"))
    with pytest.raises(ConfigError, match="verify_order: confidence runs greedy lossless packed only"):
        DecodeConfig(schedule="packed", verify_order="confidence", temperature=1.0)
    with pytest.raises(ConfigError, match="verify_order: confidence runs greedy lossless packed only"):
        DecodeConfig(schedule="linear", verify_order="confidence")
