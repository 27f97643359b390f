"""Bad input: exit 2, one line naming the field or the file, no traceback, nothing written."""

import os

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.orchestrator import test_sweep_cli

runner = CliRunner()

GOOD = {**test_sweep_cli.GOOD, "name": "bad"}  # the smallest sweep that runs


def one_line_error(result, starts: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {starts}"), result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output


def tree(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)


SPECS = {
    "nan temperature": ({"space": {**GOOD["space"], "temperature": float("nan")}}, "spec: space.temperature"),
    "inf leniency": ({"space": {**GOOD["space"], "rule": ["linear"], "leniency": [float("inf")]}},
                     "spec: space.leniency"),
    "constraint number": ({"constraints": ["accuracy >= 1.2.3"]}, "spec: constraints"),
    "seed past 2**32": ({"search": {**GOOD["search"], "seed": 2**80}}, "spec: search.seed"),
    "negative seed": ({"search": {**GOOD["search"], "seed": -1}}, "spec: search.seed"),
    "batch size 0": ({"space": {**GOOD["space"], "batch_size": [1, 0]}}, "spec: space.batch_size: 0 is not"),
    "fractional batch size": ({"space": {**GOOD["space"], "batch_size": 2.5}}, "spec: space.batch_size: 2.5"),
    "batch size past the prompts": ({"space": {**GOOD["space"], "batch_size": [1, 10**12]}},
                                    "spec: space.batch_size: 1000000000000 is more than the task's 2 prompts "
                                    "(task.limit); at most 2"),
    "nan range low": ({"space": {**GOOD["space"], "temperature": {"low": float("nan"), "high": 1,
                                                                  "step": 0.5}}},
                      "spec: space.temperature: a range needs finite low, high, step>0 (low: "),
    "inf range step": ({"space": {**GOOD["space"], "top_p": {"low": 0.5, "high": 1, "step": float("inf")}}},
                       "spec: space.top_p: a range needs finite low, high, step>0 (step: "),
    "range width past a float": ({"space": {**GOOD["space"], "temperature": {"low": -1e308, "high": 1e308,
                                                                             "step": 1}}},
                                 "spec: space.temperature: the range holds over 1e+308 values"),
    "prompt past the positions": ({"space": {**GOOD["space"], "max_new_tokens": [8, 251]}},
                                  "spec: task: example 0 (pair toy): 6 tokens + max_new_tokens 251 pass the "
                                  "model's 256 positions"),
}


@pytest.mark.parametrize("case", list(SPECS))
def test_bad_spec_values(tmp_path, case):
    change, starts = SPECS[case]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**GOOD, **change}))
    before = tree(tmp_path)
    one_line_error(runner.invoke(app, ["run", str(path), "--root", str(tmp_path)]), starts)
    assert tree(tmp_path) == before


def test_a_constraint_with_an_exponent_is_still_accepted(tmp_path):
    from orchestrator.sweep.spec import constraint_terms, parse_spec

    spec = parse_spec({**GOOD, "constraints": ["accuracy >= 5e-1", "latency_s <= .25"]})
    assert constraint_terms(spec.constraints) == [("accuracy", ">=", 0.5), ("latency_s", "<=", 0.25)]


def test_a_binary_spec_names_the_file(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"\xff\xfe\x00binary")
    result = runner.invoke(app, ["run", str(path), "--root", str(tmp_path)])
    one_line_error(result, f"spec: {path} is not UTF-8")


@pytest.mark.parametrize(("flags", "starts"), [
    (["--temperature", "nan"], "temperature: must be a finite number"),
    (["--top-p", "inf"], "top_p: must be a finite number"),
    (["--threshold", "nan"], "threshold: must be a finite number"),
])
def test_bad_decode_flags(flags, starts):
    one_line_error(runner.invoke(app, ["decode", "--pair", "toy", "--prompt", "1+1=", *flags]), starts)


def test_binary_prompts_and_config_files_name_the_file(tmp_path):
    binary = tmp_path / "prompts.txt"
    binary.write_bytes(b"\xff\xfe\x00binary")
    one_line_error(runner.invoke(app, ["decode", "--pair", "toy", "--prompts", str(binary)]),
                   f"--prompts: {binary} is not UTF-8")
    one_line_error(runner.invoke(app, ["decode", "--pair", "toy", "--config", str(binary), "--prompt", "1"]),
                   f"config: {binary} is not UTF-8")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("finished")
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    result = runner.invoke(app, ["run", str(path), "--root", str(root)])
    assert result.exit_code == 0, result.output
    return root


def test_a_frontier_at_a_batch_size_the_sweep_lacks_is_refused(finished):
    one_line_error(runner.invoke(app, ["frontier", "bad", "--root", str(finished), "--batch-size", "8"]),
                   "--batch-size: 8 is not a batch size of sweep bad (1)")


@pytest.mark.parametrize(("flags", "starts"), [
    (["--floors", "nan,inf,-1"], "--floors: accuracy floors must lie in [0, 1]"),
    (["--floors", "0.5,x"], "--floors: comma-separated numbers"),
])
def test_bad_export_floors(finished, tmp_path, flags, starts):
    out = tmp_path / "out"
    one_line_error(runner.invoke(app, ["export", "bad", "--root", str(finished), "--out", str(out), *flags]),
                   starts)
    assert not out.exists()


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


def run_cli(tmp_path, data, *flags):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return runner.invoke(app, ["run", str(path), "--root", str(tmp_path), *flags])


@pytest.mark.parametrize(("flags", "starts"), [
    (["--tracking-uri", "bogus://x"], "tracking: 'bogus://x' is not a tracking URI"),
    (["--tracking-uri", "http://127.0.0.1:9"], "tracking: cannot reach the tracking server at http://127.0.0.1:9"),
    (["--ray-address", "127.0.0.1:1"], "cluster: cannot reach the Ray cluster at 127.0.0.1:1"),
    (["--ray-address", "nonsense"], "cluster: the Ray address must be"),
])
def test_unreachable_services_are_named_in_seconds_and_nothing_is_written(tmp_path, flags, starts):
    import time

    begin = time.time()
    result = run_cli(tmp_path, GOOD, *flags)
    one_line_error(result, starts)
    assert time.time() - begin < 15
    assert not (tmp_path / ".specsweep").exists()


def test_a_limit_past_a_million_prompts_is_refused(tmp_path):
    huge = {**GOOD, "task": {"name": "arith", "limit": 10**15}}
    one_line_error(run_cli(tmp_path, huge), "spec: task.limit")


def test_an_empty_data_file_is_named(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    one_line_error(runner.invoke(app, ["tasks", "sample", "gsm8k", "--data", str(empty)]),
                   f"data: {empty} holds no records")


@pytest.mark.slow  # a real sweep
def test_resume_with_a_changed_spec_is_refused_and_changes_nothing(finished):
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
    more = run_cli(finished, {**GOOD, "search": {**GOOD["search"], "trials": 2}}, "--resume")
    assert more.exit_code == 0, more.output  # the budget may change


def test_a_sweep_in_use_is_refused_to_a_second_run_or_fresh(finished):
    from orchestrator.sweep.driver import Driver
    from orchestrator.sweep.spec import parse_spec

    holder = Driver(parse_spec(GOOD), yaml.safe_dump(GOOD), finished)
    holder.lock.acquire()
    try:
        state = sorted(os.listdir(finished / ".specsweep" / "bad"))
        for flags in (["--fresh"], ["--resume"]):
            one_line_error(run_cli(finished, GOOD, *flags), f"sweep 'bad' is in use by pid {os.getpid()}")
        assert sorted(os.listdir(finished / ".specsweep" / "bad")) == state
    finally:
        holder.lock.release()


def test_decode_settings_a_pair_cannot_run_are_refused_before_it_loads(monkeypatch):
    import workloads.models

    def never(*args, **kwargs):
        raise AssertionError("the pair was loaded")

    monkeypatch.setattr(workloads.models, "load_pair", never)
    decode = ["decode", "--prompt", "1", "--pair"]
    one_line_error(runner.invoke(app, [*decode, "toy", "--schedule", "quadratic"]),
                   "schedule: quadratic needs a dual-mode (self) pair")
    one_line_error(runner.invoke(app, [*decode, "toy-self", "--schedule", "packed", "--steps", "2"]),
                   "steps: packed on a dual-mode pair")


@pytest.mark.slow  # a real sweep
def test_a_journal_cut_mid_record_is_reported_and_repaired_by_resume(finished):
    import optuna

    from orchestrator.sweep.study import load_sweep

    state = finished / ".specsweep" / "bad"
    journal = state / "study.journal"
    complete = optuna.trial.TrialState.COMPLETE
    before = len(load_sweep(finished, "bad")[1].get_trials(states=(complete,)))
    data = journal.read_bytes()
    journal.write_bytes(data[:-20])  # the last record (the last trial's tell) cut short
    status = runner.invoke(app, ["status", "bad", "--root", str(finished)])
    assert status.exit_code == 0 and "warning: the study journal's last record is cut short" in status.output
    resumed = run_cli(finished, {**GOOD, "search": {**GOOD["search"], "trials": 2}}, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert (state / "study.journal.damaged").read_bytes() == data[:-20]
    assert journal.read_bytes().endswith(b"\n")
    _, study = load_sweep(finished, "bad")
    assert len(study.get_trials(states=(complete,))) == before  # the cut trial ran again from the cache
    assert study.get_trials(states=(optuna.trial.TrialState.RUNNING,)) == []
    again = runner.invoke(app, ["status", "bad", "--root", str(finished)])
    assert "warning" not in again.output and f"{before} complete" in again.output


@pytest.fixture
def broken_model(tmp_path):
    """A copy of the bundled dual-mode model, to damage."""
    import shutil
    from pathlib import Path

    import workloads.models

    source = Path(workloads.models.__file__).with_name("toy") / "self"
    return Path(shutil.copytree(source, tmp_path / "model"))


@pytest.mark.parametrize(("damage", "starts"), [
    ("config", "spec: pairs: pair.model: {dir}/config.json is not valid JSON"),
    ("weights", "spec: pairs: pair.model: {dir}/model.safetensors is cut short"),
    ("dtype", "spec: pairs: pair.model: {dir}/model.safetensors is not a readable safetensors file (tensor "),
])
def test_a_damaged_model_directory_is_named_before_anything_runs(tmp_path, broken_model, damage, starts):
    weights = broken_model / "model.safetensors"
    if damage == "config":
        (broken_model / "config.json").write_text('{"architectures": [')
    elif damage == "weights":
        weights.write_bytes(weights.read_bytes()[:-1000])
    else:  # one tensor's header says F16 while its bytes hold F32
        weights.write_bytes(weights.read_bytes().replace(b'"F32"', b'"F16"', 1))
    spec = {**GOOD, "pairs": [{"name": "broken", "model": str(broken_model)}], "space": {
        "schedule": ["linear"], "block": [2], "max_new_tokens": 8}}
    root = tmp_path / "root"
    root.mkdir()
    one_line_error(run_cli(root, spec), starts.format(dir=broken_model))
    assert os.listdir(root) == ["spec.yaml"]


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


def test_a_damaged_copy_in_the_hub_cache_is_named_before_anything_runs(tmp_path, broken_model, monkeypatch):
    """A hub id resolved offline from the local hub cache gets the same checks as a local path."""
    import shutil

    import huggingface_hub.constants

    cache = tmp_path / "hub"
    snapshot = cache / "models--org--broken" / "snapshots" / "abc123"
    shutil.copytree(broken_model, snapshot)
    (cache / "models--org--broken" / "refs").mkdir()
    (cache / "models--org--broken" / "refs" / "main").write_text("abc123")
    weights = snapshot / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    spec = {**GOOD, "pairs": [{"name": "broken", "model": "org/broken"}], "space": {
        "schedule": ["linear"], "block": [2], "max_new_tokens": 8}}
    root = tmp_path / "root"
    root.mkdir()
    one_line_error(run_cli(root, spec), f"spec: pairs: pair.model: {weights} is cut short")
    assert os.listdir(root) == ["spec.yaml"]


def test_a_standalone_drafter_given_as_a_dflash_drafter_is_named_before_anything_runs(tmp_path):
    from workloads.models.pair import BUNDLED

    toy = BUNDLED["toy"]
    spec = {**GOOD, "pairs": [{"name": "wrong", **toy, "profile": {"family": "dflash"}}]}
    one_line_error(run_cli(tmp_path, spec), f"spec: pairs: pair.drafter: {toy['drafter']} is not a DFlash "
                                            "drafter")
    assert tree(tmp_path) == ["spec.yaml"]


def test_ray_address_auto_with_no_cluster_is_named_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))  # where `ray start` would leave its address
    one_line_error(run_cli(tmp_path, GOOD, "--ray-address", "auto"),
                   "cluster: the Ray address auto finds no Ray cluster")
    assert tree(tmp_path) == ["spec.yaml"]


def test_a_tracking_store_that_cannot_be_created_is_named_before_anything_is_written(tmp_path):
    (tmp_path / "a-file").write_text("")
    store = tmp_path / "a-file" / "mlflow.db"
    one_line_error(run_cli(tmp_path, GOOD, "--tracking-uri", f"sqlite:///{store}"),
                   f"tracking: cannot create the store {store} ({tmp_path / 'a-file'} is not a directory)")
    assert tree(tmp_path) == ["a-file", "spec.yaml"]


@pytest.mark.slow  # a real sweep
def test_a_model_whose_weights_fail_to_load_in_the_workers_leaves_nothing(tmp_path, broken_model):
    """Weights that hold none of the model's tensors pass every check a spec can make without
    loading them; the workers refuse them, and the new sweep's state and MLflow runs go."""
    import torch
    from mlflow.tracking import MlflowClient
    from safetensors.torch import save_file

    save_file({"unrelated": torch.zeros(4)}, broken_model / "model.safetensors")
    spec = {**GOOD, "pairs": [{"name": "empty", "model": str(broken_model)}], "space": {
        "schedule": ["linear"], "block": [2], "max_new_tokens": 8}}
    root = tmp_path / "root"
    root.mkdir()
    result = run_cli(root, spec)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"error: pair.model: {broken_model} lacks 39 of the model's weights"), last
    assert not (root / ".specsweep" / "bad").exists() and not (root / ".specsweep" / "bad.lock").exists()
    client = MlflowClient(f"sqlite:///{root / '.specsweep' / 'mlflow.db'}")
    assert client.search_runs([client.get_experiment_by_name("bad").experiment_id]) == []


def test_a_prompt_past_the_model_positions_is_refused_before_any_decodes(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("1+1=\n2+2=\n" + "1+" * 5000 + "1=\n")
    one_line_error(runner.invoke(app, ["decode", "--pair", "toy", "--prompts", str(prompts)]),
                   "prompt 3: 10002 tokens + max_new_tokens 64 pass the model's 256 positions")


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
    from orchestrator.sweep.spec import parse_spec
    from orchestrator.sweep.study import open_state, open_study, state_dir

    data = {**GOOD, "name": "grid", **change}
    spec = parse_spec(data)
    open_state(state_dir(tmp_path, "grid"), spec, yaml.safe_dump(data), resume=False, fresh=False)
    open_study(state_dir(tmp_path, "grid"), spec)  # a sweep stopped before its first trial
    result = runner.invoke(app, ["bench", "search", "grid", "--root", str(tmp_path), "--racing"])
    one_line_error(result, starts)
