"""A drafts schedule's switch points and the rule that refuses one, pure.

A schedule (`num_speculative_tokens_per_batch_size` [[lo, hi, n], ...]) drafts n_i at batch
sizes lo_i..hi_i. Each switch, from n_i to n_i+1 between hi_i and lo_i+1 = hi_i + 1, is
checked at both of those concurrencies against the n the schedule does not draft there: at
hi_i the schedule (drafting n_i) against a server of single n_i+1, at lo_i+1 (drafting
n_i+1) against single n_i; loads interleaved A B B A ..., R pairs. A switch is refused where,
at either side, the schedule was slower in every one of the R pairs: a sign test, so where
the two are equally fast (their loads exchangeable) it refuses with chance at most 2 · 2^-R
(R = 5: 6.25%; `refusal_error`); tests/orchestrator/analysis/test_schedule.py checks it by
simulation at every R the export allows. A refused switch moves by one batch size towards
the side it lost at (`moved`).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_REPEATS = 9


@dataclass(frozen=True)
class Switch:
    """One switch of a schedule: `n_below` drafts up to batch size `below`, `n_above` from
    `above` = below + 1."""

    below: int
    above: int
    n_below: int
    n_above: int


def switches(ranges: list[list[int]]) -> list[Switch]:
    """The switches of a schedule's ranges, in order (neighbouring ranges of one n are none)."""
    return [Switch(hi, hi + 1, n, n_next) for (_, hi, n), (_, _, n_next) in zip(ranges, ranges[1:])
            if n != n_next]


def always_slower(schedule_walls: list[float], single_walls: list[float]) -> bool:
    """The sign test: the schedule's load took longer than the single n's in every
    interleaved pair (pair i: the i-th load of each)."""
    return bool(schedule_walls) and all(s > o for s, o in zip(schedule_walls, single_walls, strict=True))


def refusal_error(repeats: int) -> float:
    """A bound on P(refusing a switch whose schedule is as fast as the other n at both
    sides): min(1, 2 · 2^-R), one sign test a side, each all-slower with chance 2^-R."""
    return min(1.0, 2 * 0.5 ** repeats)


def moved(ranges: list[list[int]], refused: Switch, lost_at: int) -> list[list[int]]:
    """The ranges with `refused` moved by one batch size, so the n that beat the schedule at
    `lost_at` (one side of the switch) drafts there: lost at `below`, that size goes to
    n_above; lost at `above`, to n_below. A range left empty is dropped; the other sizes keep
    the n the sweep chose for them."""
    shift = -1 if lost_at == refused.below else 1
    out = []
    for lo, hi, n in ranges:
        if hi == refused.below:
            hi += shift
        elif lo == refused.above:
            lo += shift
        if lo <= hi:
            out.append([lo, hi, n])
    return out
