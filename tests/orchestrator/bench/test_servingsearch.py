"""The serving replay's ledger (resident servers: a start per method served, the control's
once) and the multi-fidelity search replayed on a small grid whose costs follow its model."""

from orchestrator.bench.servingsearch import Ledger, Point, multifidelity, per_concurrency
from workloads.serving.acceptance import Acceptance


def point(method, drafts, c, ratio, start=20.0):
    first = c == 1  # the grid records a setting's start on its first trial
    return Point(method, drafts, c, 100.0 * c * ratio, ratio, 1.0, 10.0 + (start if first else 0.0),
                 start if first else 0.0)


def grid():
    points = {}
    for c in (1, 4):
        points["none", 0, c] = point("none", 0, c, 1.0)
        for n, gain in ((1, 1.8), (3, 3.2), (5, 4.6), (7, 5.2)):
            ratio = gain / (1 + 0.6 + 0.1 * c * n)  # a drafter pass, and each draft dearer at c = 4
            points["dflash", n, c] = point("dflash", n, c, ratio)
    return points


def profiles():
    out = {("none", 0): Acceptance(10, 110, 100)}
    for n, gain in ((1, 1.8), (3, 3.2), (5, 4.6), (7, 5.2)):
        out["dflash", n] = Acceptance(10, 10 + round(100 * gain), 100, drafted=100 * n)
    return out


def test_a_worker_pays_the_controls_start_once_and_a_start_per_method_it_turns_to():
    points = grid()
    points["ngram", 3, 1] = point("ngram", 3, 1, 1.2, start=15.0)
    ledger = Ledger(points)
    for key in (("dflash", 1, 1), ("dflash", 1, 4), ("dflash", 3, 4), ("dflash", 1, 4)):
        ledger.run(points[key])  # one resident DFlash server drafts n = 1 and 3
    assert ledger.spent == 20 + (20 + 10) + 10 + 10 + 10 and ledger.starts == 2
    ledger.run(points["ngram", 3, 1])
    ledger.run(points["dflash", 3, 4])  # turning back to DFlash starts it again
    assert ledger.spent == 20 + (20 + 10) + 10 + 10 + 10 + (15 + 10) + (20 + 10) and ledger.starts == 4


def test_the_search_picks_the_best_at_each_concurrency_and_times_less_than_the_grid():
    points = grid()
    search, timed, ledger, _ = multifidelity(points, profiles(), tolerance=0.05, error=0.0)
    full = Ledger(points)
    for p in points.values():
        full.run(p)
    for c in (1, 4):
        best = max((p for p in points.values() if p.concurrency == c), key=lambda p: p.ratio)
        assert search.picks()[c] == best.setting
        assert per_concurrency(points, timed, c, "throughput_ratio", best)["pick_gap"] == 0.0
    assert len(timed) < len(points) - 2 and ledger.spent < full.spent
    assert ledger.starts == full.starts == 2  # the control's and DFlash's, n drafted at run time
