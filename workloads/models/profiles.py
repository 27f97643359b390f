"""Diffusion profiles: how a network drafts, declared instead of forking its model code.

A profile says which token is the mask, whether logits are shifted (Dream: the row at
position i − 1 predicts token i; LLaDA, SDAR, Nemotron: a mask row predicts its own
position), the attention pattern of a drafting call, and which ids must never be proposed.

* `block` attention (block diffusion, SDAR; the toy drafter; dual-mode models): the canvas
  rows see a causal prefix and each other, so the prefix's keys and values are those of
  causal rows and an exact prefix KV cache is kept between calls.
* `causal` attention (an autoregressive drafter, vLLM's draft_model): it drafts a token a
  call, each row seeing the rows before it; the prefix cache is exact.
* `full` attention (Dream, LLaDA): every position of prefix and canvas sees every other, so
  prefix keys and values change with the canvas; no prefix cache is exact, and each
  drafting call evaluates the whole sequence.

Sources, in increasing precedence: the family's defaults, `specsweep` in the checkpoint's
config.json, then `profile:` in the pair spec (`family` names the defaults).
"""

from __future__ import annotations

from dataclasses import dataclass

FAMILIES: dict[str, dict] = {
    "dream": {"shift": True, "attention": "full", "mask_token": "<|mask|>", "own_attention": True},
    "llada": {"shift": False, "attention": "full", "mask_token_id": 126336, "own_attention": True},
    "sdar": {"shift": False, "attention": "block", "mask_token": "<|MASK|>"},
    "nemotron": {"shift": False, "attention": "block"},
    "dflash": {"shift": False, "attention": "block"},  # mask rows predict their own position
    "generic": {},
}
ATTENTION = ("block", "full", "causal")
KEYS = {"family", "shift", "attention", "mask_token", "mask_token_id", "any_order", "forbidden", "role",
        "own_attention"}


class ProfileError(ValueError):
    """A profile that cannot be resolved; the message names the field."""


@dataclass(frozen=True)
class DiffusionProfile:
    """How a network drafts in diffusion mode.

    shifted: Dream-style, the row at position i - 1 predicts token i; otherwise a mask row
    predicts its own position. attention: `block` (exact prefix cache) or `full` (the whole
    sequence per drafting call). any_order: the diffusion mode is trained as an any-order
    verifier (SetDLM-style), so `verify_order: confidence` may use it. forbidden: ids never
    proposed besides the mask token (e.g. ids beyond the verifier's vocabulary).
    own_attention: under `full` attention, the checkpoint's own code already attends
    bidirectionally over contiguous positions (Dream, LLaDA remote code), so a drafting call
    passes input ids only, no mask or position ids, which such code may not accept.
    """

    mask_token_id: int
    shifted: bool
    attention: str = "block"
    any_order: bool = False
    forbidden: tuple[int, ...] = ()
    own_attention: bool = False

    @property
    def prefix_cache(self) -> bool:
        return self.attention != "full"


def resolve(field: str, declared: dict, override: dict | None, tokenizer) -> DiffusionProfile:
    """The profile of `field` (drafter or model) from the checkpoint's declaration and the
    spec's override; `tokenizer` resolves a mask token given by name."""
    override = dict(override or {})
    for source in (declared, override):
        unknown = sorted(set(source) - KEYS)
        if unknown:
            raise ProfileError(f"pair.profile.{unknown[0]}: unknown key; known: {', '.join(sorted(KEYS))}")
    family = override.get("family", declared.get("family", "generic"))
    if family not in FAMILIES:
        raise ProfileError(f"pair.profile.family: {family!r} unknown; known: {', '.join(FAMILIES)}")
    merged = {**FAMILIES[family], **declared, **override}
    mask = merged.get("mask_token_id")
    if mask is None and merged.get("mask_token") is not None:
        mask = tokenizer.convert_tokens_to_ids(merged["mask_token"])
        if mask is None or mask == tokenizer.unk_token_id:
            raise ProfileError(f"pair.{field}: mask token {merged['mask_token']!r} is not in the tokenizer")
    if mask is None:
        mask = tokenizer.mask_token_id
    if mask is None:
        raise ProfileError(f"pair.{field}: no mask token; set profile.mask_token_id in the pair spec")
    if "shift" not in merged:
        raise ProfileError(f"pair.{field}: say whether logits are shifted (profile.shift: true|false)")
    attention = merged.get("attention", "block")
    if attention not in ATTENTION:
        raise ProfileError(f"pair.profile.attention: must be one of {', '.join(ATTENTION)}; "
                           f"got {attention!r}")
    return DiffusionProfile(mask_token_id=int(mask), shifted=bool(merged["shift"]), attention=attention,
                            any_order=bool(merged.get("any_order", False)),
                            forbidden=tuple(int(i) for i in merged.get("forbidden", ())),
                            own_attention=bool(merged.get("own_attention", False)))
