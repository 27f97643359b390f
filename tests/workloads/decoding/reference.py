"""The reference decoder: one prompt, one row, one plain loop per schedule of docs/glossary.md, the
oracle the engine (every row of a batch at once, workloads.decoding) is checked against,
token for token and counter for counter.

It shares only the primitives with the engine: the networks and their KV slots, the
acceptance rule (`verifying.accept`), the drafting steps (`scores`, `commit_mask`,
`proposals`, `candidates`) and sampling. Everything else is written out for a single row:
Python ints and lists, one call at a time, the row's own generator drawn in the order a
reader expects (the first token, then each draft's noise, then the verification's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from workloads.decoding.acceptance import draw
from workloads.decoding.config import DecodeConfig
from workloads.decoding.dflash import DFlashNetwork, FeatureTap, is_dflash2
from workloads.decoding.drafters import chain_width
from workloads.decoding.drafting import DraftSettings, candidates, commit_mask, proposals, scores
from workloads.decoding.engine import draft_settings
from workloads.decoding.layout import Call
from workloads.decoding.masks import causal, packed
from workloads.decoding.network import Network
from workloads.decoding.output import Output
from workloads.decoding.sampling import distribution, point_mass, sample
from workloads.decoding.verifying import accept


@dataclass
class Result:
    """What a decode emitted and counted: the fields the engine's DecodeResult checks against."""

    token_ids: list[int]
    accepted: int = 0
    drafted: int = 0
    iterations: int = 0
    nfe: int = 0
    rows: int = 0
    accept_lengths: list[int] = field(default_factory=list)
    stop_reason: str = "length"


@dataclass(frozen=True)
class Draft:
    tokens: torch.Tensor  # (W,) drafted ids
    q: torch.Tensor  # (W, V) the distribution each token was drawn from
    steps: int  # drafting calls made


class State:
    """One decode's output, counters and generator."""

    def __init__(self, config: DecodeConfig, tokenizer, seed: int):
        self.config, self.out = config, Output(tokenizer, config.max_new_tokens, config.stop)
        self.generator = torch.Generator().manual_seed(seed)
        self.result = Result([])

    def sample(self, logits: torch.Tensor) -> int:
        c = self.config
        return int(sample(logits[None], c.temperature, c.top_k, c.top_p,
                          lambda p: torch.empty_like(p).exponential_(generator=self.generator))[0])

    def count(self, rows: int) -> None:
        self.result.nfe += 1
        self.result.rows += rows


class Model:
    """One row's cached view of a network: `length` tokens cached. Without a prefix cache
    (full attention) it keeps the verified ids (`history`) and re-reads them every call."""

    def __init__(self, network: Network, state: State):
        self.network, self.state, self.history = network, state, []
        self.features = None  # the tapped verifier's features of its latest call (q, F)

    @property
    def length(self) -> int:
        return self.network.slots.length(0)

    def call(self, ids: list[int], among: torch.Tensor, positions: torch.Tensor, keep: int | None
             ) -> torch.Tensor:
        """Rows `ids` at `positions`, seeing the cache and `among` (q, q) each other; keeps the
        first `keep` (None: `keep` says how many, after the call). Returns logits (q, V)."""
        q = len(ids)
        kept = None if keep is None else np.array([keep if self.network.prefix_cache else 0])
        call = Call(torch.tensor([ids]), positions[None], among[None], kept, torch.tensor([q]))
        forward, commit = self.network.prepare(call)
        logits = forward()[0]
        commit()
        self.state.count(q)
        if self.network.tap is not None:
            self.features = self.network.tap.features[0]
        return logits

    def causal(self, ids: list[int], keep: int | None = -1) -> torch.Tensor:
        """Causal rows appended to the cache (all of them, or the first `keep`, as `call`): row
        i predicts token i + 1."""
        n = len(ids)
        positions = torch.arange(self.length, self.length + n)
        return self.call(ids, causal(n), positions, keep=n if keep == -1 else keep)

    def block(self, pending: list[int], last: int, canvas: torch.Tensor) -> torch.Tensor:
        """One drafting call: `pending` verified ids (cached), then [last, canvas], which sees
        the cache, the pending rows and itself (dropped). Returns the W + 1 block rows' logits."""
        canvas = canvas.tolist()
        if not self.network.prefix_cache:  # the whole sequence, every row seeing every other
            self.history += pending
            n, q = len(self.history), len(self.history) + 1 + len(canvas)
            return self.call(self.history + [last] + canvas, torch.ones(q, q, dtype=torch.bool),
                             torch.arange(q), keep=0)[n:]
        n, q = len(pending), len(pending) + 1 + len(canvas)
        among = causal(q)
        among[n:, n:] = True
        positions = torch.arange(self.length, self.length + q)
        return self.call(pending + [last] + canvas, among, positions, keep=n)[n:]

    def keep(self, n: int) -> None:
        """Keep the first n rows of the latest call (made with keep=None) in the cache."""
        self.network.slots.keep_first(np.array([n]))


def propose(logits: torch.Tensor, settings: DraftSettings, generator: torch.Generator
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A region's proposals q (m, V), candidates (m,) drawn from q and untempered logits."""
    proposal, untempered = proposals(logits, settings)
    drawn = candidates(proposal, settings,
                       lambda: torch.empty_like(proposal).exponential_(generator=generator))
    return proposal, drawn, untempered


def diffusion_draft(model, pending: list[int], last: int, width: int, settings: DraftSettings,
                    generator: torch.Generator) -> Draft:
    """`width` tokens after the prefix ending in `last` (K steps or τ); `pending`: verified
    tokens the drafter has not cached, cached by the first call."""
    tokens = torch.full((width,), settings.mask_token_id, dtype=torch.long)
    q, step = torch.zeros(0, 1), 0
    while bool((tokens == settings.mask_token_id).any()):
        proposal, drawn, logits = propose(model.block(pending, last, tokens), settings, generator)
        pending = []
        masked = tokens == settings.mask_token_id
        if settings.steps is not None and settings.steps - step == 1:
            chosen = masked
        else:
            probs = logits.softmax(-1)
            priority = scores(settings.unmask, probs, drawn, lambda: torch.rand(width, generator=generator))
            chosen = commit_mask(settings, masked[None], priority[None], probs.amax(-1)[None], step)[0]
        tokens = torch.where(chosen, drawn.cpu(), tokens)
        q = proposal if step == 0 else torch.where(chosen[:, None], proposal, q)
        step += 1
    return Draft(tokens, q, step)


class IdDrafter:
    """A drafter network of its own, reading token ids."""

    def __init__(self, model: Model):
        self.model = model

    def draft(self, pending, last, width, settings, generator) -> Draft:
        return diffusion_draft(self.model, pending, last, width, settings, generator)

    def verified(self, verifier: Model, rows: int) -> None:
        """Verified tokens reach it as `pending` ids."""


class DFlashDrafter:
    """A DFlash drafter: its context is the verifier's features of each verified row."""

    def __init__(self, network: DFlashNetwork, state: State):
        self.network, self.state, self.pending, self.hidden = network, state, [], None

    def verified(self, verifier: Model, rows: int) -> None:
        self.pending.append(verifier.features[:rows])

    def block(self, pending: list[int], last: int, canvas: torch.Tensor) -> torch.Tensor:
        context = torch.cat(self.pending) if self.pending else torch.zeros(0, self.network.width)
        assert context.shape[0] == len(pending)
        ids = torch.tensor([[last] + canvas.tolist()])
        forward, commit = self.network.prepare(context[None], torch.tensor([context.shape[0]]), ids,
                                               torch.tensor([ids.shape[1]]))
        logits, hidden = forward()
        commit()
        self.state.count(ids.shape[1])
        self.pending, self.hidden = [], hidden[0]
        return logits[0]

    def draft(self, pending, last, width, settings, generator) -> Draft:
        if is_dflash2(self.network.model):
            return chain_draft(self, pending, last, width, settings, generator)
        return diffusion_draft(self, pending, last, width, settings, generator)


def chain_draft(drafter: DFlashDrafter, pending, last, width, settings, generator) -> Draft:
    """DFlash 2: one block pass, then each slot's top-k candidates scored after the token
    chosen before it, s(c) = logit(c) + ⟨pred(t) ⊙ W h, succ(c)⟩, drawn from softmax(s / T)."""
    selector = drafter.network.model.candidate_selector
    canvas = torch.full((width,), settings.mask_token_id, dtype=torch.long)
    if width == 0:
        return Draft(canvas, torch.zeros(0, 1), 0)
    logits = drafter.block(pending, last, canvas)[1:].float()  # no id excluded, as vLLM selects
    unary, options = logits.topk(chain_width(selector.top_k, settings.top_k), dim=-1)
    states = selector.hidden_projection(drafter.hidden[1:].to(selector.hidden_projection.weight.dtype))
    successors = selector.successor_codebook(options)
    before, tokens, q = torch.tensor(last), [], torch.zeros_like(logits)
    for i in range(width):
        score = unary[i] + successors[i] @ (selector.predecessor_codebook(before) * states[i]).float()
        if point_mass(settings.temperature, settings.top_k):
            chosen = score.argmax()
            q[i, options[i, chosen]] = 1.0
        else:
            weights = distribution(score, settings.temperature)
            chosen = draw(weights, torch.empty_like(weights).exponential_(generator=generator))
            q[i, options[i]] = weights
        before = options[i, chosen]
        tokens.append(before)
    return Draft(torch.stack(tokens), q, 1)


def verify_logits(state: State, logits: torch.Tensor, draft: Draft) -> list[int]:
    """The acceptance rule on verifier logits (n + 1, V) over [last, draft]: the accepted
    drafts, then the recovered or bonus token."""
    n, generator = draft.tokens.shape[0], state.generator

    def draws(p: torch.Tensor):
        return torch.rand(n, generator=generator)[None], torch.empty_like(p).exponential_(generator=generator)

    accepted, token = accept(state.config, logits[None], draft.q[None], draft.tokens[None], torch.tensor([n]),
                             draws)
    accepted, token = int(accepted[0]), int(token[0])
    r = state.result
    r.iterations, r.drafted, r.accepted = r.iterations + 1, r.drafted + n, r.accepted + accepted
    r.accept_lengths.append(accepted)
    return draft.tokens[:accepted].tolist() + [token]


def verify_step(state: State, verifier: Model, last: int, draft: Draft) -> list[int]:
    """Verify `draft` after `last`: the cache keeps [last, accepted drafts]."""
    emitted = verify_logits(state, verifier.causal([last] + draft.tokens.tolist(), keep=None), draft)
    verifier.keep(len(emitted))
    return emitted


def ar(state: State, verifier: Model, prompt: list[int]) -> None:
    logits = verifier.causal(prompt)
    while True:
        token = state.sample(logits[-1])
        state.result.iterations += 1
        if state.out.extend([token]):
            return
        logits = verifier.causal([token])


def diffusion(state: State, drafter: Model, prompt: list[int], settings: DraftSettings) -> None:
    pending, last = prompt[:-1], prompt[-1]
    while True:
        width = min(state.config.block, state.out.remaining)
        draft = diffusion_draft(drafter, pending, last, width, settings, state.generator)
        tokens = draft.tokens.tolist()
        state.result.iterations += 1
        if state.out.extend(tokens):
            return
        pending, last = [last] + tokens[:-1], tokens[-1]


def speculative(state: State, drafter, verifier: Model, prompt: list[int], settings: DraftSettings,
                width: int) -> None:
    """`linear`, or `packed`: the draft verified at iteration t + 1 drafted from the prefix
    at the start of t, its first A_t slots dropped."""
    packed_ = state.config.schedule == "packed"
    last = state.sample(verifier.causal(prompt)[-1])
    drafter.verified(verifier, len(prompt))
    if state.out.extend([last]):
        return
    pending = list(prompt)
    if packed_:
        draft = drafter.draft(pending, last, width, settings, state.generator)
        pending = []
    while True:
        room = state.out.remaining - 1
        if packed_:
            draft = Draft(draft.tokens[:room], draft.q[:room], draft.steps)
            logits = verifier.causal([last] + draft.tokens.tolist(), keep=None)
            fresh = drafter.draft(pending, last, width, settings, state.generator)
            emitted = verify_logits(state, logits, draft)
            verifier.keep(len(emitted))
        else:
            fresh = drafter.draft(pending, last, min(width, room), settings, state.generator)
            emitted = verify_step(state, verifier, last, fresh)
        drafter.verified(verifier, len(emitted))
        if fresh.steps:
            pending = []
        pending += [last] + emitted[:-1]
        last = emitted[-1]
        if state.out.extend(emitted):
            return
        if packed_:
            keep = len(emitted)
            draft = Draft(fresh.tokens[keep:], fresh.q[keep:], fresh.steps)


def packed_call(model: Model, rows: list[int], regions: list[tuple[int, list[int]]], keep: int | None):
    """One self-speculative call: `rows` causal (the first `keep` kept, as Model.call), then
    per region (h, slots) [copy of rows[h], slots] seeing the first h rows and itself
    (dropped). Returns the rows' logits and each region's."""
    n, v = model.length, len(rows)
    ids, positions = list(rows), [torch.arange(n, n + v)]
    for h, slots in regions:
        ids += [rows[h]] + slots
        positions.append(torch.arange(n + h, n + h + len(slots) + 1))
    logits = model.call(ids, packed(v, [(h, len(slots) + 1) for h, slots in regions]), torch.cat(positions),
                        keep)
    out, start = [], v
    for _, slots in regions:
        out.append(logits[start:start + len(slots) + 1])
        start += len(slots) + 1
    return logits[:v], out


def proposal(state: State, logits: torch.Tensor, settings: DraftSettings) -> Draft:
    q, tokens, _ = propose(logits, settings, state.generator)
    return Draft(tokens, q, 1)


def self_speculative(state: State, model: Model, prompt: list[int], settings: DraftSettings, w: int) -> None:
    """Linear-SS, or Packed-SS / Quadratic-SS in one call an iteration (paper 2610.33379)."""
    if state.config.schedule == "linear":
        last = state.sample(model.causal(prompt)[-1])
        if state.out.extend([last]):
            return
        while True:
            width = min(w, state.out.remaining - 1)
            draft = diffusion_draft(model, [], last, width, settings, state.generator)
            emitted = verify_step(state, model, last, draft)
            last = emitted[-1]
            if state.out.extend(emitted):
                return
    quadratic, block, mask = state.config.schedule == "quadratic", w + 1, settings.mask_token_id
    if point_mass(state.config.temperature, state.config.top_k):  # the prompt and a region in one call
        logits, (region,) = packed_call(model, prompt, [(len(prompt) - 1, [mask] * (w + 1))], len(prompt))
        last = state.sample(logits[-1])
        draft = proposal(state, region[1:], settings)
    else:
        last = state.sample(model.causal(prompt)[-1])
        draft = diffusion_draft(model, [], last, w, settings, state.generator)
    if state.out.extend([last]):
        return
    while True:
        room = state.out.remaining - 1
        draft = Draft(draft.tokens[:room], draft.q[:room], 1)
        n = draft.tokens.shape[0]
        rows = [last] + draft.tokens.tolist() + [mask] * (w - n)
        regions = [(h, [mask] * block) for h in range(block)] if quadratic else [(0, [mask] * w)]
        logits, proposed = packed_call(model, rows, regions, None)
        emitted = verify_logits(state, logits[:n + 1], draft)
        model.keep(len(emitted))
        last = emitted[-1]
        if state.out.extend(emitted):
            return
        branch = proposed[len(emitted) - 1][1:] if quadratic else proposed[0][len(emitted):]
        draft = proposal(state, branch, settings)


@torch.inference_mode()
def reference_decode(pair, prompt: str, config: DecodeConfig, seed: int | None = None) -> Result:
    """Decode `prompt` alone with `pair` under `config` (left-to-right verification)."""
    pair.kind.check_loaded(pair, config, 1)
    state = State(config, pair.tokenizer, config.seed if seed is None else seed)
    ids, settings = pair.tokenizer(prompt).input_ids, draft_settings(pair, config)
    verifier = Model(Network(pair.kind.models(pair)[1], 1), state)
    kind, width = pair.kind.name, pair.kind.draft_width(config.block)
    if config.schedule == "ar":
        ar(state, verifier, ids)
    elif kind == "self" and config.schedule == "diffusion":  # the diffusion mode alone
        diffusion(state, verifier, ids, settings)
    elif kind == "self":
        self_speculative(state, verifier, ids, settings, width)
    elif kind == "dflash":
        verifier.network.tap = FeatureTap(pair.verifier, pair.drafter.target_layer_ids)
        try:
            drafter = DFlashDrafter(DFlashNetwork(pair.drafter, pair.verifier, 1), state)
            speculative(state, drafter, verifier, ids, settings, width)
        finally:
            verifier.network.close()
    else:
        p = pair.profile
        drafter = Model(Network(pair.drafter, 1, None, p.prefix_cache, p.own_attention), state)
        if config.schedule == "diffusion":
            diffusion(state, drafter, ids, settings)
        else:
            speculative(state, IdDrafter(drafter), verifier, ids, settings, width)
    result = state.result
    result.token_ids, result.stop_reason = list(state.out.ids), state.out.stop_reason or "length"
    return result
