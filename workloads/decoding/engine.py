"""`decode(pair, prompt, config)`: one prompt through one schedule, with its measurements.

Schedules (DESIGN.md):

* `ar`: the verifier alone, one token per call.
* `diffusion`: the drafter alone, block by block (K steps or threshold τ per block).
* `linear`: draft from the newest prefix, then verify (paper 2610.31819, Algorithm 1).
* `packed`: one call ahead; the draft verified at iteration t + 1 was computed from the
  prefix at the start of iteration t, while iteration t verified (on a GPU the drafter's
  calls run on a second CUDA stream, overlapping the verifier's). Its first A_t slots
  (the tokens iteration t emitted) are dropped; the rest is the next draft.

On a two-model pair every schedule starts the same way: the verifier prefills the prompt and
the first token is sampled from its last row, so the prefix P_0 = prompt + that token. The
drafter's cache is filled lazily: verified tokens it has not seen ride along as causal rows
of its next call. A dual-mode (self) pair runs `linear`, `packed` and `quadratic` as in
`selfspec` (one network, one cache); `verify_order: confidence` runs the any-order Packed-SS
of `anyorder`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from workloads.decoding.anyorder import anyorder_packed
from workloads.decoding.calls import CachedModel, Meter, side_stream, sync
from workloads.decoding.config import ConfigError, DecodeConfig, is_exact
from workloads.decoding.drafting import Draft, DraftSettings, diffusion_draft
from workloads.decoding.output import Output
from workloads.decoding.selfspec import SELF_SCHEDULES, check_self, self_speculative
from workloads.decoding.verifying import Run, settle, verify_call, verify_step
from workloads.models.pair import Pair, SelfPair

MEASUREMENTS = ("new_tokens", "wall_s", "model_s", "overhead_s", "nfe", "rows", "iterations",
                "accepted", "drafted", "exact", "stop_reason")


@dataclass
class DecodeResult:
    text: str
    token_ids: list[int]
    new_tokens: int
    wall_s: float
    model_s: float
    overhead_s: float
    nfe: int
    rows: int
    iterations: int
    accepted: int
    drafted: int
    exact: bool
    stop_reason: str
    accept_lengths: list[int] = field(default_factory=list)  # accepted draft tokens per iteration

    def to_dict(self) -> dict:
        return asdict(self)


def _models(pair: Pair):
    if isinstance(pair, SelfPair):  # one network in both modes
        return pair.model, pair.model
    return pair.drafter, pair.verifier


def _draft_settings(pair: Pair, config: DecodeConfig) -> DraftSettings:
    temperature, top_k, top_p = config.drafter_sampling()
    verifier = pair.model if isinstance(pair, SelfPair) else pair.verifier
    vocab = getattr(getattr(verifier, "config", None), "vocab_size", None)  # stub models have no config
    return DraftSettings(config.k, config.threshold, config.unmask, temperature, top_k, top_p,
                         pair.profile.mask_token_id, pair.profile.shifted, vocab, pair.profile.forbidden)


def check_kind(kind: str, config: DecodeConfig) -> None:
    """What a pair kind (`self` or `two-model`) cannot run; checkable before any model loads."""
    if kind == "self":
        if config.schedule in SELF_SCHEDULES:
            check_self(config)
    elif config.schedule == "quadratic":
        raise ConfigError("schedule: quadratic needs a dual-mode (self) pair; use linear or packed")
    elif config.verify_order != "ltr":
        raise ConfigError("verify_order: confidence needs a dual-mode (self) pair")


def check_pair(pair: Pair, config: DecodeConfig) -> None:
    check_kind("self" if isinstance(pair, SelfPair) else "two-model", config)
    if isinstance(pair, SelfPair) and config.verify_order != "ltr" and not pair.profile.any_order:
        raise ConfigError(f"verify_order: confidence needs a model trained for any-order verification "
                          f"(profile any_order: true); {pair.name} is left-to-right only")


def _ar(run: Run, verifier: CachedModel, prompt: list[int]) -> None:
    logits = verifier.causal(prompt)
    while True:
        token = run.sample(logits[-1])
        run.iterations += 1
        if run.out.extend([token]):
            return
        logits = verifier.causal([token])


def _diffusion(run: Run, drafter: CachedModel, prompt: list[int], settings: DraftSettings) -> None:
    pending, last = prompt[:-1], prompt[-1]
    while True:
        draft = diffusion_draft(drafter, pending, last, min(run.config.block, run.out.remaining),
                                settings, run.generator)
        tokens = draft.tokens.tolist()
        run.iterations += 1
        if run.out.extend(tokens):
            return
        pending, last = [last] + tokens[:-1], tokens[-1]


def _speculative(run: Run, drafter: CachedModel, verifier: CachedModel, prompt: list[int],
                 settings: DraftSettings, packed: bool) -> None:
    block = run.config.block
    last = run.sample(verifier.causal(prompt)[-1])
    if run.out.extend([last]):
        return
    pending = list(prompt)  # verified tokens the drafter has not cached (all but `last`)
    if packed:
        draft = diffusion_draft(drafter, pending, last, block, settings, run.generator)
        pending = []
    while True:
        room = run.out.remaining - 1  # verification always adds one token
        if packed:  # verification is queued first; on a GPU the drafter runs beside it
            checked = Draft(draft.tokens[:room], draft.q[:room], draft.steps)
            logits = verify_call(verifier, last, checked)
            with side_stream(verifier.device):
                fresh = diffusion_draft(drafter, pending, last, block, settings, run.generator)
            emitted = settle(run, verifier, logits, checked)
        else:
            fresh = diffusion_draft(drafter, pending, last, min(block, room), settings, run.generator)
            emitted = verify_step(run, verifier, last, fresh)
        if fresh.steps:  # a drafting call cached the pending tokens
            pending = []
        pending += [last] + emitted[:-1]
        last = emitted[-1]
        if run.out.extend(emitted):
            return
        if packed:  # the slots the verifier just filled are dropped from the next draft
            keep = len(emitted)
            draft = Draft(fresh.tokens[keep:], fresh.q[keep:], fresh.steps)


@torch.inference_mode()
def decode(pair: Pair, prompt: str, config: DecodeConfig) -> DecodeResult:
    """Decode `prompt` with `pair` under `config`; timing excludes tokenization."""
    check_pair(pair, config)
    tok = pair.tokenizer
    ids = tok(prompt).input_ids
    if not ids:
        raise ConfigError("prompt: empty after tokenization")
    drafter_model, verifier_model = _models(pair)
    device = verifier_model.device
    generator = torch.Generator(device=device).manual_seed(config.seed)
    meter = Meter()
    run = Run(config, Output(tok, config.max_new_tokens, config.stop), generator, meter)
    settings = _draft_settings(pair, config)

    def drafter() -> CachedModel:
        return CachedModel(drafter_model, meter, pair.profile.prefix_cache, pair.profile.own_attention)

    sync(device)
    start = time.perf_counter()
    if config.schedule == "ar":
        _ar(run, CachedModel(verifier_model, meter), ids)
    elif config.schedule == "diffusion":
        _diffusion(run, drafter(), ids, settings)
    elif isinstance(pair, SelfPair) and config.verify_order != "ltr":
        anyorder_packed(run, CachedModel(pair.model, meter), ids, settings)
    elif isinstance(pair, SelfPair):
        self_speculative(run, CachedModel(pair.model, meter), ids, settings)
    else:
        _speculative(run, drafter(), CachedModel(verifier_model, meter), ids, settings,
                     packed=config.schedule == "packed")
    sync(device)
    wall = time.perf_counter() - start
    model_s = meter.model_s  # on a GPU this reads the CUDA events, all complete after the sync
    return DecodeResult(
        text=run.out.text(), token_ids=list(run.out.ids), new_tokens=len(run.out.ids), wall_s=wall,
        model_s=model_s, overhead_s=max(0.0, wall - model_s), nfe=meter.nfe, rows=meter.rows,
        iterations=run.iterations, accepted=run.accepted, drafted=run.drafted, exact=is_exact(config),
        stop_reason=run.out.stop_reason or "length", accept_lengths=run.accept_lengths,
    )
