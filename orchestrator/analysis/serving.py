"""What a serving engine needs to run an exported configuration of a served drafter as it
was measured.

vLLM (`speculative_config`) and SGLang (launch flags, where SGLang has the method) run a
drafter as one draft per verification, verified losslessly, drafting in the `linear` order:
after each verification, from the newest verified tokens. Their number of speculative tokens
is the pair kind's draft width (DFlash's B − 1: the block's first row is the anchor; the
chains' B). Anything else specsweep measured — K > 1, τ, lenient rules, the one-call-ahead
`packed` schedule, a DFlash 2 slot's candidates narrowed by a draft top-k — has no setting
there; the export says so instead of writing a setting that would decode differently.
DSpark's draft top-k is vLLM's `dspark_draft_topk` (SGLang's DSPARK has none: no SGLang
flags then).
"""

from __future__ import annotations

from orchestrator.engines import VLLM
from orchestrator.engines.vllm import unserved
from workloads.decoding.kinds import PairKind
from workloads.models.families import FAMILIES, family_of
from workloads.serving.sglang_flags import flags, settings

SGLANG = "sglang"  # the key of SGLang's launch flags under an export's `serving` (SGLang measures no trial)


def cpu_port_note(speculative: dict | None) -> str | None:
    """What serving `speculative` on vLLM's CPU build needs, where its drafter's family drafts
    in vLLM's V2 model runner only (DSpark, DFlash 2), which that build lacks; None otherwise."""
    if not speculative:
        return None
    ports = [f.cpu_port(speculative["method"], speculative.get("model")) for f in FAMILIES]
    family = next((port for port in ports if port), None)
    if family is None:
        return None
    return (f"vLLM's CPU build drafts {family} only with the project's vLLM plugin (pip install "
            "infra/vllm/plugin: its V1 port, as measured here on CPU); GPU builds draft it themselves")


def specsweep_only(config: dict, drafter: str | None = None) -> list[str]:
    """The settings of `config` (on `drafter`, a path or hub id) no serving engine has, as
    `name value` strings: each family's (a DFlash 2 slot's candidates, which vLLM reads from
    the checkpoint), then vLLM's rule (engines.vllm.unserved)."""
    return [item for family in FAMILIES for item in family.specsweep_only(config, drafter)] + unserved(config)


def drafter_serving(kind: PairKind, drafter: str, config: dict) -> dict:
    """{vllm: {speculative_config}, sglang: [flags]} for a drafter of `kind` (a served method)
    at config's block, with its family's own vLLM settings, or {specsweep_only: [...]} naming
    what no engine can set."""
    blocked = specsweep_only(config, drafter)
    if blocked:
        return {"specsweep_only": blocked,
                "note": "measured with settings vLLM and SGLang do not have; decode it with specsweep"}
    drafts = kind.draft_width(config["block"])
    family = family_of(kind)
    speculative = {"method": kind.serving_method, "model": drafter, "num_speculative_tokens": drafts,
                   **family.vllm_settings(kind, config)}
    out: dict = {VLLM.section: {"speculative_config": speculative}}
    if gap := family.sglang_gap(kind, config):
        out["sglang_note"] = gap
    elif kind.sglang_algorithm:
        out[SGLANG] = flags(settings(kind.sglang_algorithm, drafter, drafts))
    return out


def drafts_schedule(chosen: dict[int, dict]) -> dict | None:
    """vLLM's one `speculative_config` for configs chosen per batch size (size -> an export's
    serving settings): `num_speculative_tokens_per_batch_size` [(lo, hi, n), ...], each size
    covering the batch sizes above the previous one up to it (vLLM carries the last n above
    it; n = 0 where no speculation was chosen), `num_speculative_tokens` the largest n. None
    unless the sizes choose different n of one method and drafter, all of them servable."""
    settings = {}
    for size, serving in sorted(chosen.items()):
        if VLLM.section not in (serving or {}):
            return None
        settings[size] = serving[VLLM.section]["speculative_config"]  # None: no speculation
    drafting = [s for s in settings.values() if s is not None]
    base = {k: v for k, v in drafting[0].items() if k != "num_speculative_tokens"} if drafting else None
    drafts = [0 if s is None else s["num_speculative_tokens"] for s in settings.values()]
    if base is None or len(set(drafts)) == 1 or any(
            {k: v for k, v in s.items() if k != "num_speculative_tokens"} != base for s in drafting):
        return None
    sizes = list(settings)
    ranges = [[lo + 1, hi, n] for lo, hi, n in zip([0, *sizes[:-1]], sizes, drafts)]
    return {**base, "num_speculative_tokens": max(drafts), "num_speculative_tokens_per_batch_size": ranges}
