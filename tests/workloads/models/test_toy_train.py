import random

import torch
from transformers import LlamaForCausalLM

from workloads.models.tokenizer import build_char_tokenizer
from workloads.models.toy_data import CLEAN_LEN, IGNORE, sample_sequences
from workloads.models.toy_train import (
    Stage,
    build_batch,
    drafter_from,
    grow,
    model_config,
    train,
)

TOK = build_char_tokenizer()


def batch(diffusion, seed=0):
    rng = random.Random(seed)
    seqs = sample_sequences(rng, TOK, 4)
    stage = Stage("t", steps=1, lr=1e-3, batch=4, ar=True, diffusion=diffusion, block_rows=40)
    return seqs, build_batch(seqs, rng, stage, TOK)


def test_every_row_sees_at_least_one_key():
    _, (_, _, mask, _) = batch("shifted")
    assert ((mask[:, 0] == 0).sum(-1) > 0).all()


def test_ar_labels_cover_the_completion_only():
    seqs, (ids, _, _, labels) = batch(None)
    seq, plen = seqs[0]
    assert labels[0, : plen - 1].eq(IGNORE).all()
    assert labels[0, plen - 1 : len(seq) - 1].tolist() == seq[plen:]


def test_block_rows_see_only_the_clean_prefix_before_their_start():
    _, (ids, pos, mask, _) = batch("shifted")
    visible = mask[:, 0] == 0
    row = CLEAN_LEN  # first row of the first block: a copy of x_{s-1} at position s - 1
    start = int(pos[0, row]) + 1
    assert ids[0, row] == ids[0, start - 1]
    assert visible[0, row, : start - 1].all() and not visible[0, row, start - 1 : CLEAN_LEN].any()


def test_shifted_labels_sit_one_row_before_their_masked_slot():
    _, (ids, _, _, labels) = batch("shifted", seed=3)
    rows = (labels[0, CLEAN_LEN:] != IGNORE).nonzero().flatten() + CLEAN_LEN
    assert len(rows) > 0 and (ids[0, rows + 1] == TOK.mask_token_id).all()


def test_unshifted_labels_sit_on_masked_rows():
    _, (ids, _, _, labels) = batch("unshifted", seed=3)
    rows = (labels[0, CLEAN_LEN:] != IGNORE).nonzero().flatten() + CLEAN_LEN
    assert len(rows) > 0 and (ids[0, rows] == TOK.mask_token_id).all()


def test_training_is_deterministic():
    def run():
        torch.manual_seed(0)
        model = LlamaForCausalLM(model_config(len(TOK), 1, {}))
        train(model, Stage("t", steps=3, lr=1e-3, batch=4, ar=True, diffusion="shifted", block_rows=20),
              TOK, seed=0, log=lambda _: None)
        return model.state_dict()

    a, b = run(), run()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_drafter_is_a_shallower_copy_of_the_verifier():
    verifier = LlamaForCausalLM(model_config(len(TOK), 4, {}))
    drafter = drafter_from(verifier, 2, {"shift": True})
    assert drafter.config.num_hidden_layers == 2
    up = lambda m: m.model.layers[1].mlp.up_proj.weight  # noqa: E731
    assert torch.equal(up(drafter), up(verifier))
    assert drafter.config.specsweep == {"shift": True}


def test_growing_the_verifier_keeps_its_function_and_trains_every_new_layer():
    torch.manual_seed(0)
    base = LlamaForCausalLM(model_config(len(TOK), 2, {"role": "verifier"}))
    deeper = grow(base, 4)
    ids = torch.randint(3, 90, (2, 12))
    assert deeper.config.num_hidden_layers == 4
    assert torch.allclose(base(ids).logits, deeper(ids).logits, atol=1e-6)
    assert torch.equal(deeper.model.layers[3].mlp.up_proj.weight, base.model.layers[1].mlp.up_proj.weight)
    train(deeper, Stage("g", steps=2, lr=1e-3, batch=4, ar=True, diffusion=None, exits=(1, 2)),
          TOK, seed=0, log=lambda _: None)
    for layer in deeper.model.layers[2:]:  # zeroed output projections move once trained
        assert layer.self_attn.o_proj.weight.abs().sum() > 0 and layer.mlp.down_proj.weight.abs().sum() > 0
