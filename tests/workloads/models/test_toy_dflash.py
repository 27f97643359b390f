"""The toy DFlash trainer: what each block row sees and predicts, and determinism."""

import random

import torch
from transformers import LlamaForCausalLM

from workloads.models.tokenizer import build_char_tokenizer
from workloads.models.toy_data import CLEAN_LEN, sample_sequences
from workloads.models.toy_dflash import ANCHORS, BLOCK, build_blocks, train_dflash
from workloads.models.toy_train import model_config

TOK = build_char_tokenizer()


def test_a_block_sees_the_features_before_its_anchor_and_predicts_what_follows():
    rng = random.Random(0)
    seqs = sample_sequences(rng, TOK, 3)
    features = torch.randn(3, CLEAN_LEN, 5)
    context, ids, pos, mask, labels = build_blocks(seqs, random.Random(1), features, TOK.mask_token_id,
                                                   TOK.eos_token_id)
    assert context.shape == (3 * ANCHORS, CLEAN_LEN, 5) and ids.shape == (3 * ANCHORS, BLOCK)
    for i in range(3 * ANCHORS):
        seq, plen = seqs[i // ANCHORS]
        a = int(pos[i, CLEAN_LEN])  # the anchor's position
        assert plen - 1 <= a <= len(seq) - 2 and ids[i, 0] == seq[a]
        assert (ids[i, 1:] == TOK.mask_token_id).all()
        visible = mask[i, 0, 0] == 0
        assert visible[:a].all() and not visible[a:CLEAN_LEN].any() and visible[CLEAN_LEN:].all()
        expected = [seq[j] if j < len(seq) else TOK.eos_token_id for j in range(a + 1, a + BLOCK)]
        assert labels[i].tolist() == expected


def test_training_is_deterministic():
    torch.manual_seed(0)
    verifier = LlamaForCausalLM(model_config(len(TOK), 8, {})).eval()  # the toy verifier's depth
    first, second = (train_dflash(verifier, TOK, seed=3, steps=3, log=lambda _: None) for _ in range(2))
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)
