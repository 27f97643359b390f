"""The batch as the unit of work (lockstep.py): every schedule that batches runs all its rows at
once with no thread, and decodes exactly as the row loops of schedules.py and selfspec.py do
(tokens, counters, forward passes), greedy and sampled, under every rule and unmasking policy;
the acceptance rules over rows equal them row by row."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

from workloads.decoding import DecodeConfig, decode_batch
from workloads.decoding.acceptance import verify, verify_greedy_rows, verify_rows
from workloads.decoding.kinds import PairKind
from workloads.decoding.lockstep import Layout
from workloads.models import load_pair
from workloads.tasks import get_task

MAX_NEW = 24
BASE = DecodeConfig(schedule="linear", block=4, steps=1, max_new_tokens=MAX_NEW)
CONFIGS = {
    "ar": dict(schedule="ar"),
    "ar sampled": dict(schedule="ar", temperature=1.0),
    "linear": {},
    "linear K2": dict(steps=2),
    "linear B8 sampled": dict(block=8, temperature=1.0),
    "linear K2 random": dict(steps=2, temperature=1.0, unmask="random"),
    "linear K3 confidence": dict(steps=3, temperature=1.0, unmask="confidence"),
    "linear cactus": dict(temperature=1.0, rule="cactus", leniency=0.5),
    "linear match": dict(temperature=1.0, rule="match", leniency=0.3),
    "linear tau": dict(steps=None, threshold=0.5, temperature=1.0),
    "packed": dict(schedule="packed"),
    "packed B8 K2 sampled": dict(schedule="packed", block=8, steps=2, temperature=1.0),
    "packed lenient": dict(schedule="packed", temperature=1.0, rule="linear", leniency=0.5),
    # point-mass drafts (q one-hot at each draft, built by the rule that reads it) under a
    # sampled verifier and under a lenient rule at a greedy one
    "packed greedy drafts": dict(schedule="packed", temperature=1.0, draft_temperature=0.0),
    "linear lenient greedy": dict(rule="linear", leniency=0.5),
    "quadratic": dict(schedule="quadratic"),
    "quadratic B8 cactus": dict(schedule="quadratic", block=8, temperature=1.0, rule="cactus", leniency=0.3),
    "diffusion K2": dict(schedule="diffusion", steps=2),
    "diffusion B8 sampled": dict(schedule="diffusion", block=8, steps=2, temperature=1.0),
}


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [e.prompt for e in get_task("arith").examples("test", n=6)]


@pytest.fixture(scope="module")
def pairs():
    return {name: load_pair(name) for name in ("toy", "toy-self", "toy-dflash")}


def runnable(pair, config: DecodeConfig) -> bool:
    try:
        pair.kind.check(config)
    except Exception:
        return False
    return True


def row_loops(monkeypatch, kind) -> None:
    """Make `kind` run a thread a row (its row loops), as before the batch was the unit."""
    monkeypatch.setattr(type(kind), "rows_program", lambda *args: None)
    monkeypatch.setattr(PairKind, "rows_program", lambda *args: None)


def measured(results) -> list[tuple]:
    return [(r.token_ids, r.accepted, r.drafted, r.iterations, r.nfe, r.accept_lengths, r.stop_reason)
            for r in results]


@pytest.mark.parametrize("name", ["toy", "toy-self", "toy-dflash"])
def test_lockstep_decodes_as_the_row_loops_with_no_thread(pairs, prompts, monkeypatch, name):
    pair, seeds = pairs[name], list(range(len(prompts)))
    configs = {label: dataclasses.replace(BASE, **changes) for label, changes in CONFIGS.items()}
    configs = {label: c for label, c in configs.items() if runnable(pair, c)}
    started = []
    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", lambda thread: started.append(thread))
        together = {label: decode_batch(pair, prompts, c, seeds=seeds).results
                    for label, c in configs.items()}
    assert not started  # no thread a row
    with monkeypatch.context() as patch:
        row_loops(patch, pair.kind)
        for label, config in configs.items():
            looped = decode_batch(pair, prompts, config, seeds=seeds).results
            assert measured(together[label]) == measured(looped), label
    drafting = [label for label in configs if not label.startswith(("ar", "diffusion"))]
    assert all(sum(r.drafted for r in together[label]) > 0 for label in drafting)  # drafted and verified
    assert any(0 < sum(r.accepted for r in together[label]) < sum(r.drafted for r in together[label])
               for label in drafting)


def test_the_acceptance_rules_over_rows_equal_them_row_by_row():
    generator = torch.Generator().manual_seed(0)
    rows, width, vocab = 6, 5, 7
    p = torch.rand(rows, width + 1, vocab, generator=generator).softmax(-1)
    q = torch.rand(rows, width, vocab, generator=generator).softmax(-1)
    draft = torch.randint(vocab, (rows, width), generator=generator)
    draft[:, :2] = p[:, :2].argmax(-1)  # some acceptance
    lengths = torch.tensor([0, 1, 3, 5, 5, 2])
    uniforms = torch.rand(rows, width, generator=generator)
    noise = torch.empty(rows, width + 1, vocab).exponential_(generator=generator)
    for rule, leniency in (("lossless", 0.0), ("linear", 0.4), ("cactus", 0.3), ("match", 0.2)):
        accepted, token = verify_rows(rule, p, q, draft, lengths, uniforms, noise, leniency)
        for r in range(rows):
            n = int(lengths[r])
            one = verify(rule, p[r, :n + 1], q[r, :n], draft[r, :n], uniforms[r, :n], noise[r, :n + 1],
                         leniency)
            assert (one.accepted, one.token) == (int(accepted[r]), int(token[r])), (rule, r)
    accepted, token = verify_greedy_rows(p.log(), draft, lengths)
    for r in range(rows):
        n = int(lengths[r])
        alone = verify_greedy_rows(p[r:r + 1, :n + 1].log(), draft[r:r + 1, :n], lengths[r:r + 1])
        assert (int(alone[0][0]), int(alone[1][0])) == (int(accepted[r]), int(token[r]))


def test_a_layout_keeps_each_rows_prefix_and_hides_padding():
    layout = Layout.of(torch.tensor([2, 0]), torch.tensor([2, 3]), bidirectional=True, keep_region=False)
    assert layout.kept.tolist() == [2, 0]
    first = layout.among[0].int().tolist()
    assert first == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]  # region both ways
    second = layout.among[1].int().tolist()
    assert second[3] == [0, 0, 0, 1] and second[0] == [1, 1, 1, 0]  # the padding row sees itself only
