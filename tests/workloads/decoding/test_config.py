"""The `exact` label of every class of configuration, as docs/concepts.md (Decoding) gives it."""

import pytest

from workloads.decoding import DecodeConfig, is_exact

T1 = dict(temperature=1.0)
CONFIDENCE_K2 = dict(block=4, steps=2, unmask="confidence", **T1)

LABELS = [
    # (name, settings, exact)
    ("ar", dict(schedule="ar", **T1), True),
    ("drafter alone", dict(schedule="diffusion", **T1), False),
    ("drafter alone, greedy", dict(schedule="diffusion"), False),
    ("one step", dict(schedule="linear", steps=1, **T1), True),
    ("one step, packed", dict(schedule="packed", steps=1, **T1), True),
    ("self quadratic", dict(schedule="quadratic", **T1), True),
    ("K=2 left to right", dict(block=4, steps=2, unmask="ltr", **T1), True),
    ("K=2 left to right, packed", dict(schedule="packed", block=4, steps=2, unmask="ltr", **T1), True),
    ("τ left to right", dict(threshold=0.7, unmask="ltr", **T1), True),
    ("τ left to right, packed", dict(schedule="packed", threshold=0.7, unmask="ltr", **T1), True),
    ("K=2 confidence", CONFIDENCE_K2, False),
    ("K=2 margin", {**CONFIDENCE_K2, "unmask": "margin"}, False),
    ("K=2 entropy", {**CONFIDENCE_K2, "unmask": "entropy"}, False),
    ("K=2 random", {**CONFIDENCE_K2, "unmask": "random"}, False),
    ("τ confidence", dict(threshold=0.7, unmask="confidence", **T1), False),
    ("K=2 confidence, greedy verifier", {**CONFIDENCE_K2, "temperature": 0.0}, True),
    ("K=2 confidence, verifier top-k 1", {**CONFIDENCE_K2, "top_k": 1}, True),
    ("K=2 confidence, greedy drafts", {**CONFIDENCE_K2, "draft_temperature": 0.0}, True),
    ("K=2 confidence, draft top-k 1", {**CONFIDENCE_K2, "draft_top_k": 1}, True),
    ("K=2 confidence, draft top-k 2", {**CONFIDENCE_K2, "draft_top_k": 2}, False),
    ("K=2 confidence, match", {**CONFIDENCE_K2, "rule": "match"}, True),
    ("match λ>0", dict(rule="match", leniency=0.5, **T1), False),
    ("match λ>0, greedy verifier", dict(rule="match", leniency=0.5), False),
    ("linear λ=0", dict(rule="linear", leniency=0.0, **T1), True),
    ("linear λ>0", dict(rule="linear", leniency=0.5, **T1), False),
    ("linear λ>0, greedy verifier", dict(rule="linear", leniency=0.5), False),
    ("cactus δ=0", dict(rule="cactus", leniency=0.0, **T1), True),
    ("cactus δ>0", dict(rule="cactus", leniency=0.3, **T1), False),
    ("cactus δ>0, greedy verifier", dict(rule="cactus", leniency=0.3), True),
    ("cactus δ>0, verifier top-k 1", dict(rule="cactus", leniency=0.3, top_k=1, **T1), True),
    ("cactus δ>0, greedy verifier, confidence K=2", {**CONFIDENCE_K2, "rule": "cactus", "leniency": 0.3,
                                                     "temperature": 0.0}, True),
    ("any-order verification", dict(schedule="packed", verify_order="confidence"), False),
]


@pytest.mark.parametrize(("settings", "exact"), [(s, e) for _, s, e in LABELS], ids=[n for n, _, _ in LABELS])
def test_exact_label(settings, exact):
    assert is_exact(DecodeConfig(**settings)) is exact
