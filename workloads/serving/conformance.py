"""One configuration in both engines, prompt by prompt: specsweep's and a vLLM server's.

A pair's drafter served by vLLM with `num_speculative_tokens` = W decodes as specsweep's
`linear` K = 1 lossless at the block that drafts W (ServingConfig.decode_config). At
temperature 0 both then emit the verifier's greedy tokens, and per prompt both count the same
iterations (vLLM's drafts), drafted tokens and accepted tokens. A prompt where any of these
differ shows the engines decoding that configuration differently.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from workloads.decoding import DecodeConfig, decode
from workloads.serving.config import ServingConfig, ServingError
from workloads.serving.load import serve
from workloads.serving.ngram import replay
from workloads.serving.vllm import EngineSettings, VllmServer, supervised


@dataclass(frozen=True)
class Decoded:
    """What one engine did with one prompt."""

    token_ids: tuple[int, ...]
    iterations: int
    drafted: int
    accepted: int

    @property
    def acceptance(self) -> tuple[int, int, int]:
        return self.iterations, self.drafted, self.accepted

    @classmethod
    def of(cls, record) -> Decoded:
        """From a decode's result, a served request's record or a logged record (a mapping)."""
        get = record.get if isinstance(record, dict) else lambda name: getattr(record, name)
        return cls(tuple(get("token_ids")), get("iterations"), get("drafted"), get("accepted"))


@dataclass(frozen=True)
class PromptCheck:
    """One prompt: the reference (specsweep's engine, or a sweep's record) and vLLM."""

    label: str  # "prompt 3", or "prompts 4-7" for a load counted as one
    reference: Decoded
    vllm: Decoded

    @property
    def same_tokens(self) -> bool:
        return self.reference.token_ids == self.vllm.token_ids

    @property
    def same_acceptance(self) -> bool:
        return self.reference.acceptance == self.vllm.acceptance

    def diff(self) -> str:
        """One line: where the tokens part and the counters that differ (reference / vllm)."""
        ours, theirs = self.reference, self.vllm
        parts = []
        if not self.same_tokens:
            at = next((i for i, (a, b) in enumerate(zip(ours.token_ids, theirs.token_ids)) if a != b),
                      min(len(ours.token_ids), len(theirs.token_ids)))
            parts.append(f"tokens part at {at} ({len(ours.token_ids)} / {len(theirs.token_ids)} tokens)")
        for name in ("iterations", "drafted", "accepted"):
            if getattr(ours, name) != getattr(theirs, name):
                parts.append(f"{name} {getattr(ours, name)} / {getattr(theirs, name)}")
        return f"{self.label}: " + ("; ".join(parts) or "same")


@dataclass(frozen=True)
class Conformance:
    """The prompts of one check, and what vLLM's plugin found and did (`kernel_check`);
    `reference` names what vLLM is held to."""

    config: ServingConfig
    prompts: tuple[PromptCheck, ...]
    kernel_check: str
    reference: str = "specsweep"

    @property
    def passed(self) -> bool:
        return all(p.same_tokens and p.same_acceptance for p in self.prompts)

    def summary(self) -> dict:
        """What an export keeps of its check."""
        n = len(self.prompts)
        return {"passed": self.passed, "against": self.reference, "compared": n,
                "tokens_identical": sum(p.same_tokens for p in self.prompts),
                "counters_identical": sum(p.same_acceptance for p in self.prompts),
                "kernel_check": self.kernel_check}

    def lines(self) -> list[str]:
        """A summary line per measure, then a diff line per prompt that differs (specsweep / vllm)."""
        n = len(self.prompts)
        unit = "loads" if self.prompts and self.prompts[0].label.startswith("prompts ") else "prompts"
        c = self.config
        rate = {side: f"{sum(getattr(p, side).accepted for p in self.prompts)}/"
                      f"{sum(getattr(p, side).drafted for p in self.prompts)}"
                for side in ("reference", "vllm")}
        out = [f"conformance of {c.method} num_speculative_tokens={c.num_speculative_tokens}, greedy, "
               f"{c.max_new_tokens} new tokens: {'PASS' if self.passed else 'FAIL'}",
               f"  greedy tokens identical: {sum(p.same_tokens for p in self.prompts)}/{n} {unit}",
               f"  drafts, drafted, accepted identical: {sum(p.same_acceptance for p in self.prompts)}/{n} "
               f"{unit} (accepted/drafted: {self.reference} {rate['reference']}, vllm {rate['vllm']})",
               f"  {self.kernel_check}"]
        differing = [p for p in self.prompts if not (p.same_tokens and p.same_acceptance)]
        if differing:
            out.append(f"  per prompt ({self.reference} / vllm):")
            out += [f"    {p.diff()}" for p in differing]
        return out


def served(server: VllmServer, ids: list[list[int]], config: ServingConfig) -> list[Decoded]:
    """Each prompt (token ids) served alone on `server` (so each has its own counters), greedy.
    The drafts must have been checked: a check where vLLM drafted nothing proves nothing."""
    if config.temperature != 0:
        raise ServingError("temperature: a conformance check compares greedy tokens; use temperature 0")
    alone, _ = serve(server, ids, dataclasses.replace(config, concurrency=1))
    out = [Decoded.of(one.record()) for one in alone]
    if not any(d.drafted for d in out):
        raise ServingError(f"method: vLLM drafted no tokens with {config.method}; is the server speculating?")
    return out


def compare(references: list[Decoded], vllm: list[Decoded], config: ServingConfig, kernel_check: str,
            reference: str = "specsweep", labels: list[str] | None = None) -> Conformance:
    labels = labels or [f"prompt {i}" for i in range(len(references))]
    rows = tuple(PromptCheck(*row) for row in zip(labels, references, vllm))
    return Conformance(config, rows, kernel_check, reference)


def reference(pair, texts: list[str], config: ServingConfig) -> list[Decoded]:
    """What vLLM must match, from specsweep: its engine under config.decode_config, or for
    `ngram` the verifier's greedy output with vLLM's n-gram drafting replayed over it."""
    if config.method != "ngram":
        ours = config.decode_config(pair.kind)
        return [Decoded.of(decode(pair, text, ours)) for text in texts]
    greedy = DecodeConfig(schedule="ar", max_new_tokens=config.max_new_tokens, seed=config.seed,
                          stop=config.stop)
    out = []
    for text in texts:
        tokens = decode(pair, text, greedy).token_ids
        lookup = replay(pair.tokenizer(text, verbose=False).input_ids, tokens, config.num_speculative_tokens)
        out.append(Decoded(tuple(tokens), lookup.iterations, lookup.drafted, lookup.accepted))
    return out


def check(pair, server: VllmServer, texts: list[str], config: ServingConfig) -> Conformance:
    """The `reference` of `texts` on the loaded `pair`, and the same prompts served one at a
    time on `server` (started with `config`'s speculative settings, supervised: started again
    once if it is lost under the load); compared prompt by prompt."""
    ids = [pair.tokenizer(t, verbose=False).input_ids for t in texts]
    theirs = supervised(server, lambda: served(server, ids, config))
    return compare(reference(pair, texts, config), theirs, config, server.kernel_check())


def run(pair, texts: list[str], config: ServingConfig, settings: EngineSettings, logs: Path, say
        ) -> Conformance:
    """`check` on a server started here with `settings` (logging under `logs`), stopped after."""
    server = VllmServer(settings, logs)
    say(f"starting vLLM: {settings.model} with {settings.speculative}")
    try:
        say(f"vLLM serving after {server.start():.0f} s; {len(texts)} prompts in both engines")
        return check(pair, server, texts, config)
    finally:
        server.stop()


def reference_method(pair, method: str | None, draft_tokens: int) -> str:
    """The vLLM method `conform` holds to specsweep's replay on `pair` (a name or spec): `method`,
    or the pair's drafter's method by default; ServingError naming the option when the pair has
    no reference for it or cannot draft `draft_tokens`."""
    from workloads.models.families import pair_kind
    from workloads.models.pairspec import check_drafts

    kind = pair_kind(pair)
    if method not in (None, "ngram", kind.serving_method):
        raise ServingError(f"--method: {method} has no reference on a {kind.name} pair; use ngram"
                           + (f" or {kind.serving_method}" if kind.serving_method else ""))
    method = method or kind.serving_method
    if method is None:
        raise ServingError(f"pair: {pair} is a {kind.name} pair, whose drafter vLLM does not serve; "
                           "use a DFlash, DFlash 2, DSpark, EAGLE-3 or autoregressive-drafter pair "
                           "(toy-dflash, toy-dflash2, toy-dspark, toy-eagle3, toy-draft) or --method ngram")
    if method != "ngram":
        try:
            check_drafts(pair, pair, draft_tokens, dflash=True)
        except ValueError as err:
            raise ServingError(f"--draft-tokens: {err}") from None
    return method
