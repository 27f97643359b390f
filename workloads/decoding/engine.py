"""`decode_batch(pair, prompts, config)`: prompts decoded together through one schedule, with
each row's measurements; `decode(pair, prompt, config)` is the batch of one.

The schedules are those of docs/glossary.md: `ar`, `diffusion`, `linear`, `packed` (schedules.py)
and, on a dual-mode pair, `quadratic` (selfspec.py) and any-order Packed-SS (anyorder.py).
Which of them a pair runs is its kind's (`pair.kind`, kinds.py); every schedule decodes the
batch's rows at once, as tensors (rows.py). This module checks the prompts, builds the
batch's networks and rows, runs its kind's program and measures it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from workloads.decoding.config import SPECULATIVE, ConfigError, DecodeConfig, is_exact
from workloads.decoding.drafting import DraftSettings
from workloads.decoding.kinds import Pair, least_positions
from workloads.decoding.network import sync
from workloads.decoding.rows import Rows

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


def verifier_vocab(pair: Pair) -> int | None:
    """The verifier's vocabulary size, the ids proposals are over; None for a network
    without a config (test stubs), whose proposals keep the drafter's ids."""
    return getattr(getattr(pair.kind.models(pair)[1], "config", None), "vocab_size", None)


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
                            for net in pair.kind.models(pair)])


def check_fits(lengths: dict[str, int], max_new_tokens: int, limit: int | None) -> None:
    """Refuse a prompt (named by its key) whose token count and max_new_tokens pass `limit`,
    the model's positions: past them it decodes on positions it was never trained on,
    wrongly, slowly and without a word (this one line replaces the tokenizer's warning)."""
    for label, tokens in lengths.items() if limit is not None else ():
        if tokens + max_new_tokens > limit:
            raise ConfigError(f"{label}: {tokens} tokens + max_new_tokens {max_new_tokens} pass the model's "
                              f"{limit} positions (max_position_embeddings)")


def check_texts_fit(tokenizer, prompts: dict[str, str], max_new_tokens: int, limit: int | None) -> None:
    """`check_fits` on prompt texts, before any model loads. A text longer than `limit` times
    the vocabulary's longest token (in characters) is refused before it is tokenised: it holds
    at least len / longest tokens, and tokenising megabytes takes minutes."""
    if limit is None:
        return
    longest = max(map(len, tokenizer.get_vocab()), default=1)
    for label, text in prompts.items():
        if len(text) > longest * limit:
            raise ConfigError(f"{label}: {len(text):,} characters (at least {len(text) // longest:,} tokens) "
                              f"pass the model's {limit} positions (max_position_embeddings)")
    check_fits({label: len(tokenizer(text, verbose=False).input_ids) for label, text in prompts.items()},
               max_new_tokens, limit)


@dataclass
class BatchResult:
    """One batch: each row's result (`wall_s` its completion time from the batch's start),
    the batch's wall time, its forward passes, the token rows they evaluated (padding
    included) and their time; `overhead_s` = wall − model time, the engine's host work."""

    results: list[DecodeResult]
    wall_s: float
    nfe: int
    rows: int
    model_s: float

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.wall_s - self.model_s)


@torch.inference_mode()
def decode_batch(pair: Pair, prompts: list[str], config: DecodeConfig, seeds: list[int] | None = None,
                 slack: float | None = None) -> BatchResult:
    """Decode `prompts` together with `pair` under `config`, row i sampling from its own
    generator seeded `seeds[i]` (default: config.seed); timing excludes tokenization.
    `slack`: the KV slot caches' spare room (slots.SlotCache; None: its default)."""
    pair.kind.check_loaded(pair, config, len(prompts))
    tok = pair.tokenizer
    encoded = [tok(p, verbose=False).input_ids for p in prompts]
    check_fits({f"prompt {i + 1}": len(ids) for i, ids in enumerate(encoded)}, config.max_new_tokens,
               positions(pair))
    if not all(encoded):
        raise ConfigError("prompt: empty after tokenization")
    seeds = seeds or [config.seed] * len(prompts)
    device = pair.kind.models(pair)[1].device
    nets = pair.kind.networks(pair, config, len(prompts), slack)
    generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
    rows = Rows(config, tok, generators, device)
    program = pair.kind.program(pair, config, draft_settings(pair, config), rows, encoded, nets)
    sync(device)
    rows.start = time.perf_counter()
    try:
        program()
    finally:
        for net in nets.values():
            net.close()
    sync(device)
    wall = time.perf_counter() - rows.start
    rows.meter.tally()
    rows.steps.tally()
    results = [_row_result(rows, i, config, float(rows.meter.model_s[i])) for i in range(len(prompts))]
    return BatchResult(results, wall, *_work(nets))


def _row_result(rows: Rows, i: int, config: DecodeConfig, model_s: float) -> DecodeResult:
    steps, wall = rows.steps, rows.finished_s[i]
    return DecodeResult(
        text=rows.output(i).text(), token_ids=rows.out[i, :rows.count[i]].tolist(),
        new_tokens=int(rows.count[i]), wall_s=wall, model_s=model_s, overhead_s=max(0.0, wall - model_s),
        nfe=int(rows.meter.nfe[i]),
        rows=int(rows.meter.rows[i]), iterations=int(steps.iterations[i]), accepted=int(steps.accepted[i]),
        drafted=int(steps.drafted[i]), exact=is_exact(config), stop_reason=rows.stop_reason[i] or "length",
        accept_lengths=steps.accept_lengths[i] if config.schedule in SPECULATIVE else [])


def _work(nets: dict) -> tuple[int, int, float]:
    """The batch's forward passes, token rows and model time, over its networks."""
    return (sum(n.work.nfe for n in nets.values()), sum(n.work.rows for n in nets.values()),
            sum(n.work.model_s for n in nets.values()))


def decode(pair: Pair, prompt: str, config: DecodeConfig) -> DecodeResult:
    """Decode `prompt` with `pair` under `config`: the batch of one."""
    return decode_batch(pair, [prompt], config).results[0]
