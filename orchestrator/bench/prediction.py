"""The vLLM speed model (analysis.prediction) on stored sweeps: calibrated on a vLLM sweep of a
pair, checked by leaving each of its drafting trials out, and applied to a specsweep sweep's
frontier configurations that vLLM has no setting for."""

from __future__ import annotations

from orchestrator.analysis.prediction import Predictor, drafting, largest_errors, validate
from orchestrator.analysis.serving import specsweep_only


def validation_table(trials: list[dict], method: str) -> list[str]:
    """Each drafting trial's ratio against no speculation predicted from the others at its
    concurrency; the largest error per concurrency."""
    rows = sorted(validate(trials, method), key=lambda r: (r["concurrency"], r["width"]))
    lines = [f"{'conc':>4} {'K':>2} {'predicted':>9} {'measured':>9} {'error':>7}"]
    lines += [f"{r['concurrency']:>4} {r['width']:>2} {r['predicted']:8.2f}x {r['measured']:8.2f}x "
              f"{r['error']:+7.1%}" for r in rows]
    for c, worst in largest_errors(rows).items():
        lines.append(f"concurrency {c}: largest error {worst:.1%} over "
                     f"{sum(r['concurrency'] == c for r in rows)} trials left out")
    return lines


def predictions(predictor: Predictor, method: str, rows: list[dict], kinds: dict) -> list[str]:
    """For each frontier row (summary.frontier_rows) of a pair whose drafter vLLM serves as
    `method`: its predicted tokens/s and ratio against no speculation at every calibrated
    concurrency, marked predicted."""
    lines = []
    for row in rows:
        kind = kinds.get(row["pair"])
        by_concurrency = None if kind is None or kind.serving_method != method else predictor.of(
            kind, row["config"], row["metrics"])
        if by_concurrency is None:
            continue
        width, passes, alpha = drafting(kind, row["config"], row["metrics"])
        cells = ", ".join(f"c={c} {p['throughput_tps']:.0f} tok/s ({p['throughput_ratio']:.2f}x)"
                          for c, p in by_concurrency.items())
        blocked = "; ".join(specsweep_only(row["config"])) or "servable"
        lines.append(f"trial {row['trial']} ({blocked}; W={width}, ᾱ={alpha:.2f}, p={passes:.2f}): "
                     f"predicted {cells}")
    return lines
