import json
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator.analysis.export import is_export
from orchestrator.cli import app

runner = CliRunner()

GOOD = {
    "name": "cli",
    "pairs": ["toy"],
    "task": {"name": "arith", "limit": 2},
    "space": {"schedule": ["linear"], "block": [2], "max_new_tokens": 8},
    "objectives": {"throughput_tps": "max", "accuracy": "max"},
    "search": {"sampler": "grid", "trials": 1, "parallel": 1},
    "baselines": ["ar"],
    "cluster": {"slots": 1},
}


def write(tmp_path, data):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_bad_spec_exits_2_with_one_line_and_creates_nothing(tmp_path):
    bad = {**GOOD, "space": {**GOOD["space"], "leniency": [1.5]}}
    result = runner.invoke(app, ["run", str(write(tmp_path, bad)), "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.startswith("error: spec: space.leniency") and result.output.count("\n") == 1
    assert not (tmp_path / ".specsweep").exists()


@pytest.mark.slow  # a real sweep
def test_run_then_status_frontier_export_and_decode(tmp_path):
    spec = write(tmp_path, GOOD)
    result = runner.invoke(app, ["run", str(spec), "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    again = runner.invoke(app, ["run", str(spec), "--root", str(tmp_path)])
    assert again.exit_code == 2 and "--resume" in again.output
    status = runner.invoke(app, ["status", "cli", "--root", str(tmp_path)])
    assert "1 complete" in status.output and "  toy ar: " in status.output
    front = runner.invoke(app, ["frontier", "cli", "--root", str(tmp_path), "--json"])
    assert front.exit_code == 0 and '"run_id": "' in front.output
    out = tmp_path / "exported"
    exported = runner.invoke(app, ["export", "cli", "--root", str(tmp_path), "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    (path,) = filter(is_export, out.glob("trial*.yaml"))
    document = yaml.safe_load(path.read_text())
    assert document["exact"] is True and document["provenance"]["trial"] == 0
    assert (out / "routes.yaml").is_file() and (out / "plots" / "frontier-throughput.png").is_file()
    # the export decodes with exactly the measured settings: the trial's tokens, at temperature 0
    from orchestrator.sweep.study import load_sweep

    _, study = load_sweep(tmp_path, "cli")
    mlflow = MlflowClient(study.user_attrs["tracking_uri"])
    table = mlflow.download_artifacts(document["provenance"]["mlflow_run_id"], "prompts.jsonl")
    row = json.loads(Path(table).read_text().splitlines()[0])
    args = ["decode", "--pair", "toy", "--config", str(path), "--prompt", row["prompt"], "--json"]
    decoded = runner.invoke(app, args)
    assert decoded.exit_code == 0, decoded.output
    assert json.loads(decoded.stdout.splitlines()[-1])["token_ids"] == row["token_ids"]
    missing = runner.invoke(app, ["status", "nosuch", "--root", str(tmp_path)])
    assert missing.exit_code == 2 and "nosuch" in missing.output


def test_offline_dataset_or_missing_chat_template_exit_2_and_create_nothing(tmp_path):
    for task in ({"name": "gsm8k", "limit": 2}, {"name": "arith", "limit": 2, "chat": True}):
        spec = write(tmp_path, {**GOOD, "task": task})
        result = runner.invoke(app, ["run", str(spec), "--root", str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: ") and result.output.count("\n") == 1, result.output
        assert not (tmp_path / ".specsweep").exists()


@pytest.mark.slow  # a real sweep
def test_a_dflash_pair_sweeps_skips_the_baseline_it_cannot_run_and_exports_serving_settings(
        tmp_path, ray_head):
    data = {**GOOD, "name": "dfl", "pairs": ["toy-dflash"], "baselines": ["ar", "diffusion"],
            "space": {"schedule": ["linear"], "block": [4], "max_new_tokens": 8}}
    result = runner.invoke(app, ["run", str(write(tmp_path, data)), "--root", str(tmp_path),
                                 "--ray-address", ray_head])
    assert result.exit_code == 0, result.output
    from orchestrator.sweep.study import load_sweep

    _, study = load_sweep(tmp_path, "dfl")
    assert sorted(k for k in study.user_attrs if k.startswith("baseline:")) == ["baseline:toy-dflash:ar"]
    out = tmp_path / "exported"
    assert runner.invoke(app, ["export", "dfl", "--root", str(tmp_path), "--out", str(out)]).exit_code == 0
    (path,) = filter(is_export, out.glob("trial*.yaml"))
    serving = yaml.safe_load(path.read_text())["serving"]
    assert serving["vllm"]["speculative_config"]["method"] == "dflash"
    assert serving["vllm"]["speculative_config"]["num_speculative_tokens"] == 3


def recorded(root, complete: bool = True):
    """The state `run` leaves for sweep `cli` (its spec and study journal), recorded through
    Optuna without running anything: one complete trial, or none. Returns the journal."""
    from orchestrator.spec.sweep import parse_spec
    from orchestrator.sweep.study import open_state, open_study, state_dir
    from workloads.decoding.config import DecodeConfig

    spec, path = parse_spec(GOOD), state_dir(root, "cli")
    open_state(path, spec, yaml.safe_dump(GOOD), resume=False, fresh=False)
    study = open_study(path, spec)
    if complete:
        trial = study.ask()
        attrs = {"pair": "toy", "config": DecodeConfig(block=2, max_new_tokens=8).to_dict(), "batch_size": 1,
                 "exact": True, "metrics": {"accuracy": 1.0, "throughput_tps": 100.0}}
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        study.tell(trial, [100.0, 1.0])
    return path / "study.journal"


def one_line(result, text: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output == f"error: {text}\n", result.output


def test_status_on_an_empty_journal_is_one_line(tmp_path):
    journal = recorded(tmp_path)
    journal.write_bytes(b"")
    one_line(runner.invoke(app, ["status", "cli", "--root", str(tmp_path)]),
             f"sweep 'cli': its study journal {journal} is empty (0 bytes: no study recorded); "
             "start over with specsweep run SPEC --fresh")


def test_a_journal_line_that_is_no_record_is_named_with_the_journal(tmp_path):
    journal = recorded(tmp_path)
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join([*lines[:2], b"garbage{\n", *lines[2:]]))
    for command in ("status", "frontier"):
        one_line(runner.invoke(app, [command, "cli", "--root", str(tmp_path)]),
                 f"sweep 'cli': its study journal {journal} is damaged: line 3 is not a journal record "
                 "('garbage{')")


def test_status_counts_a_trial_whose_failure_was_cut_from_the_journal_as_running(tmp_path):
    """A session killed between marking its trial interrupted and recording it failed."""
    from orchestrator.spec.sweep import parse_spec
    from orchestrator.sweep.study import open_study, state_dir

    journal = recorded(tmp_path, complete=False)
    study = open_study(state_dir(tmp_path, "cli"), parse_spec(GOOD))
    trial = study.ask()
    study._storage.set_trial_user_attr(trial._trial_id, "interrupted", True)
    with open(journal, "ab") as f:
        f.write(b'{"op_code":6,"worker_id":"w","trial_id":0,"st')  # the failure, cut short
    status = runner.invoke(app, ["status", "cli", "--root", str(tmp_path)])
    assert status.exit_code == 0, status.output
    counts = "0 complete, 0 stopped by racing, 0 failed, 0 interrupted, 1 running"
    assert counts in status.output, status.output


@pytest.mark.parametrize(("where", "text"), [
    ("accuracy >= 1.2.3", "--where: expected '<metric> >= <number>' or '<metric> >= <number> * ar.<metric>'; "
                          "got 'accuracy >= 1.2.3'"),
    ("accuracy >= 1e999", "--where: 1e999 is not a finite number"),
    ("accuracy >= -1e999 * ar.accuracy", "--where: -1e999 is not a finite number"),
])
def test_export_names_a_where_bound_that_is_no_finite_number(tmp_path, where, text):
    recorded(tmp_path)
    out = tmp_path / "out"
    one_line(runner.invoke(app, ["export", "cli", "--root", str(tmp_path), "--out", str(out), "--where",
                                 where]), text)
    assert not out.exists()


def test_export_takes_a_where_bound_with_an_exponent(tmp_path):
    recorded(tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["export", "cli", "--root", str(tmp_path), "--out", str(out), "--where",
                                 "accuracy >= 5e-1", "--pick", "fastest"])
    assert result.exit_code == 0, result.output
    assert (out / "trial0.yaml").is_file()


@pytest.mark.parametrize("out", ["/proc/specsweep/out", "/sys/kernel/specsweep"])  # not even by root
def test_export_to_a_place_it_cannot_write_names_out_and_leaves_nothing(tmp_path, out):
    recorded(tmp_path)
    result = runner.invoke(app, ["export", "cli", "--root", str(tmp_path), "--out", out])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: --out: cannot write in {out} ("), result.output
    assert result.output.count("\n") == 1
    assert not Path(out).exists()


@pytest.mark.slow
def test_ctrl_c_to_a_tpe_sweep_process_then_resume_asks_the_interrupted_configurations(tmp_path, ray_head):
    """A real `specsweep run` process gets SIGINT with two trials in flight; `--resume`
    finishes the interrupted configurations, which TPE alone would never propose again."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import optuna

    from orchestrator.sweep.study import load_sweep

    data = {**GOOD, "pairs": ["toy", "toy-self"], "task": {"name": "arith", "limit": 16},
            "space": {"schedule": ["linear", "packed"], "block": [2, 4, 8], "steps": [1, 2],
                      "max_new_tokens": 24},
            "search": {"sampler": "tpe", "trials": 5, "parallel": 2, "seed": 3}, "cluster": {"slots": 2}}
    spec = write(tmp_path, data)
    command = [str(Path(sys.executable).parent / "specsweep"), "run", str(spec), "--root", str(tmp_path),
               "--ray-address", ray_head]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    journal = tmp_path / ".specsweep" / "cli" / "study.journal"
    deadline = time.time() + 120
    while time.time() < deadline:  # a trial finished and two more are in flight
        text = journal.read_text() if journal.exists() else ""
        if text.count('"state":1') >= 1 and text.count('"op_code":4') >= 3:
            break
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode != 0, out
    _, study = load_sweep(tmp_path, "cli")
    interrupted = {json.dumps(t.params, sort_keys=True) for t in study.get_trials()
                   if t.user_attrs.get("interrupted")}
    assert interrupted, out[-2000:]
    resumed = subprocess.run(command + ["--resume"], cwd=tmp_path, capture_output=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout.decode()[-2000:]
    _, study = load_sweep(tmp_path, "cli")
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == 5
    assert interrupted <= {json.dumps(t.params, sort_keys=True) for t in complete}


@pytest.mark.slow
def test_sigterm_to_a_sweep_process_acts_as_ctrl_c(tmp_path):
    """SIGTERM once Ray is up (ray.init puts in a handler of its own that exits at once): the
    trial in flight marked interrupted, the parent run KILLED, one line saying how to resume."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from mlflow.tracking import MlflowClient

    data = {**GOOD, "task": {"name": "arith", "limit": 16}, "space": {**GOOD["space"], "block": [2, 4]},
            "search": {"sampler": "grid", "trials": 2, "parallel": 1}}
    command = [str(Path(sys.executable).parent / "specsweep"), "run", str(write(tmp_path, data)), "--root",
               str(tmp_path)]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    journal = tmp_path / ".specsweep" / "cli" / "study.journal"
    deadline = time.time() + 120
    while time.time() < deadline and '"op_code":4' not in (journal.read_text() if journal.exists() else ""):
        time.sleep(0.1)  # a trial is in flight
    os.kill(proc.pid, signal.SIGTERM)
    out = proc.communicate(timeout=60)[0].decode(errors="replace")
    assert proc.returncode == 130, out[-2000:]
    assert ("interrupted: the trials in flight are marked interrupted (`specsweep status` counts them); "
            "continue with specsweep run") in out
    assert "\0" not in out and "Traceback" not in out and "*** " not in out
    client = MlflowClient(f"sqlite:///{tmp_path}/.specsweep/mlflow.db")
    parents = [r for r in client.search_runs([client.get_experiment_by_name("cli").experiment_id])
               if "mlflow.parentRunId" not in r.data.tags]
    assert [r.info.status for r in parents] == ["KILLED"]


def _row(trial, config, batch_size=1, exact=True, **metrics):
    return {"trial": trial, "pair": "toy-dflash", "batch_size": batch_size, "config": config, "exact": exact,
            "objectives": metrics, "metrics": metrics, "tied": False, "timing_flagged": trial == 3}


@pytest.mark.parametrize("served", [False, True])
def test_the_frontier_table_reads_whole_at_80_columns(served):
    from rich.console import Console

    from orchestrator.commands.sweep import _table
    from orchestrator.spec.sweep import parse_spec
    from workloads.decoding.config import DecodeConfig

    spec = parse_spec({**GOOD, "objectives": {"throughput_ratio": "max", "accuracy": "max",
                                              "mean_accept_len": "max"}})
    if served:
        configs = [{"engine": "vllm", "method": "dflash", "num_speculative_tokens": n, "concurrency": c}
                   for n, c in ((7, 1), (5, 16))]
    else:
        configs = [DecodeConfig(schedule="packed", block=8, steps=4, rule=rule, leniency=leniency).to_dict()
                   for rule, leniency in (("lossless", 0.0), ("cactus", 0.25))]
    rows = [_row(n, config, batch_size=16 * n - 15, exact=n == 1, throughput_ratio=2.7033, accuracy=0.70833,
                 mean_accept_len=4.5696) for n, config in enumerate(configs, 1)]
    rows.append(_row(3, configs[0], batch_size=1, throughput_ratio=1.234, accuracy=1.0, mean_accept_len=2.0))
    console = Console(width=80, record=True)
    console.print(_table("frontier of cli (3 trials; 183 s)", spec, rows))
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= 80 and not any("…" in line for line in lines)
    text = "\n".join(lines)
    shown = ("dflash n=7", "conc") if served else ("packed B8 K=4 δ0.25", "packed B8 K=4 ")
    assert all(label in text for label in shown)
    assert "lossy" in text and "flagged" in text  # notes (they may wrap) only where a row has one
