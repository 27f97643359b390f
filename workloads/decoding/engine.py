"""`decode_batch(pair, prompts, config)`: prompts decoded together through one schedule, with
each row's measurements; `decode(pair, prompt, config)` is the batch of one.

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
from transformers import PreTrainedModel

from workloads.decoding.anyorder import anyorder_packed
from workloads.decoding.batch import Batch, run_rows
from workloads.decoding.calls import CachedModel, Meter, Network, side_stream, sync
from workloads.decoding.config import ConfigError, DecodeConfig, is_exact
from workloads.decoding.dflash import DFlashDrafter, DFlashNetwork, FeatureTap, chain_draft, is_dflash2
from workloads.decoding.drafting import Draft, DraftSettings, diffusion_draft
from workloads.decoding.kinds import check_kind, draft_width
from workloads.decoding.output import Output
from workloads.decoding.selfspec import self_speculative
from workloads.decoding.state import DecodeState
from workloads.decoding.verifying import verify_finish, verify_forward, verify_step
from workloads.models.pair import DFlashPair, Pair, SelfPair, kind_of, least_positions

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


def networks(pair: Pair) -> tuple[PreTrainedModel, PreTrainedModel]:
    """The (drafter, verifier) networks of `pair`; a dual-mode pair's one network is both."""
    if isinstance(pair, SelfPair):
        return pair.model, pair.model
    return pair.drafter, pair.verifier


def verifier_vocab(pair: Pair) -> int | None:
    """The verifier's vocabulary size, the ids proposals are over; None for a network
    without a config (test stubs), whose proposals keep the drafter's ids."""
    return getattr(getattr(networks(pair)[1], "config", None), "vocab_size", None)


def draft_settings(pair: Pair, config: DecodeConfig) -> DraftSettings:
    """How `pair` drafts under `config`."""
    temperature, top_k, top_p = config.drafter_sampling()
    return DraftSettings(steps=config.k, threshold=config.threshold, unmask=config.unmask,
                         temperature=temperature, top_k=top_k, top_p=top_p,
                         mask_token_id=pair.profile.mask_token_id, shifted=pair.profile.shifted,
                         vocab=verifier_vocab(pair), forbidden=pair.profile.forbidden)


def positions(pair: Pair) -> int | None:
    """The positions every network of `pair` has (the least `max_position_embeddings`); None
    for networks without a config (test stubs)."""
    return least_positions([getattr(getattr(net, "config", None), "max_position_embeddings", None)
                            for net in networks(pair)])


def check_fits(lengths: dict[str, int], max_new_tokens: int, limit: int | None) -> None:
    """Refuse a prompt (named by its key) whose token count and max_new_tokens pass `limit`,
    the model's positions: past them it decodes on positions it was never trained on,
    wrongly, slowly and without a word (this one line replaces the tokenizer's warning)."""
    for label, tokens in lengths.items() if limit is not None else ():
        if tokens + max_new_tokens > limit:
            raise ConfigError(f"{label}: {tokens} tokens + max_new_tokens {max_new_tokens} pass the model's "
                              f"{limit} positions (max_position_embeddings)")


def check_texts_fit(tokenizer, prompts: dict[str, str], max_new_tokens: int, limit: int | None) -> None:
    """`check_fits` on prompt texts, before any model loads."""
    if limit is not None:
        check_fits({label: len(tokenizer(text, verbose=False).input_ids) for label, text in prompts.items()},
                   max_new_tokens, limit)


def check_pair(pair: Pair, config: DecodeConfig) -> None:
    check_kind(kind_of(pair), config)
    if isinstance(pair, DFlashPair) and is_dflash2(pair.drafter) and config.schedule != "ar" and (
            config.threshold is not None or config.k != 1):
        raise ConfigError("steps: a DFlash 2 drafter proposes its candidate chain in one pass (steps 1, "
                          "no threshold)")
    if isinstance(pair, SelfPair) and config.verify_order != "ltr" and not pair.profile.any_order:
        raise ConfigError(f"verify_order: confidence needs a model trained for any-order verification "
                          f"(profile any_order: true); {pair.name} is left-to-right only")


def _ar(state: DecodeState, verifier: CachedModel, prompt: list[int]) -> None:
    logits = verifier.causal(prompt)
    while True:
        token = state.sample(logits[-1])
        state.iterations += 1
        if state.out.extend([token]):
            return
        logits = verifier.causal([token])


def _diffusion(state: DecodeState, drafter: CachedModel, prompt: list[int], settings: DraftSettings) -> None:
    pending, last = prompt[:-1], prompt[-1]
    while True:
        draft = diffusion_draft(drafter, pending, last, min(state.config.block, state.out.remaining),
                                settings, state.generator)
        tokens = draft.tokens.tolist()
        state.iterations += 1
        if state.out.extend(tokens):
            return
        pending, last = [last] + tokens[:-1], tokens[-1]


def _speculative(state: DecodeState, drafter: CachedModel | DFlashDrafter, verifier: CachedModel,
                 prompt: list[int], settings: DraftSettings, packed: bool, block: int,
                 tapped: bool = False, drafting=diffusion_draft) -> None:
    """Two-model linear or packed; `block` tokens drafted per iteration. When `tapped`, the
    drafter is a DFlashDrafter fed the verifier's features of every verified row (and a
    DFlash 2 drafter drafts with `chain_draft`)."""

    def verified(rows: int) -> None:  # a DFlash drafter's context: the verifier's rows now verified
        if tapped:
            drafter.add(verifier.features[:rows])

    last = state.sample(verifier.causal(prompt)[-1])
    verified(len(prompt))
    if state.out.extend([last]):
        return
    pending = list(prompt)  # verified tokens the drafter has not cached (all but `last`)
    if packed:
        draft = drafting(drafter, pending, last, block, settings, state.generator)
        pending = []
    while True:
        room = state.out.remaining - 1  # a recovered or bonus token follows the accepted drafts
        if packed:  # the verifier's forward pass is queued first; on a GPU the drafter runs beside it
            draft = Draft(draft.tokens[:room], draft.q[:room], draft.steps)
            logits = verify_forward(verifier, last, draft)
            with side_stream(verifier.device):
                fresh = drafting(drafter, pending, last, block, settings, state.generator)
            emitted = verify_finish(state, verifier, logits, draft)
        else:
            fresh = drafting(drafter, pending, last, min(block, room), settings, state.generator)
            emitted = verify_step(state, verifier, last, fresh)
        verified(len(emitted))  # rows [last, accepted drafts]
        if fresh.steps:  # a drafting call cached the pending tokens
            pending = []
        pending += [last] + emitted[:-1]
        last = emitted[-1]
        if state.out.extend(emitted):
            return
        if packed:  # the slots the verifier just filled are dropped from the next draft
            keep = len(emitted)
            draft = Draft(fresh.tokens[keep:], fresh.q[keep:], fresh.steps)


@dataclass
class BatchResult:
    """One batch: each row's result (`wall_s` its completion time from the batch's start),
    the batch's wall time, its forward passes and the token rows they evaluated (padding
    included)."""

    results: list[DecodeResult]
    wall_s: float
    nfe: int
    rows: int


def _row_program(pair: Pair, config: DecodeConfig, state: DecodeState, ids: list[int], row: int,
                 nets: dict):
    """The schedule loop of one row, over that row's views of the batch's networks."""
    settings = draft_settings(pair, config)
    verifier = CachedModel(nets["verifier"].model, state.meter, network=nets["verifier"], row=row)
    if config.schedule == "ar":
        return lambda: _ar(state, verifier, ids)
    if isinstance(pair, SelfPair) and config.verify_order != "ltr":
        return lambda: anyorder_packed(state, verifier, ids, settings)
    if isinstance(pair, SelfPair):
        return lambda: self_speculative(state, verifier, ids, settings)
    drafter_net = nets["drafter"]
    if isinstance(pair, DFlashPair):
        drafter = DFlashDrafter(pair.drafter, pair.verifier, state.meter, network=drafter_net, row=row)
        return lambda: _speculative(state, drafter, verifier, ids, settings, config.schedule == "packed",
                                    draft_width("dflash", config.block), True,
                                    chain_draft if is_dflash2(pair.drafter) else diffusion_draft)
    drafter = CachedModel(drafter_net.model, state.meter, network=drafter_net, row=row)
    if config.schedule == "diffusion":
        return lambda: _diffusion(state, drafter, ids, settings)
    return lambda: _speculative(state, drafter, verifier, ids, settings, config.schedule == "packed",
                                config.block)


def _networks(pair: Pair, config: DecodeConfig, batch: Batch) -> dict:
    """The networks the rows of `batch` share under `config`, by role."""
    drafter_model, verifier_model = networks(pair)
    nets = {"verifier": Network(verifier_model, batch)}
    if isinstance(pair, SelfPair) or config.schedule == "ar":
        return nets
    if isinstance(pair, DFlashPair):
        nets["drafter"] = DFlashNetwork(pair.drafter, verifier_model, batch)
        nets["verifier"].tap = FeatureTap(verifier_model, pair.drafter.target_layer_ids)
    else:
        nets["drafter"] = Network(drafter_model, batch, pair.profile.prefix_cache, pair.profile.own_attention)
    return nets


@torch.inference_mode()
def decode_batch(pair: Pair, prompts: list[str], config: DecodeConfig,
                 seeds: list[int] | None = None) -> BatchResult:
    """Decode `prompts` together with `pair` under `config`, row i sampling from its own
    generator seeded `seeds[i]` (default: config.seed); timing excludes tokenization."""
    check_pair(pair, config)
    if len(prompts) > 1 and isinstance(pair, SelfPair) and config.verify_order != "ltr":
        raise ConfigError("batch_size: verify_order: confidence (any-order Packed-SS) decodes one prompt at "
                          "a time")
    tok = pair.tokenizer
    encoded = [tok(p, verbose=False).input_ids for p in prompts]
    check_fits({f"prompt {i + 1}": len(ids) for i, ids in enumerate(encoded)}, config.max_new_tokens,
               positions(pair))
    if not all(encoded):
        raise ConfigError("prompt: empty after tokenization")
    seeds = seeds or [config.seed] * len(prompts)
    device = networks(pair)[1].device
    batch = Batch(len(prompts))
    nets = _networks(pair, config, batch)
    states = [DecodeState(config, Output(tok, config.max_new_tokens, config.stop),
                          torch.Generator(device=device).manual_seed(seed), Meter()) for seed in seeds]
    finished = [0.0] * len(prompts)

    def row(i: int):
        program = _row_program(pair, config, states[i], encoded[i], i, nets)

        def run() -> None:
            program()  # its last tokens were read on the host: the row is complete
            finished[i] = time.perf_counter() - start
        return run

    programs = [row(i) for i in range(len(prompts))]
    sync(device)
    start = time.perf_counter()
    try:
        run_rows(batch, programs, list(nets.values()))
    finally:
        if getattr(nets["verifier"], "tap", None) is not None:
            nets["verifier"].tap.close()
    sync(device)
    wall = time.perf_counter() - start
    return BatchResult([_result(s, config, finished[i]) for i, s in enumerate(states)], wall,
                       sum(n.calls for n in nets.values()), sum(n.rows for n in nets.values()))


def _result(state: DecodeState, config: DecodeConfig, wall: float) -> DecodeResult:
    model_s = state.meter.model_s  # on a GPU this reads the CUDA events, all complete after the sync
    return DecodeResult(
        text=state.out.text(), token_ids=list(state.out.ids), new_tokens=len(state.out.ids), wall_s=wall,
        model_s=model_s, overhead_s=max(0.0, wall - model_s), nfe=state.meter.nfe, rows=state.meter.rows,
        iterations=state.iterations, accepted=state.accepted, drafted=state.drafted, exact=is_exact(config),
        stop_reason=state.out.stop_reason or "length", accept_lengths=state.accept_lengths,
    )


def decode(pair: Pair, prompt: str, config: DecodeConfig) -> DecodeResult:
    """Decode `prompt` with `pair` under `config`: the batch of one."""
    return decode_batch(pair, [prompt], config).results[0]
