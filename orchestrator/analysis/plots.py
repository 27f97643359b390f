"""Sweep plots (PNG): speed–quality frontier for throughput and latency (as the paper's
Figure 4: every trial hollow, the frontier as a line with points coloured by K or τ,
baselines marked), hypervolume history, and the schedules side by side when more than one
ran (`sweep_plots`, from the study); and the frontier trials' acceptance rate by draft
position (`acceptance_figure`, from what their MLflow runs logged)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from orchestrator.engines.specsweep import effort  # noqa: E402
from workloads.decoding.config import SPECULATIVE  # noqa: E402

LABELS = {
    "throughput_ratio": "speed against the controls timed beside each trial (x)",
    "throughput_tps": "throughput (tokens / s)",
    "latency_s": "latency (s per prompt)",
    "accuracy": "accuracy (fraction correct)",
    "acceptance_rate": "acceptance rate (accepted / drafted)",
    "acceptance_rate_pos": "acceptance rate at position i, P(A ≥ i)",
}


def frontier_figure(
    trials: list[dict],
    front: list[int],
    baselines: dict[str, dict],
    x: str,
    y: str = "accuracy",
    title: str = "",
    connect: bool = True,
):
    """trials: {number, config, metrics}; front: trial numbers on the frontier; baselines:
    label -> metrics. `connect` draws the frontier line (only meaningful when the frontier
    is on exactly these two objectives)."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    shown = [t for t in trials if x in t["metrics"] and y in t["metrics"]]
    ax.scatter(
        [t["metrics"][x] for t in shown],
        [t["metrics"][y] for t in shown],
        facecolors="none",
        edgecolors="0.6",
        s=28,
        label="trials",
    )
    on = sorted((t for t in shown if t["number"] in front), key=lambda t: t["metrics"][x])
    if on and connect:
        ax.plot([t["metrics"][x] for t in on], [t["metrics"][y] for t in on], color="0.3", lw=1, zorder=1)
    if on:
        levels = sorted({effort(t["config"]) for t in on})
        colours = plt.get_cmap("viridis", max(2, len(levels)))
        for n, level in enumerate(levels):
            pts = [t for t in on if effort(t["config"]) == level]
            ax.scatter(
                [t["metrics"][x] for t in pts],
                [t["metrics"][y] for t in pts],
                color=colours(n),
                s=48,
                zorder=2,
                label=f"frontier {level}",
            )
    if x == "throughput_ratio" and shown:  # every control is 1x by definition: one line, not a marker
        ax.axvline(1.0, color="tab:red", lw=1, ls="--", zorder=1, label="controls (1x)")
    for (label, metrics), marker in zip(sorted(baselines.items()), ["*", "D", "P", "X", "s", "^"] * 4):
        if x in metrics and y in metrics:
            ax.scatter(
                [metrics[x]],
                [metrics[y]],
                marker=marker,
                s=110,
                color="tab:red",
                edgecolors="k",
                zorder=3,
                label=label,
            )
    return _finish(fig, ax, x, y, title, fontsize=7)


def history_figure(history: list[float], title: str = ""):
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(range(1, len(history) + 1), history, marker=".", color="tab:blue")
    ax.set_xlabel("finished trials")
    ax.set_ylabel("hypervolume (objective units)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def schedules_figure(trials: list[dict], x: str = "throughput_tps", y: str = "accuracy", title: str = ""):
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for schedule, colour in zip(SPECULATIVE, ("tab:blue", "tab:orange", "tab:green")):
        pts = [
            t
            for t in trials
            if t["config"].get("schedule") == schedule and x in t["metrics"] and y in t["metrics"]
        ]
        ax.scatter(
            [t["metrics"][x] for t in pts],
            [t["metrics"][y] for t in pts],
            color=colour,
            s=28,
            alpha=0.8,
            label=schedule,
        )
    return _finish(fig, ax, x, y, title)


def acceptance_figure(curves: dict[str, list[float]], title: str = ""):
    """One line per trial (label -> its `acceptance_rate_pos`, analysis.metrics.
    acceptance_by_position) against the draft position i = 1, 2, ..."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    colours = plt.get_cmap("tab10" if len(curves) <= 10 else "tab20")
    for n, (label, rates) in enumerate(curves.items()):
        ax.plot(range(1, len(rates) + 1), rates, marker="o", ms=3, color=colours(n % colours.N), label=label)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("draft position i")
    ax.set_ylabel(LABELS["acceptance_rate_pos"])
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def accept_len_figure(hist: list[int], title: str = ""):
    """A trial's accept-length histogram: bar j = the verifications that accepted j drafts
    (analysis.metrics.acceptance_by_position's `accept_len_hist`), its mean marked."""
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=110)
    ax.bar(range(len(hist)), hist, color="#4c72b0")
    total = sum(hist)
    if total:
        mean = sum(j * n for j, n in enumerate(hist)) / total
        ax.axvline(mean, color="#c44e52", ls="--", label=f"mean {mean:.2f}")
        ax.legend(fontsize=8)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("drafts accepted in a verification")
    ax.set_ylabel("verifications")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def _finish(fig, ax, x: str, y: str, title: str, fontsize: float | None = None):
    ax.set_xlabel(LABELS.get(x, x))
    ax.set_ylabel(LABELS.get(y, y))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=fontsize, loc="best")
    fig.tight_layout()
    return fig


def save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def sweep_plots(spec, study, out: Path) -> list[Path]:
    """Every plot of a sweep into `out`; returns the files written."""
    import optuna

    from orchestrator.analysis.frontier import default_reference, frontier_trials, hypervolume_history
    from orchestrator.stored import baselines as stored_baselines
    from orchestrator.stored import batch_size as stored_batch_size

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    trials = [
        {"number": t.number, "config": t.user_attrs["config"], "metrics": t.user_attrs.get("metrics", {}),
         "batch_size": stored_batch_size(t)}
        for t in complete
    ]
    if not trials:
        return []
    front = [t.number for t in frontier_trials(study, spec)]
    sizes = sorted({t["batch_size"] for t in trials})
    paths = []
    for size in sizes:  # one facet per batch size: speeds at different batch sizes do not compare
        facet = [t for t in trials if t["batch_size"] == size]
        # timed once before the trials, not beside each: the machine's speed then, not the ratio's 1x
        baselines = {f"{pair} {kind} (timed before the trials)": value
                     for (pair, kind, b), value in stored_baselines(study).items() if b == size}
        at, suffix = (f" at batch size {size}", f"-b{size}") if sizes != [1] else ("", "")
        ratio = ["throughput_ratio"] if any("throughput_ratio" in t["metrics"] for t in facet) else []
        for x in (*ratio, "throughput_tps", "latency_s"):
            flat = set(spec.objectives) == {x, "accuracy"}
            name = LABELS[x].split(" (")[0]
            title = f"{spec.name}: {name} vs accuracy{at}" + (
                "" if flat else f"\nfrontier on {', '.join(spec.objectives)}"
            )
            fig = frontier_figure(facet, front, baselines, x, title=title, connect=flat)
            named = "ratio" if x == "throughput_ratio" else x.split("_")[0]
            paths.append(save(fig, out / f"frontier-{named}{suffix}.png"))
    directions = tuple(spec.objectives.values())
    points = [tuple(t.values) for t in complete]
    history = hypervolume_history(points, directions, default_reference(points, directions))
    paths.append(
        save(
            history_figure(history, f"{spec.name}: hypervolume on {', '.join(spec.objectives)}"),
            out / "hypervolume.png",
        )
    )
    ran = [s for s in SPECULATIVE if s in {t["config"].get("schedule") for t in trials}]
    if len(ran) > 1:
        title = f"{spec.name}: {' vs '.join(s.capitalize() for s in ran)}"
        paths.append(save(schedules_figure(trials, title=title), out / "schedules.png"))
    return paths
