"""The contract every pair kind keeps (workloads/decoding/kinds.py), checked alike on each
registered one through a bundled pair of that kind: at temperature 0, lossless, every
speculative schedule it runs emits the verifier's exact tokens, and the tokens compared were
drafted and verified; a schedule it does not run is refused in one line naming it; its block
size and draft width invert each other; the vLLM methods it is served with are vLLM's."""

import pytest

from workloads.decoding import DecodeConfig, decode_batch
from workloads.decoding.config import ConfigError
from workloads.decoding.kinds import KINDS, SPECULATIVE
from workloads.models import load_pair
from workloads.models.pairspec import BUNDLED
from workloads.serving.config import METHODS
from workloads.tasks import get_task


@pytest.fixture(scope="module")
def pairs():
    return {name: load_pair(name) for name in BUNDLED}


def a_pair_of(kind, pairs):
    return next(pair for pair in pairs.values() if pair.kind is kind)


def test_every_registered_kind_has_a_bundled_pair_and_every_bundled_pair_a_registered_kind(pairs):
    kinds = {pair.kind for pair in pairs.values()}
    assert kinds == set(KINDS.values())


@pytest.mark.parametrize("kind", list(KINDS.values()), ids=list(KINDS))
def test_a_registered_kind_keeps_the_contract(kind, pairs):
    pair = a_pair_of(kind, pairs)
    prompts = [e.prompt for e in get_task("arith").examples(n=2, seed=0)]
    ar = decode_batch(pair, prompts, DecodeConfig(schedule="ar", max_new_tokens=12), seeds=[0, 0])
    assert kind.speculative and "ar" in kind.schedules
    for schedule in kind.speculative:
        block = max(4, kind.min_block)
        config = DecodeConfig(schedule=schedule, block=block, steps=1, max_new_tokens=12)
        out = decode_batch(pair, prompts, config, seeds=[0, 0])
        assert [r.token_ids for r in out.results] == [r.token_ids for r in ar.results], schedule
        assert all(r.exact for r in out.results) and sum(r.drafted for r in out.results) > 0, schedule
    for schedule in [s for s in SPECULATIVE if not kind.runs(s)]:
        with pytest.raises(ConfigError, match=f"^schedule: {schedule} ") as refused:
            kind.check(DecodeConfig(schedule=schedule, block=4, max_new_tokens=12))
        assert "\n" not in str(refused.value)
    for width in (2, 4, 8):
        if width >= kind.draft_width(kind.min_block):
            assert kind.draft_width(kind.block_for(width)) == width
    assert set(kind.serving_methods) <= set(METHODS) and kind.serving_methods[:2] == ("none", "ngram")
    assert kind.sglang_algorithm is None or isinstance(kind.sglang_algorithm, str)
