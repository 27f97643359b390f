"""The vLLM speed model (analysis.prediction) on stored sweeps: calibrated on a vLLM sweep of a
pair, checked by leaving each of its drafting trials out, and applied to a specsweep sweep's
frontier configurations that vLLM has no setting for."""

from __future__ import annotations

import optuna

from orchestrator.analysis.prediction import calibrate, drafter_passes, validate
from orchestrator.analysis.serving import specsweep_only


def vllm_trials(study) -> list[dict]:
    """The finished vLLM trials of a study, as analysis.prediction reads them."""
    out = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        config, metrics = t.user_attrs["config"], t.user_attrs.get("metrics", {})
        if config.get("engine") == "vllm" and metrics.get("throughput_ratio"):
            out.append({**{k: config[k] for k in ("method", "num_speculative_tokens", "concurrency")},
                        **{k: metrics[k] for k in ("throughput_tps", "throughput_ratio")},
                        "mean_accept_len": metrics.get("mean_accept_len", 0.0)})
    return out


def validation_table(trials: list[dict], method: str) -> list[str]:
    """Each drafting trial's ratio against no speculation predicted from the others at its
    concurrency; the largest error per concurrency."""
    rows = sorted(validate(trials, method), key=lambda r: (r["concurrency"], r["width"]))
    lines = [f"{'conc':>4} {'K':>2} {'predicted':>9} {'measured':>9} {'error':>7}"]
    lines += [f"{r['concurrency']:>4} {r['width']:>2} {r['predicted']:8.2f}x {r['measured']:8.2f}x "
              f"{r['error']:+7.1%}" for r in rows]
    for c in sorted({r["concurrency"] for r in rows}):
        worst = max(abs(r["error"]) for r in rows if r["concurrency"] == c)
        lines.append(f"concurrency {c}: largest error {worst:.1%} over "
                     f"{sum(r['concurrency'] == c for r in rows)} trials left out")
    return lines


def predictions(trials: list[dict], method: str, rows: list[dict], kinds: dict) -> list[str]:
    """For each frontier row (summary.frontier_rows) of a pair whose drafter vLLM serves as
    `method` and that vLLM has no setting for: its predicted tokens/s and ratio against no
    speculation at every calibrated concurrency, marked predicted."""
    costs = calibrate(trials, method)
    lines = []
    for row in rows:
        kind, config, metrics = kinds.get(row["pair"]), row["config"], row["metrics"]
        if kind is None or kind.serving_method != method or not metrics.get("tokens_per_nfe") \
                or config["schedule"] == "ar":
            continue
        blocked = specsweep_only(config)
        alpha = metrics.get("mean_accept_len", 0.0)
        width = kind.draft_width(config["block"])
        # K passes a block; under τ as many as it took, from the forward passes counted
        passes = config["steps"] if config.get("threshold") is None else drafter_passes(
            alpha, metrics["tokens_per_nfe"])
        cells = ", ".join(f"c={c} {cost.throughput(alpha, width, passes):.0f} tok/s "
                          f"({cost.ratio(alpha, width, passes):.2f}x)" for c, cost in costs.items())
        lines.append(f"trial {row['trial']} ({'; '.join(blocked) or 'servable'}; W={width}, ᾱ={alpha:.2f}, "
                     f"p={passes:.2f}): predicted {cells}")
    return lines
