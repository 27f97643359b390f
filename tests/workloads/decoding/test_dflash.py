"""Target-conditioned (DFlash) drafting on tiny random models built from configs: a Qwen3
verifier and a `dflash.model.DFlashDraftModel` over it. Greedy lossless decoding equals the
verifier's own tokens for every schedule, K and policy, and equals the tokens of the
package's reference decoder `dflash_generate`."""

from __future__ import annotations

import pytest
import torch
from dflash.model import DFlashDraftModel, dflash_generate
from transformers import Qwen3Config, Qwen3ForCausalLM

from workloads.decoding import DecodeConfig, decode, decode_batch
from workloads.decoding.dflash import FeatureTap
from workloads.models.families.dflash import DFlashPair, check_dflash_fit
from workloads.models.pairspec import PairError
from workloads.models.profiles import resolve
from workloads.models.tokenizer import build_char_tokenizer

TOK = build_char_tokenizer()
PROMPTS = ["12+34=", "7-5+60=", "99-98=", "3+4+5=", "50-7="]


def qwen3(layers: int, hidden: int = 64, **extra) -> Qwen3Config:
    return Qwen3Config(vocab_size=len(TOK), hidden_size=hidden, intermediate_size=2 * hidden,
                       num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                       max_position_embeddings=256, pad_token_id=TOK.pad_token_id,
                       eos_token_id=TOK.eos_token_id, **extra)


def dflash_drafter(targets=(0, 2), verifier_layers: int = 4, hidden: int = 64, seed: int = 7):
    torch.manual_seed(seed)
    config = qwen3(1, hidden, num_target_layers=verifier_layers,
                   dflash_config={"block_size": 8, "mask_token_id": TOK.mask_token_id,
                                  "target_layer_ids": list(targets)})
    return DFlashDraftModel(config).eval()


@pytest.fixture(scope="module")
def tiny_dflash() -> DFlashPair:
    torch.manual_seed(3)
    verifier = Qwen3ForCausalLM(qwen3(4)).eval()
    verifier.lm_head.weight.data *= 4  # peaked enough that greedy text is not all one token
    drafter = dflash_drafter()
    profile = resolve("drafter", {"family": "dflash", "mask_token_id": drafter.mask_token_id}, None, TOK)
    return DFlashPair("tiny-dflash", drafter, verifier, TOK, profile)


@pytest.mark.parametrize("schedule", ["linear", "packed"])
@pytest.mark.parametrize(("steps", "unmask"), [(1, "ltr"), (2, "ltr"), (2, "confidence"), (2, "margin"),
                                               (2, "entropy"), (2, "random")])
@pytest.mark.parametrize("block", [4, 8])
def test_greedy_lossless_equals_the_verifier(tiny_dflash, schedule, steps, unmask, block):
    for prompt in PROMPTS[:3]:
        ar = decode(tiny_dflash, prompt, DecodeConfig(schedule="ar", max_new_tokens=20))
        spec = decode(tiny_dflash, prompt, DecodeConfig(schedule=schedule, block=block, steps=steps,
                                                        unmask=unmask, max_new_tokens=20))
        assert spec.token_ids == ar.token_ids
        assert spec.drafted > 0 and spec.exact


def test_linear_k1_emits_the_reference_decoders_tokens(tiny_dflash):
    """Same models, same prompts: `dflash_generate` (batch 1, greedy) and linear K = 1."""
    for prompt in PROMPTS:
        ids = TOK(prompt, return_tensors="pt").input_ids
        reference = dflash_generate(tiny_dflash.drafter, tiny_dflash.verifier, ids, max_new_tokens=20,
                                    stop_token_ids=[TOK.eos_token_id], block_size=8)[0, ids.shape[1]:]
        ours = decode(tiny_dflash, prompt, DecodeConfig(schedule="linear", block=8, max_new_tokens=20))
        assert ours.token_ids == reference.tolist()


def test_the_tap_keeps_only_the_target_layers(tiny_dflash):
    verifier = tiny_dflash.verifier
    hooks = [len(layer._forward_hooks) for layer in verifier.model.layers]
    tap = FeatureTap(verifier, [0, 2])
    try:
        ids = TOK("12+34=", return_tensors="pt").input_ids
        out = verifier(input_ids=ids, output_hidden_states=True)
        expected = torch.cat([out.hidden_states[1], out.hidden_states[3]], -1)  # outputs of layers 0 and 2
        assert torch.allclose(tap.features, expected)
    finally:
        tap.close()
    assert [len(layer._forward_hooks) for layer in verifier.model.layers] == hooks


@pytest.mark.parametrize(("drafter", "message"), [
    (lambda: dflash_drafter(hidden=96), "DFlash hidden size 96 does not fit the verifier's 64"),
    (lambda: dflash_drafter(targets=(0, 5), verifier_layers=6),
     r"target layers \[0, 5\] \(of 6\) do not fit"),
])
def test_a_drafter_that_does_not_fit_the_verifier_is_refused(tiny_dflash, drafter, message):
    with pytest.raises(PairError, match=message):
        check_dflash_fit(drafter(), tiny_dflash.verifier)


def test_schedules_a_dflash_pair_cannot_run_are_refused(tiny_dflash):
    with pytest.raises(ValueError, match="schedule: diffusion cannot run on a DFlash pair"):
        decode(tiny_dflash, "1+1=", DecodeConfig(schedule="diffusion"))
    with pytest.raises(ValueError, match="block: a DFlash pair needs block >= 2"):
        decode(tiny_dflash, "1+1=", DecodeConfig(schedule="linear", block=1))


@pytest.fixture(scope="module")
def tiny_dflash2(tiny_dflash) -> DFlashPair:
    """A DFlash 2 drafter (grouped causal convolutions, a candidate selector) over the same
    verifier."""
    from dflash.model import DFlash2DraftModel

    torch.manual_seed(11)
    config = qwen3(1, num_target_layers=4,
                   dflash_config={"block_size": 8, "mask_token_id": TOK.mask_token_id,
                                  "target_layer_ids": [0, 2], "conv_kernel_size": 2, "conv_group_size": 16,
                                  "selector_rank": 8, "selector_top_k": 4})
    drafter = DFlash2DraftModel(config).eval()
    for module in drafter.modules():  # the convolutions' base kernels start uninitialised
        if hasattr(module, "base_kernel"):
            module.base_kernel.data.normal_(0, 0.02)
    return DFlashPair("tiny-dflash2", drafter, tiny_dflash.verifier, TOK, tiny_dflash.profile)


@pytest.mark.parametrize("schedule", ["linear", "packed"])
def test_dflash2_drafts_its_candidate_chain_and_stays_exact(tiny_dflash2, schedule):
    for prompt in PROMPTS[:3]:
        ar = decode(tiny_dflash2, prompt, DecodeConfig(schedule="ar", max_new_tokens=20))
        spec = decode(tiny_dflash2, prompt, DecodeConfig(schedule=schedule, block=8, max_new_tokens=20))
        assert spec.token_ids == ar.token_ids and spec.drafted > 0
        ids = TOK(prompt, return_tensors="pt").input_ids
        reference = dflash_generate(tiny_dflash2.drafter, tiny_dflash2.verifier, ids, max_new_tokens=20,
                                    stop_token_ids=[TOK.eos_token_id], block_size=8)[0, ids.shape[1]:]
        assert spec.token_ids == reference.tolist()
    with pytest.raises(ValueError, match="DFlash 2 drafter proposes its candidate chain in one pass"):
        decode(tiny_dflash2, "1+1=", DecodeConfig(schedule=schedule, block=8, steps=2))


def test_dflash2_proposals_are_distributions_over_the_candidates(tiny_dflash2):
    """Sampled chain, two rows: each q row sums to 1 over the slot's top-k candidates, and the
    drawn token is one of them with positive q."""
    from workloads.decoding.dflash import DFlashNetwork
    from workloads.decoding.drafters import ChainDrafter
    from workloads.decoding.drafting import DraftSettings
    from workloads.decoding.rows import Rows

    config = DecodeConfig(schedule="linear", block=8, temperature=1.0)
    rows = Rows(config, TOK, [torch.Generator().manual_seed(i) for i in range(2)], torch.device("cpu"))
    drafter = ChainDrafter(DFlashNetwork(tiny_dflash2.drafter, tiny_dflash2.verifier, 2))
    ids = TOK("12+34=").input_ids
    n = len(ids) - 1  # context features of the verified prompt
    drafter.verified(None, torch.randn(2, n, 2 * 64), torch.tensor([n, n]))
    settings = DraftSettings(steps=1, threshold=None, unmask="ltr", temperature=1.0, top_k=0, top_p=1.0,
                             mask_token_id=TOK.mask_token_id, shifted=False)
    with torch.inference_mode():
        tokens, q = drafter.draft(rows, torch.tensor([ids[-1]] * 2), torch.tensor([7, 7]), 7, settings)
    assert q.shape == (2, 7, len(TOK)) and torch.allclose(q.sum(-1), torch.ones(2, 7))
    assert ((q > 0).sum(-1) <= 4).all()
    assert (q.gather(2, tokens[..., None]) > 0).all()


def test_an_absent_dflash_checkpoint_is_the_usual_offline_line():
    from workloads.models.pair import load_pair
    from workloads.models.pairspec import TOY_DIR

    spec = {"drafter": "z-lab/Nothing-DFlash-b16", "verifier": str(TOY_DIR / "verifier"),
            "profile": {"family": "dflash"}}
    with pytest.raises(PairError, match=r"pair.drafter: cannot load 'z-lab/Nothing-DFlash-b16'.*offline, "
                                        r"download it first"):
        load_pair(spec)


@pytest.mark.parametrize("schedule", ["linear", "packed"])
def test_dflash2_rows_decode_as_the_reference_decodes_them_alone(tiny_dflash2, schedule):
    """Greedy, sampled and with greedy chains under a sampled verifier, a batch of DFlash 2 rows
    draws each row's chain as the reference decoder draws it alone."""
    from tests.workloads.decoding.test_reference import alone, measured

    prompts = ["1+1=", "23+4=", "7*8=", "100-1=", "5+5="]
    for config in (DecodeConfig(schedule=schedule, block=8, max_new_tokens=20),
                   DecodeConfig(schedule=schedule, block=8, max_new_tokens=20, temperature=1.0, top_k=5),
                   DecodeConfig(schedule=schedule, block=8, max_new_tokens=20, temperature=1.0,
                                draft_temperature=0.0)):
        together = decode_batch(tiny_dflash2, prompts, config, seeds=list(range(5))).results
        assert measured(together) == measured(alone(tiny_dflash2, prompts, config, list(range(5))))
        assert sum(r.drafted for r in together) > 0
