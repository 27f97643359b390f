"""The worker body without Ray: warm-up once per process and pair, never timed or recorded;
controls beside a trial's decodes."""

import pytest

from orchestrator.sweep import workers
from orchestrator.sweep.workers import WARMUP, PairWorker, Shard, control_positions
from workloads.decoding import DecodeConfig
from workloads.tasks import get_task

TRIAL = DecodeConfig(schedule="linear", block=4, max_new_tokens=12).to_dict()
AR = DecodeConfig(schedule="ar", max_new_tokens=12).to_dict()


@pytest.fixture
def decodes(monkeypatch):
    """Every decode a worker makes, in order: (prompt, schedule)."""
    made = []
    real = workers.decode

    def counting(pair, prompt, config):
        made.append((prompt, config.schedule))
        return real(pair, prompt, config)

    monkeypatch.setattr(workers, "decode", counting)
    return made


def items(n: int):
    examples = get_task("arith").examples(n=n, seed=0)
    return [(e, e.prompt) for e in examples]


def test_warm_up_runs_once_per_process_and_is_never_recorded(decodes):
    worker = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)
    shard = Shard(0, "toy", TRIAL, tuple(range(5)), control=AR)
    first = worker.run(shard, items(5))
    assert first["warmup"] == 2 * WARMUP  # the trial's config and the control's, on WARMUP prompts
    assert len(first["records"]) == 5 and len(first["controls"]) == 3
    assert len(decodes) == 2 * WARMUP + 5 + 3
    again = worker.run(shard, items(5))
    assert again["warmup"] == 0 and len(decodes) == 2 * WARMUP + 2 * (5 + 3)
    restarted = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)  # what Ray builds after a restart
    assert restarted.run(shard, items(5))["warmup"] == 2 * WARMUP
    # records and controls are the timed decodes, the same on a warm and a restarted worker
    assert [r["token_ids"] for r in first["records"]] == [r["token_ids"] for r in again["records"]]


def test_controls_run_right_before_the_trial_decode_of_their_prompt(decodes):
    worker = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)
    worker.warm.add("toy")
    out = worker.run(Shard(0, "toy", TRIAL, tuple(range(7)), control=AR), items(7))
    prompts = [p for _, p in items(7)]
    timed = [(prompts.index(p), schedule) for p, schedule in decodes]
    assert timed == [(0, "ar"), (0, "linear"), (1, "linear"), (2, "linear"), (3, "ar"), (3, "linear"),
                     (4, "linear"), (5, "linear"), (6, "ar"), (6, "linear")]
    assert [c["index"] for c in out["controls"]] == [0, 3, 6]
    assert all(c["wall_s"] > 0 and c["new_tokens"] > 0 for c in out["controls"])


def test_a_shard_without_a_control_config_decodes_no_controls(decodes):
    worker = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)
    out = worker.run(Shard(-1, "toy", AR, tuple(range(3))), items(3))
    assert out["controls"] == [] and out["warmup"] == WARMUP and len(decodes) == WARMUP + 3


@pytest.mark.parametrize(("n", "positions"), [(1, [0]), (3, [0, 1, 2]), (7, [0, 3, 6]), (10, [0, 4, 9])])
def test_control_positions_spread_over_the_shard(n, positions):
    assert control_positions(n) == positions
