"""The speed in vLLM of configurations vLLM has no setting for (K > 1, τ, lenient rules, packed):
the papers' throughput model (paper 2610.31819 Eq. 7), its costs measured in vLLM.

A load at concurrency c that drafts W tokens an iteration in p drafter passes and accepts ᾱ of
them (mean_accept_len) emits 1 + ᾱ tokens an iteration; its seconds per iteration, as the
load's wall time sees them (per output token: 1 / tokens/s),
  t_c(W, p) = a_c + b_c·W + p·d_c,   tokens/s_c = (1 + ᾱ) / t_c(W, p)
(a_c: an iteration of the verifier alone; b_c: each draft token it also checks; d_c: one
drafter pass). Against vLLM without speculation at c (t = a_c, one token an iteration):
  ratio_c = (1 + ᾱ)·a_c / t_c(W, p).
Calibrated per concurrency on a vLLM sweep of the pair: the `none` trial gives a_c = 1 /
tokens/s; each trial of the pair's drafter (p = 1) gives t = (1 + ᾱ) / tokens/s at its W, and a
least-squares line over W through those gives a_c + d_c (intercept) and b_c (slope). specsweep
measures ᾱ, W and p of a configuration: p = (1 + ᾱ)/tokens_per_nfe − 1, the forward passes an
iteration beyond the verifier's one.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.analysis.throughput import fit_line


@dataclass(frozen=True)
class IterationCosts:
    """vLLM's seconds an iteration at one concurrency, as a load's wall time sees them."""

    concurrency: int
    verify: float  # a_c
    per_draft: float  # b_c
    draft_pass: float  # d_c

    def seconds(self, width: int, passes: float) -> float:
        """t_c(W, p) = a_c + b_c·W + p·d_c."""
        return self.verify + self.per_draft * width + passes * self.draft_pass

    def throughput(self, accept_len: float, width: int, passes: float) -> float:
        """tokens/s_c = (1 + ᾱ) / t_c(W, p)."""
        return (1 + accept_len) / self.seconds(width, passes)

    def ratio(self, accept_len: float, width: int, passes: float) -> float:
        """ratio_c = (1 + ᾱ)·a_c / t_c(W, p), against no speculation at c."""
        return self.throughput(accept_len, width, passes) * self.verify


def drafter_passes(accept_len: float, tokens_per_nfe: float) -> float:
    """p = (1 + ᾱ)/tokens_per_nfe − 1: forward passes per iteration beyond the verifier's one."""
    return max(0.0, (1 + accept_len) / tokens_per_nfe - 1)


def calibrate(trials: list[dict], method: str) -> dict[int, IterationCosts]:
    """IterationCosts per concurrency from vLLM trials ({method, num_speculative_tokens,
    concurrency, mean_accept_len, throughput_tps}): the `none` trial and those of `method`; a
    concurrency without a `none` trial or two widths of `method` is left out."""
    out = {}
    for c in sorted({t["concurrency"] for t in trials}):
        here = [t for t in trials if t["concurrency"] == c]
        none = next((t for t in here if t["method"] == "none"), None)
        drafting = [t for t in here if t["method"] == method]
        if none is None or len({t["num_speculative_tokens"] for t in drafting}) < 2:
            continue
        intercept, slope = fit_line([t["num_speculative_tokens"] for t in drafting],
                                    [(1 + t["mean_accept_len"]) / t["throughput_tps"] for t in drafting])
        verify = 1 / none["throughput_tps"]
        out[c] = IterationCosts(c, verify, slope, intercept - verify)
    return out


def validate(trials: list[dict], method: str) -> list[dict]:
    """Leave one out: each trial of `method` predicted from costs calibrated without it, with its
    own ᾱ and W (p = 1), against its measured tokens/s. One row per trial: concurrency, W,
    predicted and measured tokens/s, relative error."""
    rows = []
    for held in (t for t in trials if t["method"] == method):
        costs = calibrate([t for t in trials if t is not held], method).get(held["concurrency"])
        if costs is None:
            continue
        predicted = costs.throughput(held["mean_accept_len"], held["num_speculative_tokens"], 1.0)
        rows.append({"concurrency": held["concurrency"], "width": held["num_speculative_tokens"],
                     "predicted_tps": predicted, "measured_tps": held["throughput_tps"],
                     "error": predicted / held["throughput_tps"] - 1})
    return rows
