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

from orchestrator.analysis.throughput import fit_line


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
    concurrency, mean_accept_len, throughput_tps, throughput_ratio}): those of `method`, and
    the `none` trial for tokens/s; a concurrency without two widths of `method` is left out."""
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
