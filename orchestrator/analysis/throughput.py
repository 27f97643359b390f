"""The simple throughput model of paper 2610.31819 (Section 3.3, Appendix C and F.4).

With d_K the mean TV distance between verifier and drafter at K steps and linear leniency λ:
  acceptance ᾱ_K(λ) = 1 − (1 − λ)·d_K,  quality proxy 1 − D̄_TV(p, p̃) = 1 − λ·d_K   (Eq. 6)
and with drafting cost c_d(K) = a + b·K and verifier cost c_v per round, W draft tokens per
round (the pair kind's draft width: B, or B − 1 where the block holds an anchor):
  throughput T(K, ᾱ) = Σ_{j=0..W} ᾱ^j / (c_d(K) + c_v)                          (Eq. 7)
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.decoding.config import DecodeConfig


def acceptance(d_k: float, leniency: float) -> float:
    return 1.0 - (1.0 - leniency) * d_k


def quality(d_k: float, leniency: float) -> float:
    return 1.0 - leniency * d_k


def throughput(alpha: float, width: int, draft_cost: float, verify_cost: float) -> float:
    return sum(alpha**j for j in range(width + 1)) / (draft_cost + verify_cost)


@dataclass(frozen=True)
class Calibration:
    d_k: tuple[float, ...]  # d_K for K = 1, 2, ... in order
    draft_a: float  # c_d(K) = a + b K
    draft_b: float
    verify_cost: float


def predict(cal: Calibration, block: int, leniencies: list[float]) -> list[dict]:
    """One row per (K, λ): steps, leniency, acceptance, quality, throughput."""
    rows = []
    for k, d in enumerate(cal.d_k, start=1):
        for lam in leniencies:
            alpha = acceptance(d, lam)
            rows.append(
                {
                    "steps": k,
                    "leniency": lam,
                    "acceptance": alpha,
                    "quality": quality(d, lam),
                    "throughput": throughput(alpha, block, cal.draft_a + cal.draft_b * k, cal.verify_cost),
                }
            )
    return rows


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (a, b) of y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def parse_numbers(text: str, name: str) -> list[float]:
    """`0,0.1,...,1` (an arithmetic progression from its first two terms) or a plain list."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        if "..." in parts:
            i = parts.index("...")
            first, second, last = float(parts[0]), float(parts[1]), float(parts[i + 1])
            step = second - first
            if i != 2 or step <= 0:
                raise ValueError
            count = int(round((last - first) / step)) + 1
            return [round(first + n * step, 10) for n in range(count)]
        return [float(p) for p in parts]
    except (ValueError, IndexError):
        raise ValueError(f"{name}: expected numbers like 0,0.1,...,1 or 1,2,3; got {text!r}") from None


def predicted_frontier(points: list[tuple[dict, DecodeConfig, int]], calibration: dict) -> list[dict]:
    """Of (params, config, draft width W) points, the params the calibrated model puts on the
    (throughput, quality) frontier; configurations it cannot model (τ, K not calibrated,
    cactus, match) are left out."""
    from orchestrator.analysis.metrics import pareto_front

    d_k = dict(zip(calibration["steps"], calibration["d_k"]))
    a, b = calibration["draft_cost"]
    scored = []
    for params, config, width in points:
        if config.threshold is None and config.k in d_k and config.rule in ("lossless", "linear"):
            alpha = acceptance(d_k[config.k], config.leniency)
            scored.append(
                (
                    params,
                    (
                        throughput(alpha, width, a + b * config.k, calibration["verify_cost"]),
                        quality(d_k[config.k], config.leniency),
                    ),
                )
            )
    return [scored[i][0] for i in pareto_front([s for _, s in scored], ("max", "max"))]
