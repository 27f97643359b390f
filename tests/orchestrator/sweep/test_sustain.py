"""The sustained-rate search on a real vLLM server (`make vllm`), over a sweep's settings."""

import json
import subprocess
import sys

from mlflow.tracking import MlflowClient

from orchestrator.cli import app
from orchestrator.stored import logged_records
from tests.needs_vllm import on_vllm
from tests.orchestrator.bad_input import one_line_error
from tests.orchestrator.test_sweep_cli import GOOD, runner, write
from tests.workloads.serving.faults import KillOnce


def test_bad_ranges_and_unknown_sweeps_are_refused_in_one_line(tmp_path):
    root = ["--root", str(tmp_path)]
    one_line_error(runner.invoke(app, ["sustain", "nosuch", *root, "--low", "4", "--high", "2"]),
                   "--high: 2 must be above --low (4)")
    one_line_error(runner.invoke(app, ["sustain", "nosuch", *root]), "sweep 'nosuch': no state")
    one_line_error(runner.invoke(app, ["sustain", "nosuch", *root, "--high", "inf"]),
                   "--high: inf is not a finite rate (requests/s)")


@on_vllm
def test_a_rate_sweep_logs_goodput_and_the_search_finds_each_settings_sustained_rate(tmp_path, ray_head):
    data = {**GOOD, "name": "rated", "pairs": ["toy-dflash"], "task": {"name": "arith", "limit": 4},
            # without speculation a trial is served by its control's server: one start, not two
            "space": {"engine": ["vllm"], "method": ["none"], "concurrency": [2], "request_rate": [50.0],
                      "max_new_tokens": 8},
            "search": {"sampler": "grid", "trials": 1, "parallel": 1},
            "objectives": {"request_goodput": "max", "tpot_p99_s": "min"},
            "serving": {"slo": {"ttft_p99_s": 60.0, "tpot_p99_s": 60.0}}}  # every load meets it
    result = runner.invoke(app, ["run", str(write(tmp_path, data)), "--root", str(tmp_path),
                                 "--ray-address", ray_head])
    assert result.exit_code == 0, result.output
    client = MlflowClient(f"sqlite:///{tmp_path}/.specsweep/mlflow.db")
    experiment = client.get_experiment_by_name("rated").experiment_id
    trial = next(r for r in client.search_runs([experiment]) if r.data.params.get("request_rate") == "50.0")
    metrics = trial.data.metrics
    assert metrics["request_goodput"] == metrics["request_throughput"] > 0 and metrics["slo_met"] == 1.0
    assert {"ttft_p99_s", "tpot_p90_s", "itl_p50_s", "slo_attainment"} <= set(metrics)
    assert "acceptance_rate" not in metrics  # no speculation: no spec-decode counters
    # its own loads against the control's, though one server serves both: never the same walls
    assert metrics["throughput_ratio"] != 1.0
    records = logged_records(client, trial.info.run_id)
    # TTFT counts from each request's arrival, its wait for a slot included
    assert len(records) == 4 and all(r["queue_s"] >= 0 and r["ttft_s"] >= r["queue_s"] for r in records)

    # as a process of its own, its server's engine core killed once a load is in flight: the
    # probe is served again on a restarted server and the search ends as it would have
    cli = [sys.executable, "-c", "from orchestrator.cli import main; main()"]
    sustain = subprocess.Popen([*cli, "sustain", "rated", "--root", str(tmp_path), "--low", "1",
                                "--high", "100", "--steps", "1", "--repeats", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fault = KillOnce(tmp_path / ".specsweep" / "rated" / "logs", sustain.pid)
    out, err = sustain.communicate(timeout=600)
    assert fault.killed and sustain.returncode == 0, err[-3000:]
    # said under a load (with the probes, on stdout) or by the pool that found it dead (a warning)
    assert "starting it again" in out + err and "Traceback" not in err
    assert "sustained 100 requests/s" in out  # the highest rate, both its loads within the SLO
    found = json.loads((tmp_path / ".specsweep/rated/sustained.json").read_text())
    assert [(f["sustained_rate"], f["probes"]) for f in found] == [(100.0, [[100.0, 2, 2]])]
    run = next(r for r in client.search_runs([experiment]) if r.data.tags.get("specsweep.sustain"))
    assert run.data.metrics["sustained_rate"] == 100.0 and run.data.params["concurrency"] == "2"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "loads_met")] == [2.0]
    shown = runner.invoke(app, ["frontier", "rated", "--root", str(tmp_path)])
    assert "req/s" in shown.output and "sustained rates within" in shown.output
