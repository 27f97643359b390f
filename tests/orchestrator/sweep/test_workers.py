"""The worker body without Ray: warm-up once per process and pair, never timed or recorded;
controls beside a trial's decodes."""

import pickle

import pytest

from orchestrator.engines import SPECSWEEP, specsweep
from orchestrator.engines.shard import Shard
from orchestrator.engines.specsweep import WARMUP, control_positions
from orchestrator.sweep.workers import PairWorker
from workloads.decoding import DecodeConfig
from workloads.tasks import get_task

TRIAL = DecodeConfig(schedule="linear", block=4, max_new_tokens=12)
AR = DecodeConfig(schedule="ar", max_new_tokens=12)


@pytest.fixture
def decodes(monkeypatch):
    """Every decode a worker makes, in order: (prompt, schedule)."""
    made = []
    real = specsweep.decode_batch

    def counting(pair, prompts, config, seeds):
        made.extend((prompt, config.schedule) for prompt in prompts)
        return real(pair, prompts, config, seeds=seeds)

    monkeypatch.setattr(specsweep, "decode_batch", counting)
    return made


def items(n: int):
    examples = get_task("arith").examples(n=n, seed=0)
    return [(e, e.prompt) for e in examples]


def test_a_shard_reaches_its_worker_with_its_configs_as_built(monkeypatch):
    """Ray pickles a shard; its DecodeConfigs arrive equal and are not validated again."""
    shard = Shard(0, "toy", TRIAL, (0, 1), control=AR)

    def again(config):
        raise AssertionError("validated again")

    monkeypatch.setattr(DecodeConfig, "validate", again)
    arrived = pickle.loads(pickle.dumps(shard))
    assert arrived == shard and type(arrived.config) is DecodeConfig and type(arrived.control) is DecodeConfig


def test_warm_up_runs_once_per_process_and_is_never_recorded(decodes):
    worker = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)
    shard = Shard(0, "toy", TRIAL, tuple(range(5)), control=AR)
    first = worker.run([shard], items(5))[0]
    assert first["warmup"] == 2 * WARMUP  # the trial's config and the control's, on WARMUP prompts
    assert len(first["records"]) == 5 and len(first["controls"]) == 3
    assert len(decodes) == 2 * WARMUP + 5 + 3
    again = worker.run([shard], items(5))[0]
    assert again["warmup"] == 0 and len(decodes) == 2 * WARMUP + 2 * (5 + 3)
    restarted = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)  # what Ray builds after a restart
    assert restarted.run([shard], items(5))[0]["warmup"] == 2 * WARMUP
    # records and controls are the timed decodes, the same on a warm and a restarted worker
    assert [r["token_ids"] for r in first["records"]] == [r["token_ids"] for r in again["records"]]


def test_controls_run_right_before_the_trial_decode_of_their_prompt(decodes):
    worker = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)
    worker.measurer(SPECSWEEP).warm.add("toy")
    out = worker.run([Shard(0, "toy", TRIAL, tuple(range(7)), control=AR)], items(7))[0]
    prompts = [p for _, p in items(7)]
    timed = [(prompts.index(p), schedule) for p, schedule in decodes]
    assert timed == [(0, "ar"), (0, "linear"), (1, "linear"), (2, "linear"), (3, "ar"), (3, "linear"),
                     (4, "linear"), (5, "linear"), (6, "ar"), (6, "linear")]
    assert [c["index"] for c in out["controls"]] == [0, 3, 6]
    assert all(c["wall_s"] > 0 and c["new_tokens"] > 0 for c in out["controls"])


def test_a_shard_without_a_control_config_decodes_no_controls(decodes):
    worker = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)
    out = worker.run([Shard(-1, "toy", AR, tuple(range(3)))], items(3))[0]
    assert out["controls"] == [] and out["warmup"] == WARMUP and len(decodes) == WARMUP + 3


@pytest.mark.parametrize(("n", "positions"), [(1, [0]), (3, [0, 1, 2]), (7, [0, 3, 6]), (10, [0, 4, 9])])
def test_control_positions_spread_over_the_shard(n, positions):
    assert control_positions(n) == positions


def test_a_batched_shard_decodes_whole_batches_with_a_control_per_batch(decodes):
    """Batch size 4 over 10 prompts: batches of 4, 4 and 2, each record naming its batch and
    that batch's wall time; controls are `ar` on the same batches; greedy tokens are those of
    batch size 1."""
    worker = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)
    worker.measurer(SPECSWEEP).warm.add("toy")
    batched = worker.run([Shard(0, "toy", TRIAL, tuple(range(10)), control=AR, batch_size=4)], items(10))[0]
    assert [r["batch"] for r in batched["records"]] == [0] * 4 + [4] * 4 + [8] * 2
    assert [c["index"] for c in batched["controls"]] == [0, 4, 8]
    for record in batched["records"]:
        assert 0 < record["wall_s"] <= record["batch_wall_s"]
    alone = worker.run([Shard(0, "toy", TRIAL, tuple(range(10)))], items(10))[0]
    assert [r["token_ids"] for r in batched["records"]] == [r["token_ids"] for r in alone["records"]]


def test_records_carry_each_iterations_accepted_draft_tokens(decodes):
    """A drafting shard's records keep `accept_lengths`, plain ints, one per iteration,
    summing to the prompt's accepted tokens; an `ar` shard's are empty."""
    worker = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)
    worker.measurer(SPECSWEEP).warm.add("toy")
    for record in worker.run([Shard(0, "toy", TRIAL, tuple(range(3)))], items(3))[0]["records"]:
        lengths = record["accept_lengths"]
        assert all(type(a) is int for a in lengths)
        assert len(lengths) == record["iterations"] and sum(lengths) == record["accepted"]
    (plain,) = worker.run([Shard(-1, "toy", AR, (0,))], items(1))
    assert all(r["accept_lengths"] == [] for r in plain["records"])
