"""A sweep under the vllm engine, for real (`make vllm`): Ray worker, vLLM servers, MLflow."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import torch
import yaml
from mlflow.tracking import MlflowClient

from orchestrator.analysis.export import is_export
from orchestrator.cli import app
from orchestrator.engines.serverpool import START_TRIES
from orchestrator.stored import logged_records
from tests.needs_vllm import needs_vllm
from tests.orchestrator.test_sweep_cli import GOOD, runner, write
from tests.workloads.serving.faults import KillOnce, log_folder
from workloads.models.pair import load_tokenizer
from workloads.models.pairspec import BUNDLED
from workloads.serving.counters import Counters
from workloads.serving.ports import free_port
from workloads.serving.served import logged_args, option_args
from workloads.serving.venv import vllm_python
from workloads.serving.vllm import CPU_KV_CACHE_GIB, QUIET_ENV

pytestmark = needs_vllm


def _engines(logs: Path) -> set[str]:
    """The vLLM engine processes of the servers logging under `logs`, not another test's running
    beside this one."""
    found = subprocess.run(["pgrep", "-f", "VLLM::"], capture_output=True, text=True).stdout.split()
    mine = set()
    for pid in found:
        with contextlib.suppress(OSError):
            if os.path.dirname(log_folder(int(pid))) == os.path.realpath(logs):
                mine.add(pid)
    return mine


def test_a_vllm_sweep_logs_serving_metrics_and_exports_what_ran(tmp_path, ray_head):
    data = {**GOOD, "name": "served", "pairs": ["toy-dflash"], "task": {"name": "arith", "limit": 4},
            # DFlash alone, so that its trial is the frontier whatever a loaded machine makes of
            # its speed (a trial without speculation, served by its control's server: the rate
            # sweep's, test_sustain.py)
            "space": {"engine": ["vllm"], "method": ["dflash"], "num_speculative_tokens": [3],
                      "concurrency": [2], "max_new_tokens": 16},
            "search": {"sampler": "grid", "trials": 1, "parallel": 1},
            "objectives": {"throughput_ratio": "max", "accuracy": "max"},
            "serving": {"repeats": 2}}  # C A C A C: the counters checked below stay the first load's
    result = runner.invoke(app, ["run", str(write(tmp_path, data)), "--root", str(tmp_path),
                                 "--ray-address", ray_head])
    assert result.exit_code == 0, result.output
    deadline = time.monotonic() + 15
    logs = tmp_path / ".specsweep" / "served" / "logs"
    while _engines(logs) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _engines(logs)  # the workers' servers left no engine process behind
    assert not list((tmp_path / ".specsweep" / "served" / "logs").glob("vllm-*"))  # nor a log folder
    assert "dflash n=3" in result.output and "1/1 trials, failed 0" in result.output
    assert "x the speed of vLLM without speculation" in result.output.replace("\n", " ")  # per concurrency
    client = MlflowClient(f"sqlite:///{tmp_path}/.specsweep/mlflow.db")
    runs = {r.data.params.get("method"): r for r in client.search_runs(
        [client.get_experiment_by_name("served").experiment_id]) if r.data.params.get("engine") == "vllm"}
    assert set(runs) == {"dflash"}
    drafted = runs["dflash"].data.metrics
    for name in ("throughput_tps", "throughput_ratio", "ttft_s", "tpot_s", "latency_p99_s", "engine_start_s"):
        assert name in drafted, name
    assert drafted["acceptance_rate"] > 0 and drafted["mean_accept_len"] > 0  # vLLM's counters, summed
    if not torch.cuda.is_available():  # vLLM CPU's rms_norm defect: found, worked around, and said so
        assert "DFlashQwen3Model" in runs["dflash"].data.tags["specsweep.vllm_workaround"]
    out = tmp_path / "exported"
    # as a process of its own, the verifying server's engine core killed once its load is in
    # flight: the load is served again on a restarted server and the export verified all the same
    export = subprocess.Popen([sys.executable, "-c", "from orchestrator.cli import main; main()", "export",
                               "served", "--root", str(tmp_path), "--out", str(out), "--verify-vllm", "4",
                               "--check-sglang"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fault = KillOnce(tmp_path / ".specsweep" / "served" / "logs", export.pid)
    said, err = export.communicate(timeout=900)
    assert fault.killed and export.returncode == 0, err[-3000:]  # vLLM decodes each export as measured
    assert "starting it again and retrying the load once" in err and "Traceback" not in err
    shown = said + err
    exported = [yaml.safe_load(p.read_text()) for p in out.glob("trial*.yaml") if is_export(p)]
    verified = [d["serving"]["vllm"]["verified"] for d in exported if "verified" in d["serving"]["vllm"]]
    assert verified and all(v["passed"] and v["tokens_identical"] == v["compared"] for v in verified)
    assert "PASS" in shown and "prompts 0-1: same" not in shown
    checked = [d["serving"]["sglang_checked"] for d in exported if "sglang_checked" in d["serving"]]
    assert checked and {c["read"]["speculative_algorithm"] for c in checked} == {"DFLASH"}
    assert "sglang 0.5.23 parser reads speculative_algorithm DFLASH" in shown
    speculative = [d["serving"]["vllm"]["speculative_config"] for d in exported]
    assert {"method": "dflash", "num_speculative_tokens": 3} in [
        {k: s[k] for k in ("method", "num_speculative_tokens")} for s in speculative if s]
    # the DFlash export as a user deploys it: `vllm serve --config` of the file beside it
    document = next(d for d in exported if d["serving"]["vllm"]["speculative_config"])
    name = f"trial{document['provenance']['trial']}"
    assert list(document)[0] == "serve" and document["serve"] == f"vllm serve --config {name}.vllm.yaml"
    options = yaml.safe_load((out / f"{name}.vllm.yaml").read_text())
    assert options["speculative-config"]["num_speculative_tokens"] == 3
    measured = ("float32", True, True)  # the engine settings of the measurement
    assert (options["dtype"], options["enforce-eager"], options["no-enable-prefix-caching"]) == measured
    if not torch.cuda.is_available():  # measured with CPU_ENV's KV cache: the file says so
        assert options["kv-cache-memory-bytes"] == CPU_KV_CACHE_GIB << 30
    assert f"{name}.vllm.yaml: vllm serve --config served every option as written" in shown
    record = logged_records(client, document["provenance"]["mlflow_run_id"])[0]
    tokens, counters, served = serve_export(out / f"{name}.vllm.yaml", record, 16, tmp_path / "served.log")
    assert tokens == record["token_ids"]  # what the sweep measured, token for token
    assert counters.drafted > 0 and counters.iterations > 0  # and it speculated
    # the served engine's settings against the sweep's own server's, for every option written
    ran = json.loads(client.get_run(document["provenance"]["mlflow_run_id"]).data.tags["specsweep.vllm_args"])
    print(f"\n{'setting':<24} {'measured server':<40} {'vllm serve --config':<40}")
    for key, written in option_args(options).items():
        # CPU_ENV sized the measured server's KV cache; the file writes the same size as an option
        want = ran.get(key, written) if key == "kv_cache_memory_bytes" else ran[key]
        print(f"{key:<24} {str(want)[:40]:<40} {str(served.get(key, '(default)'))[:40]:<40}")
        assert served.get(key) == want == written, key


def test_a_sweep_whose_server_cannot_start_exits_1_with_vllms_reason(tmp_path, ray_head):
    verifier = tmp_path / "verifier"  # transformers loads it by model_type; vLLM by its architecture
    shutil.copytree(BUNDLED["toy-self"]["model"], verifier)
    config = json.loads((verifier / "config.json").read_text())
    (verifier / "config.json").write_text(json.dumps({**config, "architectures": ["NoSuchForCausalLM"]}))
    data = {**GOOD, "name": "unservable", "pairs": [{"name": "odd", "model": str(verifier)}],
            "space": {"engine": ["vllm"], "method": ["none"], "max_new_tokens": 8}}
    result = runner.invoke(app, ["run", str(write(tmp_path, data)), "--root", str(tmp_path),
                                 "--ray-address", ray_head])
    assert result.exit_code == 1, result.output
    # a VllmServer's log folder, one a start, kept under the sweep's state where it failed
    started = list((tmp_path / ".specsweep" / "unservable" / "logs").glob("vllm-*/server.log"))
    assert len(started) == START_TRIES  # the shard and its retry; the error each time vLLM's own
    said = result.output.replace("\n", "")
    assert ("error: every trial failed (1); the first (trial 0): ServingError: engine: vllm exited (1) while "
            "starting: pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig: "
            "Value error, Model architectures ['NoSuchForCausalLM'] are not supported") in said


CLIENT = """
import json, sys
from openai import OpenAI
url, model, prompt, tokens = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
answer = OpenAI(base_url=url + "/v1", api_key="unused").completions.create(
    model=model, prompt=prompt, max_tokens=tokens, temperature=0, extra_body={"return_token_ids": True,
                                                                              "skip_special_tokens": False})
print(json.dumps(answer.choices[0].model_dump()["token_ids"]))
"""


def serve_export(config: Path, record: dict, tokens: int, log: Path) -> tuple[list[int], Counters, dict]:
    """`vllm serve --config` of an exported file, as a user runs it (on a free port, its output
    to `log`): the tokens the `openai` client gets for `record`'s prompt, the spec-decode
    counters after it, and the non-default arguments the served engine logged."""
    python = vllm_python()
    port = free_port()
    command = [str(python.parent / "vllm"), "serve", "--config", str(config), "--port", str(port)]
    with open(log, "w") as output:
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                                  start_new_session=True, env={**os.environ, **QUIET_ENV})  # no CPU_ENV
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            assert server.poll() is None, "vllm serve exited"
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2):
                break
            time.sleep(1)
        model = yaml.safe_load(config.read_text())["model"]
        ids = load_tokenizer("toy-dflash")(record["prompt"]).input_ids
        answer = subprocess.run([str(python), "-c", CLIENT, url, model, json.dumps(ids), str(tokens)],
                                capture_output=True, text=True, check=True)
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            counters = Counters.parse(response.read().decode())
        return json.loads(answer.stdout), counters, logged_args(log.read_text())
    finally:
        os.killpg(server.pid, signal.SIGKILL)



def test_the_multi_fidelity_search_on_vllm_times_only_what_can_win(tmp_path, ray_head):
    """Every grid point becomes a trial; acceptance of each measured untimed (mean accept
    length on the pruned ones as vLLM counts it on the timed ones of the same setting); the
    drafter with the largest step gain is timed at every concurrency, the rest only where
    their bound could still beat the pick; `none` is the controls' measurement."""
    data = {**GOOD, "name": "served-mf", "pairs": ["toy-dflash"], "task": {"name": "arith", "limit": 6},
            "space": {"engine": ["vllm"], "method": ["none", "dflash"], "num_speculative_tokens": [1, 7],
                      "concurrency": [1, 3], "max_new_tokens": 16},
            "objectives": {"throughput_tps": "max", "accuracy": "max"},
            "search": {"sampler": "multifidelity", "trials": 6, "parallel": 1}, "serving": {"repeats": 1}}
    result = runner.invoke(app, ["run", str(write(tmp_path, data)), "--root", str(tmp_path),
                                 "--ray-address", ray_head])
    assert result.exit_code == 0, result.output
    client = MlflowClient(f"sqlite:///{tmp_path}/.specsweep/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("served-mf").experiment_id])
    trials = {(r.data.params["method"], r.data.params.get("num_speculative_tokens"),
               r.data.params["concurrency"]): r for r in runs if "method" in r.data.params}
    assert len(trials) == 6 and all(r.info.status == "FINISHED" for r in trials.values())
    timed = {k for k, r in trials.items() if "throughput_tps" in r.data.metrics}
    assert {("dflash", "7", "1"), ("dflash", "7", "3")} <= timed and len(timed) < 6
    for key, run in trials.items():
        if key not in timed:
            assert run.data.metrics["accuracy"] >= 0 and "specsweep.fidelity" in run.data.tags
    untimed = [r for k, r in trials.items() if k[0] == "dflash" and k not in timed]
    for run in untimed:
        assert run.data.metrics["mean_accept_len"] > 0
    status = runner.invoke(app, ["status", "served-mf", "--root", str(tmp_path)])
    assert "multi-fidelity: 6 candidates profiled untimed" in status.output, status.output
    cost = json.loads(runner.invoke(app, ["status", "served-mf", "--root", str(tmp_path), "--json"]).output)
    # one start for the control, one for DFlash: n = 7, drafting 1 at run time where asked
    assert cost["server_starts"] == 2 and cost["trials"]["complete"] + cost["trials"]["pruned"] == 6, cost
    assert cost["engine_seconds"] > cost["server_start_s"] > 0  # the starts are part of what it cost
    # the text's seconds to 0.1 s, the JSON's to 0.001 s (78.2504 s: "78.3" and 78.25, which
    # formats as "78.2")
    said = re.search(r"(\d+) server starts \(([\d.]+) s of them\)", status.output)
    assert int(said[1]) == cost["server_starts"] and abs(float(said[2]) - cost["server_start_s"]) <= 0.05
