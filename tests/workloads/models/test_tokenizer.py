from transformers import AutoTokenizer

from workloads.models.tokenizer import build_char_tokenizer


def test_round_trip_of_arith_text():
    tok = build_char_tokenizer()
    text = "37+45-12=37+45=82;82-12=70#70"
    ids = tok(text).input_ids
    assert len(ids) == len(text)
    assert tok.decode(ids) == text


def test_round_trip_of_spaces_newlines_and_letters():
    tok = build_char_tokenizer()
    text = "def f(x):\n    return x  # ok"
    assert tok.decode(tok(text).input_ids) == text


def test_special_tokens_exist_and_are_skipped_on_decode():
    tok = build_char_tokenizer()
    assert (tok.pad_token_id, tok.eos_token_id, tok.mask_token_id) == (0, 1, 2)
    ids = tok("1+1=2").input_ids + [tok.eos_token_id, tok.pad_token_id]
    assert tok.decode(ids, skip_special_tokens=True) == "1+1=2"


def test_unknown_characters_map_to_unk():
    tok = build_char_tokenizer()
    assert tok("é").input_ids == [tok.unk_token_id]


def test_saved_tokenizer_loads_with_auto_tokenizer(tmp_path):
    build_char_tokenizer().save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert tok.decode(tok("12-3=9#9").input_ids) == "12-3=9#9"
    assert tok.mask_token == "<mask>"
