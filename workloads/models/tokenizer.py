"""A character-level tokenizer built locally as a `PreTrainedTokenizerFast`.

The toy models use it; saved next to their weights, it loads with
`AutoTokenizer.from_pretrained(path)` exactly like a real checkpoint's tokenizer.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, MASK, UNK = "<pad>", "<eos>", "<mask>", "<unk>"
SPECIALS = (PAD, EOS, MASK, UNK)
# Printable ASCII so any prompt tokenizes; the toy task uses only digits and `+-=;#`.
CHARACTERS = tuple(string.digits + "+-=;#" + "".join(
    c for c in string.printable if c not in string.digits + "+-=;#\x0b\x0c\r"
))


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character; ids 0..3 are pad, eos, mask, unk."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARACTERS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        mask_token=MASK,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
        model_max_length=256,
    )
