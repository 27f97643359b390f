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
        if config.get("engine") == "vllm" and metrics.get("throughput_tps"):
            out.append({**{k: config[k] for k in ("method", "num_speculative_tokens", "concurrency")},
                        "throughput_tps": metrics["throughput_tps"],
                        "mean_accept_len": metrics.get("mean_accept_len", 0.0)})
    return out


def validation_table(trials: list[dict], method: str) -> list[str]:
    """Each drafting trial predicted from the others at its concurrency; the largest error per
    concurrency."""
    rows = validate(trials, method)
    lines = [f"{'conc':>4} {'K':>2} {'predicted':>9} {'measured':>9} {'error':>7}"]
    lines += [f"{r['concurrency']:>4} {r['width']:>2} {r['predicted_tps']:9.1f} {r['measured_tps']:9.1f} "
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
        width, passes = kind.draft_width(config["block"]), drafter_passes(alpha, metrics["tokens_per_nfe"])
        cells = ", ".join(f"c={c} {cost.throughput(alpha, width, passes):.0f} tok/s "
                          f"({cost.ratio(alpha, width, passes):.2f}x)" for c, cost in costs.items())
        lines.append(f"trial {row['trial']} ({'; '.join(blocked) or 'servable'}; W={width}, ᾱ={alpha:.2f}, "
                     f"p={passes:.2f}): predicted {cells}")
    return lines
