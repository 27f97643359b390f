"""Adapters for the papers' model families on tiny random-weight checkpoints built from
configs of each architecture and saved with `save_pretrained`: the same loading path a hub
id takes, every drafter profile against every verifier architecture."""

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from workloads.decoding import DecodeConfig, decode
from workloads.models import loading as pair_module
from workloads.models.pair import load_pair
from workloads.models.pairspec import PairError
from workloads.models.tokenizer import build_char_tokenizer

TOK = build_char_tokenizer()
SIZE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    tie_word_embeddings=True,
    pad_token_id=TOK.pad_token_id,
    eos_token_id=TOK.eos_token_id,
    bos_token_id=None,
)
ARCHES = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
}
# Drafter profiles of the papers' families, on the architecture each is built on.
# Drafter profiles of the papers' families, on the architecture each is built on. These are
# transformers' causal classes, so the drafting calls must bring the bidirectional mask
# themselves (own_attention off; the remote-code Dream/LLaDA models attend bidirectionally).
DRAFTERS = {
    "dream": ("qwen2", {"family": "dream", "mask_token_id": TOK.mask_token_id, "own_attention": False}),
    "llada": ("llama", {"family": "llada", "mask_token_id": TOK.mask_token_id, "own_attention": False}),
    "sdar": ("qwen3", {"family": "sdar", "mask_token_id": TOK.mask_token_id}),  # unshifted, block-causal
}
PROMPTS = ["12+34=", "7*8-5=", "90-45+1="]


def checkpoint(path, arch: str, seed: int, vocab: int | None = None, tokenizer=TOK) -> str:
    config_cls, model_cls = ARCHES[arch]
    torch.manual_seed(seed)
    model_cls(config_cls(vocab_size=vocab or len(tokenizer), **SIZE)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    made = {f"verifier-{a}": checkpoint(root / f"v-{a}", a, seed=1) for a in ("llama", "qwen2", "qwen3")}
    made.update(
        {f"drafter-{d}": checkpoint(root / f"d-{d}", arch, seed=2) for d, (arch, _) in DRAFTERS.items()}
    )
    return made


@pytest.mark.parametrize("verifier", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("drafter", list(DRAFTERS))
def test_greedy_lossless_equals_the_verifiers_greedy_output(checkpoints, drafter, verifier):
    pair = load_pair(
        {
            "drafter": checkpoints[f"drafter-{drafter}"],
            "verifier": checkpoints[f"verifier-{verifier}"],
            "profile": DRAFTERS[drafter][1],
        }
    )
    assert pair.profile.attention == ("block" if drafter == "sdar" else "full")
    assert pair.profile.shifted == (drafter == "dream")
    for prompt in PROMPTS:
        ar = decode(pair, prompt, DecodeConfig(schedule="ar", max_new_tokens=16)).token_ids
        for settings in (
            dict(schedule="linear", steps=1),
            dict(schedule="linear", steps=2, unmask="confidence"),
            dict(schedule="packed", steps=1),
        ):
            r = decode(pair, prompt, DecodeConfig(block=4, max_new_tokens=16, **settings))
            assert r.token_ids == ar and r.exact
        drafted = decode(
            pair, prompt, DecodeConfig(schedule="diffusion", block=4, max_new_tokens=16)
        ).token_ids
        assert TOK.mask_token_id not in drafted


def test_full_attention_drafting_caches_nothing_and_block_drafting_caches_the_prefix(checkpoints):
    rows = {}
    for drafter in ("llada", "sdar"):
        pair = load_pair(
            {
                "drafter": checkpoints[f"drafter-{drafter}"],
                "verifier": checkpoints["verifier-llama"],
                "profile": DRAFTERS[drafter][1],
            }
        )
        rows[drafter] = decode(
            pair, PROMPTS[0], DecodeConfig(schedule="diffusion", block=4, max_new_tokens=16)
        ).rows
    assert rows["llada"] > rows["sdar"]  # the whole sequence every call vs the new tokens only


def test_ids_beyond_the_verifiers_vocabulary_are_never_proposed(tmp_path):
    vocab = len(TOK)
    drafter = checkpoint(tmp_path / "d", "qwen2", seed=3, vocab=vocab + 27)
    with torch.no_grad():  # make the extra ids the drafter's favourites
        model = Qwen2ForCausalLM.from_pretrained(drafter)
        model.get_output_embeddings().weight[vocab:] *= 50
        model.save_pretrained(drafter)
    pair = load_pair(
        {
            "drafter": drafter,
            "verifier": checkpoint(tmp_path / "v", "llama", seed=1),
            "profile": DRAFTERS["dream"][1],
        }
    )
    assert set(range(vocab, vocab + 27)) <= set(pair.profile.forbidden)
    for prompt in PROMPTS:
        drafted = decode(
            pair, prompt, DecodeConfig(schedule="diffusion", block=4, max_new_tokens=12)
        ).token_ids
        assert max(drafted) < vocab and TOK.mask_token_id not in drafted
        sampled = decode(
            pair, prompt, DecodeConfig(schedule="linear", block=4, temperature=1.0, max_new_tokens=12)
        )
        assert max(sampled.token_ids) < vocab


def test_special_tokens_must_agree(tmp_path):
    other = build_char_tokenizer()
    other.eos_token = other.pad_token
    spec = {
        "drafter": checkpoint(tmp_path / "d", "qwen2", seed=2, tokenizer=other),
        "verifier": checkpoint(tmp_path / "v", "llama", seed=1),
        "profile": DRAFTERS["dream"][1],
    }
    with pytest.raises(PairError, match="tokenizers differ in eos_token_id"):
        load_pair(spec)


def test_local_directory_and_hub_id_take_the_same_loading_call(checkpoints, monkeypatch):
    calls = []
    real_model, real_tok = AutoModelForCausalLM.from_pretrained, AutoTokenizer.from_pretrained

    def model_loader(ref, **kwargs):
        calls.append(("model", ref, kwargs))
        return real_model(checkpoints["verifier-llama"], **kwargs)

    def tokenizer_loader(ref, **kwargs):
        calls.append(("tokenizer", ref, kwargs))
        return real_tok(checkpoints["verifier-llama"], **kwargs)

    monkeypatch.setattr(pair_module.AutoModelForCausalLM, "from_pretrained", model_loader)
    monkeypatch.setattr(pair_module.AutoTokenizer, "from_pretrained", tokenizer_loader)
    options = {"dtype": "bfloat16", "attn_implementation": "eager"}
    local = load_pair(
        {"model": checkpoints["verifier-llama"], "profile": {"shift": True, "mask_token_id": 2}, **options}
    )
    hub = load_pair(
        {"model": "someone/dual-mode-7b", "profile": {"shift": True, "mask_token_id": 2}, **options}
    )
    (_, local_ref, local_kwargs), (_, hub_ref, hub_kwargs) = calls[0], calls[2]
    assert (local_ref, hub_ref) == (checkpoints["verifier-llama"], "someone/dual-mode-7b")
    assert (
        local_kwargs
        == hub_kwargs
        == {"trust_remote_code": False, "dtype": torch.bfloat16, "attn_implementation": "eager",
            "output_loading_info": True}
    )
    assert local.model.dtype == hub.model.dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"dtype": "float8"}, "pair.dtype: must be one of bfloat16, float16, float32"),
        ({"device": "cuda:0"} if not torch.cuda.is_available() else {"device": "tpu"}, "pair.device"),
        ({"profile": {"family": "mamba"}}, "pair.profile.family: 'mamba' unknown"),
        (
            {"profile": {"shift": True, "attention": "sliding"}},
            "pair.profile.attention: must be one of block, full, causal",
        ),
        ({"profile": {"family": "dream"}}, "pair.drafter: mask token '<|mask|>' is not in the tokenizer"),
    ],
)
def test_bad_loading_options_name_the_field(checkpoints, extra, message):
    spec = {"drafter": checkpoints["drafter-dream"], "verifier": checkpoints["verifier-llama"], **extra}
    spec.setdefault("profile", DRAFTERS["dream"][1])
    with pytest.raises(PairError, match=message.replace("|", r"\|").replace("(", r"\(")):
        load_pair(spec)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_dual_mode_nemotron_profile_reproduces_its_ar_mode(tmp_path, arch):
    """A shared-weight model with unshifted mask rows (Nemotron-Labs-Diffusion style): every
    self-speculative schedule's greedy output is the AR mode's."""
    pair = load_pair(
        {
            "model": checkpoint(tmp_path / arch, arch, seed=4),
            "profile": {"family": "nemotron", "mask_token_id": TOK.mask_token_id},
        }
    )
    assert not pair.profile.shifted and pair.profile.prefix_cache
    for prompt in PROMPTS:
        ar = decode(pair, prompt, DecodeConfig(schedule="ar", max_new_tokens=16)).token_ids
        for schedule in ("linear", "packed", "quadratic"):
            assert (
                decode(pair, prompt, DecodeConfig(schedule=schedule, block=4, max_new_tokens=16)).token_ids
                == ar
            )


class IdsOnly(torch.nn.Module):
    """A remote-code-style diffusion LM (LLaDA's forward takes no position ids or 4D mask)
    that attends bidirectionally by itself."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    @property
    def device(self):
        return self.inner.device

    @property
    def dtype(self):
        return self.inner.dtype

    def forward(self, input_ids):
        n = input_ids.shape[1]
        return self.inner(input_ids=input_ids, attention_mask=torch.zeros(1, 1, n, n))


def test_own_attention_drafters_get_input_ids_only(checkpoints):
    from workloads.models.families.twomodel import TwoModelPair
    from workloads.models.profiles import FAMILIES, resolve

    base = load_pair(
        {
            "drafter": checkpoints["drafter-llada"],
            "verifier": checkpoints["verifier-llama"],
            "profile": DRAFTERS["llada"][1],
        }
    )
    profile = resolve("drafter", {}, {"family": "llada", "mask_token_id": TOK.mask_token_id}, TOK)
    assert FAMILIES["llada"]["own_attention"] and profile.own_attention and not profile.prefix_cache
    pair = TwoModelPair("ids-only", IdsOnly(base.drafter), base.verifier, TOK, profile)
    for prompt in PROMPTS:
        ar = decode(pair, prompt, DecodeConfig(schedule="ar", max_new_tokens=16)).token_ids
        assert (
            decode(pair, prompt, DecodeConfig(schedule="linear", block=4, max_new_tokens=16)).token_ids == ar
        )
        # the same drafts as the full-attention mask path on the unwrapped model
        plain = decode(pair, prompt, DecodeConfig(schedule="diffusion", block=4, max_new_tokens=16)).token_ids
        assert (
            plain
            == decode(base, prompt, DecodeConfig(schedule="diffusion", block=4, max_new_tokens=16)).token_ids
        )
