"""Racing in a live sweep (real local Ray, real MLflow store): dominated or infeasible
candidates stop after a rung, are recorded as stopped, and never reach the frontier or an
export; a race interrupted mid-rung resumes without decoding a finished shard again."""

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestrator.analysis.export import export_configs, is_export
from orchestrator.analysis.summary import frontier_rows, status_lines
from orchestrator.search.race import Race, Rung
from orchestrator.spec.sweep import parse_spec
from orchestrator.sweep.driver import Driver
from orchestrator.sweep.study import load_sweep
from orchestrator.sweep.tracking import trial_run_ids

pytestmark = pytest.mark.slow  # real raced sweeps

SPEC = {
    "name": "race",
    "pairs": ["toy"],
    "task": {"name": "arith", "limit": 16},
    "space": {"schedule": ["linear"], "block": [2, 4, 8], "rule": ["lossless", "linear"], "leniency": [1.0],
              "max_new_tokens": 24},
    "objectives": {"throughput_tps": "max", "accuracy": "max"},
    "constraints": ["accuracy >= 0.5"],
    "search": {"sampler": "grid", "trials": 6, "parallel": 1, "seed": 0,
               "racing": {"start": 4, "factor": 2, "alpha": 0.05}},
    "baselines": ["ar"],
    "cluster": {"slots": 1, "resource": "gpu_slot"},
}


def run(root, ray_address, on_progress=None, resume=False):
    driver = Driver(parse_spec(SPEC), yaml.safe_dump(SPEC), root, ray_address, on_progress=on_progress)
    driver.run(resume=resume)
    return driver


class StopMidRace:
    """Interrupt once a racing trial has gone past its first rung."""

    def __call__(self, progress):
        if progress.rungs >= 1 and progress.finished == 0:
            raise KeyboardInterrupt


@pytest.fixture(scope="module")
def raced(tmp_path_factory, ray_head):
    """A racing sweep interrupted mid-rung, then resumed: (root, the resumed driver, the shard
    cache's files and modification times at the interrupt)."""
    root = tmp_path_factory.mktemp("race")
    with pytest.raises(KeyboardInterrupt):
        run(root, ray_head, on_progress=StopMidRace())
    shards = root / ".specsweep" / "race" / "shards"
    before = {p.name: p.stat().st_mtime_ns for p in shards.iterdir()}
    return root, run(root, ray_head, resume=True), before


def test_stopped_trials_are_recorded_and_never_reach_the_frontier_or_an_export(raced, tmp_path):
    root, driver, _ = raced
    spec, study = load_sweep(root, "race")
    stopped = [t for t in study.get_trials() if "racing_stopped" in t.user_attrs]
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert stopped and complete and len(stopped) + len(complete) == 6  # the interrupted one asked again
    for t in stopped:
        assert t.state == optuna.trial.TrialState.PRUNED and t.user_attrs["racing_stopped"] in (4, 8)
        assert t.user_attrs["metrics"]["prompt_decodes"] == t.user_attrs["racing_stopped"]
    assert all(t.user_attrs["metrics"]["prompt_decodes"] == 16 for t in complete)
    client = MlflowClient(driver.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("race").experiment_id])
    tagged = {int(r.data.tags["specsweep.trial"]): r.data.tags.get("specsweep.rung") for r in runs
              if r.data.tags.get("specsweep.racing") == "stopped"}
    assert tagged == {t.number: str(t.user_attrs["racing_stopped"]) for t in stopped}
    rows = frontier_rows(spec, study, trial_run_ids(study))
    assert rows and not {r["trial"] for r in rows} & {t.number for t in stopped}
    export_configs(spec, study, rows, tmp_path)
    exported = {yaml.safe_load(p.read_text())["provenance"]["trial"] for p in tmp_path.glob("trial*.yaml")
                if is_export(p)}
    assert exported and not exported & {t.number for t in stopped}
    lines = status_lines(spec, study)
    assert any(line.startswith("cost: ") and "prompt-decodes" in line for line in lines)


def test_a_race_interrupted_mid_rung_resumes_without_decoding_a_finished_shard_again(raced):
    root, _, before = raced
    assert before
    after = {p.name: p.stat().st_mtime_ns for p in (root / ".specsweep" / "race" / "shards").iterdir()}
    assert all(after[name] == mtime for name, mtime in before.items())  # read back, never decoded again
    spec, study = load_sweep(root, "race")
    assert any(t.user_attrs.get("interrupted") for t in study.get_trials())
    done = [t for t in study.get_trials() if t.state in (optuna.trial.TrialState.COMPLETE,
                                                          optuna.trial.TrialState.PRUNED)
            and not t.user_attrs.get("duplicate")]
    assert len({tuple(sorted(t.params.items())) for t in done}) == 6


def test_a_constraint_on_a_metric_that_is_not_a_sum_never_stops_a_race():
    """throughput_ratio is no sum over prompts: racing cannot test it, so the race goes on
    (the finished trial's value decides the constraint) instead of failing the sweep."""
    race = Race(parse_spec({**SPEC, "constraints": ["throughput_ratio >= 1.0"]}), total=16)
    records = [{"index": i, "correct": 1.0, "new_tokens": 8, "wall_s": 0.1} for i in range(4)]
    assert race.after(0, records, None) == Rung(next=8)  # the next rung


def test_a_rival_of_the_same_law_stops_on_speed_alone_and_one_of_another_law_does_not():
    """Two lossless configurations of one pair answer alike by construction: the slower one
    stops. A lossy rival that merely agreed on these prompts does not stop it."""
    from orchestrator.search.race import law
    from workloads.decoding import DecodeConfig

    race = Race(parse_spec(SPEC), total=32)
    fast = [{"index": i, "correct": 1.0, "new_tokens": 8, "wall_s": 0.05 + 0.001 * i} for i in range(16)]
    slow = [{**r, "wall_s": 2 * r["wall_s"]} for r in fast]
    lossless = law("toy", DecodeConfig(block=4, steps=1))
    lossy = law("toy", DecodeConfig(block=4, steps=1, rule="linear", leniency=1.0))
    assert lossless is not None and lossy is None
    race.after(0, fast, lossy)
    assert race.after(1, slow, lossless) == Rung(next=32)  # only a lossy rival: the race goes on
    race.after(2, fast, lossless)
    assert race.after(3, slow, lossless) == Rung(stopped=True)  # by trial 2, of its own law


def test_a_race_runs_in_a_seeded_order_of_the_prompts():
    from orchestrator.search.racing import race_order

    order = race_order(list(range(64)), seed=0)
    assert sorted(order) == list(range(64)) and order != list(range(64))
    assert order == race_order(list(range(64)), seed=0) != race_order(list(range(64)), seed=1)


def test_rivals_compare_on_the_same_prompts_in_the_races_order():
    """A rival's first n records must be the prompts a candidate measured on n was: records
    kept sorted by prompt index would pair a candidate's first rung (a random sample of the
    prompts) with the rival's lowest indices."""
    from orchestrator.search.race import in_order
    from orchestrator.search.racing import race_order
    from workloads.decoding import DecodeConfig

    order = race_order(list(range(32)), seed=0)
    by_index = [{"index": i, "correct": 1.0, "new_tokens": 8, "wall_s": 0.1} for i in range(32)]
    assert [r["index"] for r in in_order(by_index, order)] == order
    study = optuna.create_study(directions=["maximize", "maximize"])
    trial = study.ask()
    trial.set_user_attr("racing", {c: [r[c] for r in by_index] for c in ("index", "correct", "new_tokens",
                                                                          "wall_s")})
    trial.set_user_attr("config", DecodeConfig(block=4, steps=1).to_dict())
    trial.set_user_attr("pair", "toy")
    study.tell(trial, [1.0, 1.0])
    race = Race(parse_spec(SPEC), total=32)
    race.load(study, order)
    assert [r["index"] for r in race.measured[trial.number]] == order
