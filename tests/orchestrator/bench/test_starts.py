from orchestrator.bench.starts import Start, StartsCheck


def _check(low: float, high: float) -> StartsCheck:
    starts = [Start("worker process", "control", 21.1, 6.0, 12.4),
              Start("engine core", "control", 14.6, 6.1, None)]
    return StartsCheck(starts, {"worker process": 1.25, "engine core": 1.27}, 1.016, low, high, 6)


def test_the_starts_table_shows_each_servers_parts_and_the_verdict_follows_the_interval():
    held = _check(0.97, 1.06)
    assert held.holds and not _check(1.01, 1.06).holds and not _check(0.90, 0.99).holds
    lines = held.lines()
    assert lines[1].split() == ["worker", "process", "control", "21.1", "s", "6.0", "s", "12.4", "s"]
    assert lines[2].split() == ["engine", "core", "control", "14.6", "s", "6.1", "s", "-"]
    assert lines[3] == "speed ratio, speculative / control: worker process 1.250, engine core 1.270"
    assert lines[4].endswith("(99%, 6 blocks C1 S1 C0 S0 S0 C0 S1 C1): contains 1, the ratio is unchanged")
    assert _check(1.01, 1.06).lines()[4].endswith("DIFFERS")
