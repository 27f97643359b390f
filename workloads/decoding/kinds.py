"""Pair kinds: what a pair of each kind runs and how its batch decodes; a small base and one
short class a kind. A pair carries its kind (`pair.kind`); the engine, the sweep space,
the spec, the benchmarks and the exports ask it, and nothing else tells pairs apart.

* `TwoModel`: a drafter and a verifier, two networks (paper 2610.31819): every schedule but
  `quadratic`, left to right; B tokens drafted per iteration.
* `DraftModel`: a two-model pair whose drafter is autoregressive (profile attention
  `causal`; vLLM's draft_model): `ar` and `linear`, B tokens drafted an iteration, one
  causal pass a token.
* `SelfSpec`: one dual-mode network (paper 2610.33379): every schedule; the speculative ones
  with B >= 2, drafting B − 1 tokens, and `packed` / `quadratic` draft inside the verify
  call, so in one step; any-order (confidence) verification on a model trained for it.
* `DFlash`: a target-conditioned drafter (arXiv 2602.06036) over its verifier: `ar`, `linear`
  and `packed` with B >= 2; its block is the anchor and B − 1 drafts (vLLM's
  num_speculative_tokens = B − 1), and it cannot draft alone (it reads the verifier's
  features).
* `DSpark`: DFlash's block pass whose rows all predict the next position, then a Markov
  chain drafting left to right: `ar` and `linear`, B drafts an iteration (vLLM's
  num_speculative_tokens = B).
* `Eagle3`: an EAGLE-3 drafter (arXiv 2503.01840) over its verifier: `ar` and `linear`, B
  tokens drafted an iteration as a chain, one pass a token, from three of the verifier's
  hidden states (vLLM's num_speculative_tokens = B).

The rules that need no weights (`check`) run before any model loads; `check_loaded` adds
those that depend on the loaded networks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from workloads.decoding.anyorder import anyorder_packed
from workloads.decoding.config import SCHEDULES, SPECULATIVE, ConfigError, DecodeConfig
from workloads.decoding.dflash import DFlashNetwork, FeatureTap, is_dflash2
from workloads.decoding.drafters import (
    CausalDrafter,
    ChainDrafter,
    Eagle3Drafter,
    FeatureDrafter,
    FullAttentionDrafter,
    SelfDrafter,
    SparkDrafter,
    StandaloneDrafter,
)
from workloads.decoding.drafting import DraftSettings
from workloads.decoding.eagle3 import Eagle3Network
from workloads.decoding.network import Network
from workloads.decoding.rows import Rows
from workloads.decoding.schedules import ar, diffusion, speculative
from workloads.decoding.selfspec import one_call

Program = Callable[[], None]  # the batch's schedule loop, run to its end


class Pair(Protocol):
    """A loaded pair as decoding sees it (`workloads.models.pair` builds them; decoding never
    loads): its networks are its kind's to name (`kind.models`)."""

    name: str
    tokenizer: object  # the verifier's PreTrainedTokenizerBase
    profile: object  # its models.profiles.DiffusionProfile
    kind: PairKind


class PairKind:
    """What pairs of one kind run: the `schedules`; the speculative ones need `min_block`
    (else the one-line `small_block` error); `serving_method` is vLLM's name for its drafter's
    method and `sglang_algorithm` SGLang's (None: that engine has none)."""

    name: str
    schedules: tuple[str, ...]
    min_block = 1
    small_block = ""
    serving_method: str | None = None
    chain = ""  # drafting that has no K or τ to choose: why (steps must be 1, no threshold)
    sglang_algorithm: str | None = None  # SGLang's name for its drafter's method (None: none)

    @property
    def serving_methods(self) -> tuple[str, ...]:
        """The vLLM methods its pairs can be served with: none and n-gram lookup (they need
        the verifier only), and its own drafter's method where vLLM has one."""
        return ("none", "ngram") + ((self.serving_method,) if self.serving_method else ())

    def __repr__(self) -> str:
        return self.name

    def runs(self, schedule: str) -> bool:
        return schedule in self.schedules

    @property
    def speculative(self) -> tuple[str, ...]:
        """The schedules it runs that draft and verify."""
        return tuple(s for s in SPECULATIVE if self.runs(s))

    def draft_width(self, block: int) -> int:
        """W, the tokens drafted per iteration at block size B."""
        return block

    def block_for(self, width: int) -> int:
        """B, the block size that drafts `width` tokens per iteration (inverse of draft_width)."""
        return next(b for b in range(self.min_block, width + 2) if self.draft_width(b) == width)

    def one_step(self, schedule: str) -> bool:
        """The draft comes out of the verify call: no K or τ to choose."""
        return False

    def check(self, config: DecodeConfig) -> None:
        """Raise ConfigError naming the setting this kind cannot run."""
        if not self.runs(config.schedule):
            raise ConfigError(self.refusal(config.schedule))
        if config.verify_order != "ltr":
            raise ConfigError("verify_order: confidence needs a dual-mode (self) pair")
        if config.schedule in SPECULATIVE and config.block < self.min_block:
            raise ConfigError(self.small_block)
        if self.chain and config.schedule != "ar" and (config.threshold is not None or config.k != 1):
            raise ConfigError(f"steps: {self.chain} (steps 1, no threshold)")

    def refusal(self, schedule: str) -> str:
        return f"schedule: {schedule} cannot run on a {self.name} pair; use {', '.join(self.schedules)}"

    def check_loaded(self, pair: Pair, config: DecodeConfig, rows: int) -> None:
        """`check`, and the rules that depend on the loaded pair and the batch's `rows`."""
        self.check(config)

    def models(self, pair: Pair) -> tuple:
        """The (drafter, verifier) networks of `pair`."""
        return pair.drafter, pair.verifier

    def networks(self, pair: Pair, config: DecodeConfig, rows: int, slack: float | None) -> dict:
        """The networks, by role, the `rows` of a batch share under `config` (`slack`:
        slots.SlotCache's)."""
        return {"verifier": Network(self.models(pair)[1], rows, slack)}

    def program(self, pair: Pair, config: DecodeConfig, settings: DraftSettings, rows: Rows,
                prompts: list[list[int]], nets: dict) -> Program:
        """The batch's schedule loop over every row at once."""
        if config.schedule == "ar":
            return lambda: ar(rows, nets["verifier"], prompts)
        return self.drafted(pair, config, settings, rows, prompts, nets)

    def drafted(self, pair: Pair, config: DecodeConfig, settings: DraftSettings, rows: Rows,
                prompts: list[list[int]], nets: dict) -> Program:
        """The loop of a schedule that drafts."""
        raise NotImplementedError


class TwoModel(PairKind):
    """A drafter network and a verifier network (paper 2610.31819)."""

    name = "two-model"
    schedules = tuple(s for s in SCHEDULES if s != "quadratic")

    def refusal(self, schedule: str) -> str:
        return f"schedule: {schedule} needs a dual-mode (self) pair; use linear or packed"

    def networks(self, pair: Pair, config: DecodeConfig, rows: int, slack: float | None) -> dict:
        nets = super().networks(pair, config, rows, slack)
        if config.schedule != "ar":
            profile = pair.profile
            nets["drafter"] = Network(pair.drafter, rows, slack, profile.prefix_cache, profile.own_attention)
        return nets

    def drafted(self, pair, config, settings, rows, prompts, nets) -> Program:
        network = nets["drafter"]
        drafter = (StandaloneDrafter if network.prefix_cache else FullAttentionDrafter)(network)
        if config.schedule == "diffusion":
            return lambda: diffusion(rows, drafter, prompts, settings)
        return lambda: speculative(rows, drafter, nets["verifier"], prompts, settings,
                                   self.draft_width(config.block))


class DraftModel(TwoModel):
    """A two-model pair whose drafter is an autoregressive LM (vLLM's draft_model)."""

    name = "draft-model"
    schedules = ("ar", "linear")
    serving_method = "draft_model"
    sglang_algorithm = "STANDALONE"

    def refusal(self, schedule: str) -> str:
        return f"schedule: {schedule} cannot run with an autoregressive drafter; use ar or linear"

    chain = "an autoregressive drafter drafts a token a pass"

    def drafted(self, pair, config, settings, rows, prompts, nets) -> Program:
        return lambda: speculative(rows, CausalDrafter(nets["drafter"]), nets["verifier"], prompts, settings,
                                   self.draft_width(config.block))


class SelfSpec(PairKind):
    """One dual-mode network that drafts in its diffusion mode and verifies in its AR mode
    (paper 2610.33379); a region holds the last verified token and B − 1 drafts."""

    name = "self"
    schedules = SCHEDULES
    min_block = 2
    small_block = "block: a dual-mode pair needs block >= 2 (the draft holds block - 1 tokens)"

    def draft_width(self, block: int) -> int:
        return block - 1

    def one_step(self, schedule: str) -> bool:
        return schedule in ("packed", "quadratic")

    def check(self, config: DecodeConfig) -> None:
        if config.verify_order == "ltr":
            super().check(config)
        elif config.block < self.min_block:
            raise ConfigError(self.small_block)
        if self.one_step(config.schedule) and (config.threshold is not None or config.k != 1):
            raise ConfigError(f"steps: {config.schedule} on a dual-mode pair drafts inside the verify call, "
                              "so one step only (steps 1, no threshold)")

    def check_loaded(self, pair: Pair, config: DecodeConfig, rows: int) -> None:
        self.check(config)
        if config.verify_order != "ltr" and not pair.profile.any_order:
            raise ConfigError(f"verify_order: confidence needs a model trained for any-order verification "
                              f"(profile any_order: true); {pair.name} is left-to-right only")
        if config.verify_order != "ltr" and rows > 1:
            raise ConfigError("batch_size: verify_order: confidence (any-order Packed-SS) decodes one prompt "
                              "at a time")

    def models(self, pair: Pair) -> tuple:
        return pair.model, pair.model

    def drafted(self, pair, config, settings, rows, prompts, nets) -> Program:
        model, width = nets["verifier"], self.draft_width(config.block)
        if config.schedule == "diffusion":  # the diffusion mode alone
            return lambda: diffusion(rows, StandaloneDrafter(model), prompts, settings)
        if config.verify_order != "ltr":
            return lambda: anyorder_packed(rows, model, prompts, settings, width)
        if config.schedule in ("packed", "quadratic"):
            quadratic = config.schedule == "quadratic"
            return lambda: one_call(rows, model, prompts, settings, width, quadratic)
        return lambda: speculative(rows, SelfDrafter(model), model, prompts, settings, width)


class DFlash(PairKind):
    """A target-conditioned block drafter over its verifier (DFlash, arXiv 2602.06036)."""

    name = "dflash"
    schedules = ("ar", "linear", "packed")
    min_block = 2
    serving_method = "dflash"
    sglang_algorithm = "DFLASH"
    small_block = "block: a DFlash pair needs block >= 2 (the anchor and at least one draft)"

    def draft_width(self, block: int) -> int:
        return block - 1

    def refusal(self, schedule: str) -> str:
        return (f"schedule: {schedule} cannot run on a DFlash pair (its drafter needs the verifier's hidden "
                f"states); use {', '.join(self.schedules)}")

    def check_loaded(self, pair: Pair, config: DecodeConfig, rows: int) -> None:
        self.check(config)
        if is_dflash2(pair.drafter) and config.schedule != "ar" and (config.threshold is not None
                                                                     or config.k != 1):
            raise ConfigError("steps: a DFlash 2 drafter proposes its candidate chain in one pass (steps 1, "
                              "no threshold)")

    def networks(self, pair: Pair, config: DecodeConfig, rows: int, slack: float | None) -> dict:
        nets = super().networks(pair, config, rows, slack)
        if config.schedule != "ar":
            nets["drafter"] = DFlashNetwork(pair.drafter, pair.verifier, rows, slack)
            nets["verifier"].tap = FeatureTap(pair.verifier, pair.drafter.target_layer_ids)
        return nets

    def drafted(self, pair, config, settings, rows, prompts, nets) -> Program:
        drafter = (ChainDrafter if is_dflash2(pair.drafter) else FeatureDrafter)(nets["drafter"])
        return lambda: speculative(rows, drafter, nets["verifier"], prompts, settings,
                                   self.draft_width(config.block))


class Eagle3(PairKind):
    """An EAGLE-3 drafter over its verifier (arXiv 2503.01840, as vLLM serves it)."""

    name = "eagle3"
    schedules = ("ar", "linear")
    serving_method = "eagle3"
    sglang_algorithm = "EAGLE3"

    def refusal(self, schedule: str) -> str:
        return (f"schedule: {schedule} cannot run on an EAGLE-3 pair (its drafter needs the verifier's "
                f"hidden states); use {', '.join(self.schedules)}")

    chain = "an EAGLE-3 drafter drafts its chain a token a pass"

    def networks(self, pair: Pair, config: DecodeConfig, rows: int, slack: float | None) -> dict:
        nets = super().networks(pair, config, rows, slack)
        if config.schedule != "ar":
            nets["drafter"] = Eagle3Network(pair.drafter, pair.verifier)
            nets["verifier"].tap = FeatureTap(pair.verifier, pair.drafter.tapped)
        return nets

    def drafted(self, pair, config, settings, rows, prompts, nets) -> Program:
        return lambda: speculative(rows, Eagle3Drafter(nets["drafter"]), nets["verifier"], prompts, settings,
                                   self.draft_width(config.block))


class DSpark(DFlash):
    """A DSpark drafter over its verifier: DFlash's block pass, then a Markov chain (dspark.py)."""

    name = "dspark"
    schedules = ("ar", "linear")
    min_block = 1
    small_block = ""
    serving_method = "dspark"
    sglang_algorithm = "DSPARK"
    chain = "a DSpark drafter drafts its block in one pass, then its Markov chain"

    def draft_width(self, block: int) -> int:
        return block

    def refusal(self, schedule: str) -> str:
        return (f"schedule: {schedule} cannot run on a DSpark pair (its drafter needs the verifier's hidden "
                f"states); use {', '.join(self.schedules)}")

    def check_loaded(self, pair: Pair, config: DecodeConfig, rows: int) -> None:
        self.check(config)

    def drafted(self, pair, config, settings, rows, prompts, nets) -> Program:
        return lambda: speculative(rows, SparkDrafter(nets["drafter"]), nets["verifier"], prompts, settings,
                                   self.draft_width(config.block))


TWO_MODEL, DRAFT_MODEL, SELF = TwoModel(), DraftModel(), SelfSpec()
DFLASH, DSPARK, EAGLE3 = DFlash(), DSpark(), Eagle3()
KINDS = {kind.name: kind for kind in (SELF, TWO_MODEL, DRAFT_MODEL, DFLASH, DSPARK, EAGLE3)}


def least_positions(found: list) -> int | None:
    """The least of the models' `max_position_embeddings` (None where a model has none)."""
    return min((n for n in found if isinstance(n, int)), default=None)
