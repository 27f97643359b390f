"""Bad input that reaches a sweep's state or a store: a finished sweep asked for what it
lacks, resumed changed, in use or damaged; roots and stores that cannot be written; grids
`bench search` cannot replay (`bad_input` says how)."""

import os

import pytest
import yaml

from orchestrator.cli import app
from tests.orchestrator.bad_input import GOOD, one_line_error, run_cli, runner, tree


@pytest.fixture(scope="module")
def finished(tmp_path_factory, ray_head):
    root = tmp_path_factory.mktemp("finished")
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    result = runner.invoke(app, ["run", str(path), "--root", str(root), "--ray-address", ray_head])
    assert result.exit_code == 0, result.output
    return root


def test_a_misspelt_sweep_name_is_answered_with_the_closest_sweep(finished):
    one_line_error(runner.invoke(app, ["status", "bda", "--root", str(finished)]),
                   f"sweep 'bda': no state in {finished}/.specsweep/bda (did you mean 'bad'?) (run it "
                   "first: ")


def test_a_frontier_at_a_batch_size_the_sweep_lacks_is_refused(finished):
    one_line_error(runner.invoke(app, ["frontier", "bad", "--root", str(finished), "--batch-size", "8"]),
                   "--batch-size: 8 is not a batch size of sweep bad (1)")


def test_a_frontier_predicted_from_a_sweep_without_vllm_trials_is_refused(finished):
    one_line_error(runner.invoke(app, ["frontier", "bad", "--root", str(finished), "--predict-vllm", "bad"]),
                   "--predict-vllm: bad has no finished vLLM trials")


@pytest.mark.parametrize(("flags", "starts"), [
    (["--floors", "nan,inf,-1"], "--floors: accuracy floors must lie in [0, 1]"),
    (["--floors", "0.5,x"], "--floors: comma-separated numbers"),
    (["--predict-vllm", "nosuch"], "sweep 'nosuch': no state"),
    (["--predict-vllm", "bad"], "--predict-vllm: bad has no finished vLLM trials"),
])
def test_bad_export_options(finished, tmp_path, flags, starts):
    out = tmp_path / "out"
    one_line_error(runner.invoke(app, ["export", "bad", "--root", str(finished), "--out", str(out), *flags]),
                   starts)
    assert not out.exists()


@pytest.mark.parametrize(("sweep", "starts"), [
    ("nosuch", "sweep 'nosuch': no state"),
    ("bad", "SERVING_SWEEP: bad has no finished vLLM trials"),
])
def test_bench_predict_needs_a_finished_vllm_sweep(finished, sweep, starts):
    one_line_error(runner.invoke(app, ["bench", "predict", sweep, "--root", str(finished)]), starts)


def test_export_never_overwrites_without_force(finished, tmp_path):
    file = tmp_path / "a-file"
    file.write_text("mine")
    one_line_error(runner.invoke(app, ["export", "bad", "--root", str(finished), "--out", str(file)]),
                   f"--out: {file} is a file")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    one_line_error(runner.invoke(app, ["export", "bad", "--root", str(finished), "--out", str(mine)]),
                   f"--out: {mine} already holds files")
    assert tree(mine) == ["notes.txt"] and file.read_text() == "mine"
    forced = runner.invoke(app, ["export", "bad", "--root", str(finished), "--out", str(mine), "--force"])
    assert forced.exit_code == 0 and "routes.yaml" in tree(mine)
    assert (mine / "notes.txt").read_text() == "keep"


@pytest.mark.slow  # a real sweep
def test_resume_with_a_changed_spec_is_refused_and_changes_nothing(finished, ray_head):
    from mlflow.tracking import MlflowClient

    state = finished / ".specsweep" / "bad"
    stored = (state / "spec.yaml").read_text()
    journal = (state / "study.journal").read_bytes()
    changed = {**GOOD, "space": {**GOOD["space"], "block": [2, 4]}, "objectives": {"latency_s": "min",
                                                                                  "accuracy": "max"}}
    result = run_cli(finished, changed, "--resume")
    one_line_error(result, "spec: --resume with a changed spec (objectives.latency_s, "
                           "objectives.throughput_tps, space.block)")
    assert (state / "spec.yaml").read_text() == stored and (state / "study.journal").read_bytes() == journal
    client = MlflowClient(f"sqlite:///{finished / '.specsweep' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("bad")
    parents = client.search_runs([experiment.experiment_id], "tags.`specsweep.role` = 'sweep'")
    assert [r.info.status for r in parents] == ["FINISHED"]
    more = run_cli(finished, {**GOOD, "search": {**GOOD["search"], "trials": 2}}, "--resume",
                   "--ray-address", ray_head)
    assert more.exit_code == 0, more.output  # the budget may change


def test_a_sweep_in_use_is_refused_to_a_second_run_or_fresh(finished):
    from orchestrator.spec.sweep import parse_spec
    from orchestrator.sweep.driver import Driver

    holder = Driver(parse_spec(GOOD), yaml.safe_dump(GOOD), finished)
    holder.lock.acquire()
    try:
        state = sorted(os.listdir(finished / ".specsweep" / "bad"))
        for flags in (["--fresh"], ["--resume"]):
            one_line_error(run_cli(finished, GOOD, *flags), f"sweep 'bad' is in use by pid {os.getpid()}")
        assert sorted(os.listdir(finished / ".specsweep" / "bad")) == state
    finally:
        holder.lock.release()


@pytest.mark.slow  # a real sweep
def test_a_journal_cut_and_left_locked_is_reported_and_repaired_by_resume(finished, ray_head, caplog):
    import optuna

    from orchestrator.sweep.study import load_sweep

    state = finished / ".specsweep" / "bad"
    journal = state / "study.journal"
    complete = optuna.trial.TrialState.COMPLETE
    before = len(load_sweep(finished, "bad")[1].get_trials(states=(complete,)))
    data = journal.read_bytes()
    journal.write_bytes(data[:-20])  # the last record (the last trial's tell) cut short
    # and its lock left taken, as by a writer killed inside its append: the resume must not wait on it
    os.symlink(journal, state / "study.journal.lock")
    status = runner.invoke(app, ["status", "bad", "--root", str(finished)])
    assert status.exit_code == 0 and "warning: the study journal's last record is cut short" in status.output
    optuna.logging.enable_propagation()  # Optuna's warnings on a lock it waits for, to caplog
    try:
        resumed = run_cli(finished, {**GOOD, "search": {**GOOD["search"], "trials": 2}}, "--resume",
                          "--ray-address", ray_head)
    finally:
        optuna.logging.disable_propagation()
    assert resumed.exit_code == 0, resumed.output
    # never waited on: Optuna warns after 10 s and takes a lock by force after 30
    assert not [r for r in caplog.records if "lock file" in r.getMessage()]
    assert (state / "study.journal.damaged").read_bytes() == data[:-20]
    assert journal.read_bytes().endswith(b"\n") and not os.path.lexists(state / "study.journal.lock")
    _, study = load_sweep(finished, "bad")
    assert len(study.get_trials(states=(complete,))) == before  # the cut trial ran again from the cache
    assert study.get_trials(states=(optuna.trial.TrialState.RUNNING,)) == []
    again = runner.invoke(app, ["status", "bad", "--root", str(finished)])
    assert "warning" not in again.output and f"{before} complete" in again.output


def test_a_read_only_root_is_one_line(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    result = runner.invoke(app, ["run", str(path), "--root", "/sys/kernel"])  # not writable, even by root
    one_line_error(result, "--root: cannot write the sweep state in /sys/kernel/.specsweep/bad")


def test_a_full_disk_during_setup_leaves_nothing(tmp_path, monkeypatch):
    import orchestrator.sweep.study

    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(orchestrator.sweep.study, "write_atomic", full)
    one_line_error(run_cli(tmp_path, GOOD), "--root: cannot write the sweep state")
    assert tree(tmp_path) == ["spec.yaml"]


def test_a_tracking_store_that_cannot_be_created_is_named_before_anything_is_written(tmp_path):
    (tmp_path / "a-file").write_text("")
    store = tmp_path / "a-file" / "mlflow.db"
    one_line_error(run_cli(tmp_path, GOOD, "--tracking-uri", f"sqlite:///{store}"),
                   f"tracking: cannot create the store {store} ({tmp_path / 'a-file'} is not a directory)")
    assert tree(tmp_path) == ["a-file", "spec.yaml"]


def test_bench_search_names_a_trial_without_its_per_prompt_records(finished):
    import shutil

    artifacts = finished / ".specsweep" / "artifacts"
    aside = finished / "artifacts-aside"
    shutil.move(artifacts, aside)
    try:
        one_line_error(runner.invoke(app, ["bench", "search", "bad", "--root", str(finished), "--racing"]),
                       "--racing: trial 0 of bad has no prompts.jsonl in MLflow")
    finally:
        shutil.move(aside, artifacts)


@pytest.mark.parametrize(("change", "starts"), [
    ({"space": {**GOOD["space"], "block": [2, 4]}}, "--racing: grid measured 0 of its 2 grid points"),
    ({"search": {**GOOD["search"], "racing": {"start": 1}}}, "--racing: grid raced its trials"),
    ({"space": {**GOOD["space"], "batch_size": [1, 2]}}, "--racing: grid measured batch sizes 1, 2"),
])
def test_bench_search_racing_refuses_a_grid_it_cannot_replay(tmp_path, change, starts):
    from orchestrator.spec.sweep import parse_spec
    from orchestrator.sweep.study import open_state, open_study, state_dir

    data = {**GOOD, "name": "grid", **change}
    spec = parse_spec(data)
    open_state(state_dir(tmp_path, "grid"), spec, yaml.safe_dump(data), resume=False, fresh=False)
    open_study(state_dir(tmp_path, "grid"), spec)  # a sweep stopped before its first trial
    result = runner.invoke(app, ["bench", "search", "grid", "--root", str(tmp_path), "--racing"])
    one_line_error(result, starts)


def test_a_sweep_whose_start_failed_before_its_workers_is_not_state(tmp_path):
    from orchestrator.spec.file import load_spec
    from orchestrator.sweep.study import open_state, open_study, state_dir

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    spec, where = load_spec(path), state_dir(tmp_path, GOOD["name"])
    open_state(where, spec, path.read_text(), resume=False, fresh=False)
    open_study(where, spec)  # what a session leaves when it dies starting Ray: a study, no trial, no run
    open_state(where, spec, path.read_text(), resume=False, fresh=False)  # a plain rerun starts it anew
    study = open_study(where, spec)
    study.set_user_attr("parent_run", "abc")  # a run existed: that is state
    with pytest.raises(ValueError, match="already has state"):
        open_state(where, spec, path.read_text(), resume=False, fresh=False)


def test_exporting_a_sweep_with_no_finished_trial_says_so(tmp_path):
    import optuna

    from orchestrator.spec.file import load_spec
    from orchestrator.sweep.study import open_state, open_study, state_dir

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    spec, where = load_spec(path), state_dir(tmp_path, GOOD["name"])
    open_state(where, spec, path.read_text(), resume=False, fresh=False)
    study = open_study(where, spec)
    for error in ("engine: vllm exited (1) while starting: no such architecture", "a later one"):
        trial = study.ask()
        trial.set_user_attr("error", error)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    out = tmp_path / "out"
    result = runner.invoke(app, ["export", GOOD["name"], "--root", str(tmp_path), "--out", str(out)])
    one_line_error(result, "sweep 'bad' has no frontier config to export: every trial failed (2); the first "
                           "(trial 0): engine: vllm exited (1) while starting: no such architecture "
                           "(specsweep status bad)")
    assert not out.exists()
    status = runner.invoke(app, ["status", GOOD["name"], "--root", str(tmp_path)])
    assert "trial 0 failed: engine: vllm exited (1) while starting" in status.output
    assert "trial 1 failed: a later one" in status.output


@pytest.mark.parametrize("damage", ["truncated", "header overwritten"])
def test_a_damaged_mlflow_store_is_one_line_naming_it_for_every_reader(finished, tmp_path, damage):
    import shutil

    store = finished / ".specsweep" / "mlflow.db"
    shutil.copy(store, tmp_path / "kept.db")
    try:
        if damage == "truncated":
            os.truncate(store, 20_000)
        else:
            with open(store, "r+b") as f:
                f.write(b"garbage!garbage!")
        why = "database disk image is malformed" if damage == "truncated" else "file is not a database"
        line = f"tracking: the MLflow store {store} is damaged ({why}); restore it from a copy"
        out = tmp_path / "out"
        for command in (["frontier", "bad"], ["export", "bad", "--out", str(out)],
                        ["run", str(finished / "spec.yaml"), "--resume"]):
            one_line_error(runner.invoke(app, [*command, "--root", str(finished)]), line)
        assert not out.exists()
    finally:
        shutil.copy(tmp_path / "kept.db", store)


def test_a_sweep_whose_spec_was_deleted_is_named_as_such(finished):
    spec = finished / ".specsweep" / "bad" / "spec.yaml"
    kept = spec.read_bytes()
    spec.unlink()
    try:
        one_line_error(runner.invoke(app, ["status", "bad", "--root", str(finished)]),
                       f"sweep 'bad': its state in {finished}/.specsweep/bad has no spec.yaml (deleted?)")
    finally:
        spec.write_bytes(kept)


def test_a_copied_state_root_reads_its_own_mlflow_store(finished, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    result = runner.invoke(app, ["status", "bad", "--root", str(copy)])
    assert result.exit_code == 0, result.output
    assert f"MLflow: sqlite:///{copy.resolve()}/.specsweep/mlflow.db" in result.output.replace("\n", "")
    original = runner.invoke(app, ["status", "bad", "--root", str(finished)])
    assert f"MLflow: sqlite:///{finished.resolve()}/.specsweep/mlflow.db" in original.output.replace("\n", "")
