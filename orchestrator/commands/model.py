"""`specsweep model calibrate | predict`: the simple throughput model (Eq. 6–7)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestrator.errors import user_errors

app = typer.Typer(
    help="The throughput model: calibrate on a pair, predict over (K, λ).", no_args_is_help=True
)


@app.command()
@user_errors
def calibrate(
    pair: str = typer.Argument(..., help="Pair name (toy, toy-self)."),
    task: str = typer.Option("arith", "--task"),
    data: Path = typer.Option(None, "--data", help="Local dataset file for the task."),
    n: int = typer.Option(50, "--n", min=1, help="Prompts (a seeded subset)."),
    steps: str = typer.Option("1,2,3,4", "--steps", help="K values."),
    block: int = typer.Option(8, "--block", min=1),
    out: Path = typer.Option(Path("calibration.json"), "--out"),
) -> None:
    """Measure d_K, the drafting cost fit c_d(K) = a + bK and the verifier cost c_v."""
    from orchestrator.analysis.throughput import fit_line, parse_numbers
    from workloads.decoding.calibrate import calibrate as measure
    from workloads.models import load_pair
    from workloads.tasks import get_task

    ks = [int(k) for k in parse_numbers(steps, "--steps")]
    if any(k < 1 or k > block for k in ks):
        raise ValueError(f"--steps: every K must be in [1, block={block}]")
    chosen = get_task(task, data)
    prompts = [e.prompt for e in chosen.examples(n=n, seed=0)]
    result = measure(load_pair(pair), prompts, ks, block)
    a, b = fit_line([float(k) for k in ks], result["draft_s"])
    calibration = {
        "pair": pair,
        "task": task,
        "block": block,
        **result,
        "draft_cost": [a, b],
        "verify_cost": result["verify_s"],
    }
    out.write_text(json.dumps(calibration, indent=2))
    for k, d, c in zip(ks, result["d_k"], result["draft_s"]):
        typer.echo(f"K={k}: d_K {d:.3f}  (lossless acceptance {1 - d:.3f})  drafting {1000 * c:.2f} ms/round")
    typer.echo(
        f"c_d(K) = {1000 * a:.3f} + {1000 * b:.3f} K ms; c_v = {1000 * result['verify_s']:.3f} ms "
        f"({result['positions']} positions per K); written to {out}"
    )


@app.command()
@user_errors
def predict(
    calibration: Path = typer.Option(None, "--calibration", help="JSON from `model calibrate`."),
    d_k: str = typer.Option(None, "--d-k", help="d_K for K = 1, 2, ... (instead of --calibration)."),
    draft_cost: str = typer.Option(None, "--draft-cost", help="a,b of c_d(K) = a + bK."),
    verify_cost: float = typer.Option(None, "--verify-cost", help="c_v."),
    block: int = typer.Option(None, "--block", min=1, help="B in Eq. 7 (default: the calibration's)."),
    leniency: str = typer.Option("0,0.1,...,1", "--leniency", help="λ values."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per (K, λ)."),
    plot: Path = typer.Option(None, "--plot", help="Write acceptance/quality and throughput plots (PNG)."),
) -> None:
    """ᾱ_K(λ) = 1 − (1 − λ)d_K, quality 1 − λd_K, T = Σ_{j=0..B} ᾱ^j / (c_d(K) + c_v)."""
    from orchestrator.analysis.throughput import Calibration, parse_numbers
    from orchestrator.analysis.throughput import predict as model

    if calibration is not None:
        if not calibration.is_file():
            raise ValueError(f"--calibration: no such file {calibration}")
        data = json.loads(calibration.read_text())
        cal = Calibration(tuple(data["d_k"]), *data["draft_cost"], data["verify_cost"])
        block = block or data["block"]
    else:
        if d_k is None or draft_cost is None or verify_cost is None or block is None:
            raise ValueError("--d-k, --draft-cost, --verify-cost, --block: give all four, or --calibration")
        costs = parse_numbers(draft_cost, "--draft-cost")
        if len(costs) != 2:
            raise ValueError(f"--draft-cost: expected a,b; got {draft_cost!r}")
        distances = parse_numbers(d_k, "--d-k")
        if any(not 0 <= d <= 1 for d in distances):
            raise ValueError("--d-k: TV distances lie in [0, 1]")
        cal = Calibration(tuple(distances), costs[0], costs[1], verify_cost)
    lams = parse_numbers(leniency, "--leniency")
    if any(not 0 <= x <= 1 for x in lams):
        raise ValueError("--leniency: λ must be in [0, 1]")
    rows = model(cal, block, lams)
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
    else:
        typer.echo(f"{'K':>3} {'λ':>5} {'acceptance':>10} {'quality':>8} {'throughput':>12}")
        for r in rows:
            typer.echo(
                f"{r['steps']:>3} {r['leniency']:>5.2f} {r['acceptance']:>10.4f} {r['quality']:>8.4f} "
                f"{r['throughput']:>12.4g}"
            )
    if plot is not None:
        _plot(rows, plot)


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    for k in sorted({r["steps"] for r in rows}):
        pts = [r for r in rows if r["steps"] == k]
        left.plot([r["acceptance"] for r in pts], [r["quality"] for r in pts], marker=".", label=f"K={k}")
        right.plot([r["throughput"] for r in pts], [r["quality"] for r in pts], marker=".", label=f"K={k}")
    left.set_xlabel("predicted acceptance rate ᾱ")
    right.set_xlabel("predicted throughput (tokens per unit of cost)")
    for ax in (left, right):
        ax.set_ylabel("quality proxy 1 − λ d_K")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
