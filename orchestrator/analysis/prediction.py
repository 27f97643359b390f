"""The speed in vLLM of configurations vLLM has no setting for (K > 1, τ, lenient rules, packed):
the papers' throughput model (paper 2610.31819 Eq. 7), its costs measured in vLLM.

At concurrency c, an iteration that drafts W tokens in p drafter passes and accepts ᾱ of them
(mean_accept_len) emits 1 + ᾱ tokens and costs a_c + b_c·W + p·d_c seconds (a_c: an iteration
of the verifier alone; b_c: each draft token it also checks; d_c: one drafter pass). Without
speculation an iteration costs a_c and emits one token, so, in units of a_c,
  ratio_c = (1 + ᾱ) / (1 + b'_c·W + p·d'_c),   b'_c = b_c/a_c, d'_c = d_c/a_c,
  tokens/s_c = ratio_c · tokens/s of vLLM without speculation at c.
Calibrated per concurrency on a vLLM sweep of the pair, from each trial of the pair's drafter
(p = 1) and its `throughput_ratio`, measured against no speculation right beside it (so drift
between trials cancels): (1 + ᾱ)/ratio = 1 + d'_c + b'_c·W, a least-squares line over W.
specsweep measures ᾱ, W and p of a configuration: p = (1 + ᾱ)/tokens_per_nfe − 1, the
forward passes an iteration beyond the verifier's one.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from orchestrator.analysis.throughput import fit_line
from orchestrator.engines import engine_of


@dataclass(frozen=True)
class IterationCosts:
    """vLLM's costs of an iteration at one concurrency, in units of an unspeculative one, and
    its tokens/s without speculation there."""

    concurrency: int
    per_draft: float  # b'_c
    draft_pass: float  # d'_c
    none_tps: float

    def ratio(self, accept_len: float, width: int, passes: float) -> float:
        """ratio_c = (1 + ᾱ) / (1 + b'_c·W + p·d'_c)."""
        return (1 + accept_len) / (1 + self.per_draft * width + passes * self.draft_pass)

    def throughput(self, accept_len: float, width: int, passes: float) -> float:
        return self.ratio(accept_len, width, passes) * self.none_tps


def drafter_passes(accept_len: float, tokens_per_nfe: float) -> float:
    """p = (1 + ᾱ)/tokens_per_nfe − 1: forward passes per iteration beyond the verifier's one."""
    return max(0.0, (1 + accept_len) / tokens_per_nfe - 1)


def calibrate(trials: list[dict], method: str) -> dict[int, IterationCosts]:
    """IterationCosts per concurrency from vLLM trials ({method, num_speculative_tokens,
    concurrency, mean_accept_len, throughput_tps, throughput_ratio}): the line through those of
    `method`, and the mean tokens/s of every trial's control there (tokens/s / ratio); a
    concurrency without two widths of `method` is left out."""
    out = {}
    for c in sorted({t["concurrency"] for t in trials}):
        here = [t for t in trials if t["concurrency"] == c]
        drafting = [t for t in here if t["method"] == method]
        if len({t["num_speculative_tokens"] for t in drafting}) < 2:
            continue
        intercept, slope = fit_line([t["num_speculative_tokens"] for t in drafting],
                                    [(1 + t["mean_accept_len"]) / t["throughput_ratio"] for t in drafting])
        none = [t["throughput_tps"] / t["throughput_ratio"] for t in here]  # each trial's control
        out[c] = IterationCosts(c, slope, intercept - 1, sum(none) / len(none))
    return out


def validate(trials: list[dict], method: str) -> list[dict]:
    """Leave one out: each trial of `method` predicted from costs calibrated without it, with its
    own ᾱ and W (p = 1), against its measured ratio. One row per trial: concurrency, W,
    predicted and measured ratio, relative error."""
    rows = []
    for held in (t for t in trials if t["method"] == method):
        costs = calibrate([t for t in trials if t is not held], method).get(held["concurrency"])
        if costs is None:
            continue
        predicted = costs.ratio(held["mean_accept_len"], held["num_speculative_tokens"], 1.0)
        rows.append({"concurrency": held["concurrency"], "width": held["num_speculative_tokens"],
                     "predicted": predicted, "measured": held["throughput_ratio"],
                     "error": predicted / held["throughput_ratio"] - 1})
    return rows


def drafting(kind, config: dict, metrics: dict) -> tuple[int, float, float] | None:
    """(W, p, ᾱ) of a configuration specsweep measured on a pair of `kind` (decoding.kinds):
    W its draft width, p its drafter passes an iteration (K a block; under τ as many as it
    took, from the forward passes counted), ᾱ its mean_accept_len. None where it drafts
    nothing, was not counted, or was measured served (in vLLM itself: it needs no prediction)."""
    if engine_of(config).served or config["schedule"] == "ar" or not metrics.get("tokens_per_nfe"):
        return None
    alpha = metrics.get("mean_accept_len", 0.0)
    passes = config["steps"] if config.get("threshold") is None else drafter_passes(
        alpha, metrics["tokens_per_nfe"])
    return kind.draft_width(config["block"]), passes, alpha


def predicted(costs: dict[int, IterationCosts], errors: dict[int, float], width: int, passes: float,
              alpha: float) -> dict[int, dict]:
    """Per calibrated concurrency: predicted tokens/s and ratio, and the model's largest
    leave-one-out error there (`errors`)."""
    return {c: {"throughput_tps": round(cost.throughput(alpha, width, passes), 1),
                "throughput_ratio": round(cost.ratio(alpha, width, passes), 3),
                "validation_error": round(errors[c], 3) if c in errors else None}
            for c, cost in costs.items()}


def largest_errors(rows: list[dict]) -> dict[int, float]:
    """Concurrency -> the largest |error| of `validate`'s rows there."""
    out: dict[int, float] = {}
    for r in rows:
        out[r["concurrency"]] = max(out.get(r["concurrency"], 0.0), abs(r["error"]))
    return out


def vllm_trials(study) -> list[dict]:
    """The finished vLLM trials of a study, as analysis.prediction reads them."""
    out = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        config, metrics = t.user_attrs["config"], t.user_attrs.get("metrics", {})
        if engine_of(config).served and metrics.get("throughput_ratio"):
            out.append({**{k: config[k] for k in ("method", "num_speculative_tokens", "concurrency")},
                        **{k: metrics[k] for k in ("throughput_tps", "throughput_ratio")},
                        "mean_accept_len": metrics.get("mean_accept_len", 0.0)})
    return out


def load_predictor(study, sweep: str, option: str) -> Predictor:
    """A Predictor calibrated on `study`, the vLLM sweep `sweep`; ValueError naming `option`
    when it has no finished vLLM trial."""
    trials = vllm_trials(study)
    if not trials:
        raise ValueError(f"{option}: {sweep} has no finished vLLM trials")
    return Predictor(trials, sweep)


class Predictor:
    """Predicted vLLM speeds from one calibration sweep's trials: the model calibrated, and
    validated, once per drafter method, on first use."""

    def __init__(self, trials: list[dict], sweep: str):
        self.trials, self.sweep = trials, sweep
        self.models: dict[str, tuple] = {}  # method -> (its costs, their largest errors)

    def of(self, kind, config: dict, metrics: dict) -> dict[int, dict] | None:
        """`predicted` for a configuration specsweep measured on a pair of `kind`; None where
        it drafts nothing or vLLM serves no drafter of the kind."""
        found = drafting(kind, config, metrics)
        method = kind.serving_method
        if found is None or method is None:
            return None
        if method not in self.models:
            errors = largest_errors(validate(self.trials, method))
            self.models[method] = calibrate(self.trials, method), errors
        return predicted(*self.models[method], *found)


def predict_exports(written: list, predictor: Predictor, say) -> None:
    """Write into each exported config that vLLM has no setting for (`serving.specsweep_only`)
    its predicted vLLM speed per concurrency (`Predictor.of`), with the model's largest
    leave-one-out error there; marked predicted."""
    import yaml

    from orchestrator.analysis.export import is_export
    from orchestrator.files import write_yaml
    from workloads.models.families import pair_kind

    for path in filter(is_export, written):
        document = yaml.safe_load(path.read_text())
        if "specsweep_only" not in (document.get("serving") or {}):
            continue
        by_concurrency = predictor.of(pair_kind(document["pair"]), document["config"], document["metrics"])
        if by_concurrency is None:
            continue
        document["serving"]["predicted_vllm"] = {
            "predicted": True, "calibrated_on": predictor.sweep, "by_concurrency": by_concurrency,
            "note": "predicted, not measured: the throughput model with vLLM's costs from the calibration "
                    "sweep; validation_error is the model's largest leave-one-out error there"}
        figures = predicted_figures(by_concurrency)
        document["serve"] += f"; predicted in vLLM: {figures}"  # the first line says it too
        write_yaml(path, document)
        say(f"{path.name}: predicted in vLLM {figures}")


def predicted_figures(by_concurrency: dict[int, dict]) -> str:
    """`Predictor.of`'s figures in one line: per concurrency, tokens/s, ratio and the model's
    largest leave-one-out error there."""
    def error(p):
        return "" if p["validation_error"] is None else f", model error up to {p['validation_error']:.0%}"
    return ", ".join(f"c={c} {p['throughput_tps']:.0f} tok/s ({p['throughput_ratio']:.2f}x{error(p)})"
                     for c, p in by_concurrency.items())
