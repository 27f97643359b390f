"""Bad sweep specs, and bad pairs they name (model files, hub copies, drafters): refused
before anything runs (`bad_input` says how)."""

import os

import pytest
import yaml

from orchestrator.cli import app
from tests.needs_vllm import on_vllm
from tests.orchestrator.bad_input import GOOD, one_line_error, run_cli, runner, tree

SERVED = {"engine": ["vllm"], "method": ["none", "dflash"], "num_speculative_tokens": [3], "concurrency": [1],
          "max_new_tokens": 8}

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
    "concurrency past the prompts": (
        {"pairs": ["toy-dflash"], "space": {**SERVED, "concurrency": [1, 10**6]}},
        "spec: space.concurrency: 1000000 is more than the task's 2 prompts (task.limit); at most 2"),
    "drafts past the positions": (
        {"pairs": ["toy-dflash"],
         "space": {**SERVED, "method": ["ngram"], "num_speculative_tokens": [3, 1000]}},
        "spec: space.num_speculative_tokens: 1000 drafts do not fit in pair toy-dflash's 256 positions"),
    "drafts past the drafter's block": (
        {"pairs": ["toy-dflash"], "space": {**SERVED, "num_speculative_tokens": [7, 8]}},
        "spec: space.num_speculative_tokens: 8 is more than the 7 drafts pair toy-dflash's DFlash drafter "
        "was trained for (its block_size 8); at most 7"),
    "a method the pair cannot serve": (
        {"space": {**SERVED, "method": ["none", "eagle3"]}},
        "spec: space.method: no pair of this sweep can be served with eagle3 (toy serves none, ngram)"),
    "a task seed past 2**32": ({"task": {**GOOD["task"], "seed": 2**70}}, "spec: task.seed"),
    "a misspelt key": ({"serach": {}},
                       "spec: serach: Extra inputs are not permitted (did you mean 'search'?)"),
    "a misspelt nested key": ({"search": {**GOOD["search"], "samplr": "tpe"}},
                              "spec: search.samplr: Extra inputs are not permitted (did you mean "
                              "'sampler'?)"),
    "a key in the wrong place": ({"slo": {"ttft_p99_s": 1.0}},
                                 "spec: slo: Extra inputs are not permitted (it belongs at serving.slo)"),
    "a misspelt dimension": ({"space": {**GOOD["space"], "stpes": [1]}},
                             "spec: space.stpes: unknown dimension (did you mean 'steps'?); known: "),
    "a multi-fidelity search over both engines": (
        {"pairs": ["toy-dflash"], "search": {**GOOD["search"], "sampler": "multifidelity"},
         "space": {**SERVED, "engine": ["vllm", "specsweep"]}},
        "spec: search.sampler: multifidelity: times one kind of engine; list vllm alone in space.engine, or "
        "sweep specsweep's engine in another spec"),
    "a multi-fidelity search on vLLM over temperatures": (
        {"pairs": ["toy-dflash"], "search": {**GOOD["search"], "sampler": "multifidelity"},
         "space": {**SERVED, "temperature": [0, 1]}},
        "spec: search.sampler: multifidelity on vLLM: space.temperature must hold one value (it searches "
        "method, num_speculative_tokens and concurrency)"),
    "a multi-fidelity search on vLLM that races": (
        {"pairs": ["toy-dflash"], "search": {**GOOD["search"], "sampler": "multifidelity", "racing": {}},
         "space": SERVED},
        "spec: search.sampler: multifidelity on vLLM: times whole trials and never races; remove "
        "search.racing"),
    "a multi-fidelity search on vLLM sampled": (
        {"pairs": ["toy-dflash"], "search": {**GOOD["search"], "sampler": "multifidelity"},
         "space": {**SERVED, "temperature": [1]}},
        "spec: search.sampler: multifidelity on vLLM: space.temperature must be 0 (acceptance is measured "
        "greedy)"),
    "a multi-fidelity search on vLLM for a timed metric it cannot know": (
        {"pairs": ["toy-dflash"], "search": {**GOOD["search"], "sampler": "multifidelity"}, "space": SERVED,
         "objectives": {"throughput_tps": "max", "latency_s": "min"}},
        "spec: search.sampler: multifidelity on vLLM: objectives: throughput_ratio (or throughput_tps): max, "
        "and otherwise only metrics known without timing (accuracy, tokens_per_nfe, acceptance_rate, "
        "mean_accept_len, prompt_decodes)"),
    "a multi-fidelity search over batch sizes": (
        {"search": {**GOOD["search"], "sampler": "multifidelity"},
         "space": {**GOOD["space"], "batch_size": [1, 2]}},
        "spec: search.sampler: multifidelity: races at batch size 1 only (space.batch_size)"),
    "a multi-fidelity search on a metric no prompt sums": (
        {"search": {**GOOD["search"], "sampler": "multifidelity"},
         "objectives": {"throughput_ratio": "max", "accuracy": "max"}},
        "spec: search.sampler: multifidelity: objective throughput_ratio is not a sum over prompts"),
    "a DSpark draft top-k of 0": (
        {"pairs": ["toy-dspark"], "space": {**SERVED, "method": ["dspark"], "dspark_draft_topk": [0]}},
        "spec: space.dspark_draft_topk: must be an integer from 1 to 1,048,576 (no vocabulary is larger); "
        "got 0"),
    "a DSpark draft top-k of 1e9": (
        {"pairs": ["toy-dspark"], "space": {**SERVED, "method": ["dspark"], "dspark_draft_topk": [10**9]}},
        "spec: space.dspark_draft_topk: must be an integer from 1 to 1,048,576"),
    "a DSpark draft top-k in words": (
        {"pairs": ["toy-dspark"], "space": {**SERVED, "method": ["dspark"], "dspark_draft_topk": ["two"]}},
        "spec: space.dspark_draft_topk: must be an integer from 1 to 1,048,576"),
    "a DSpark setting with no DSpark method": (
        {"pairs": ["toy-dflash"], "space": {**SERVED, "dspark_draft_topk": [2]}},
        "spec: space.dspark_draft_topk: a setting of method dspark, which space.method does not list"),
    "adaptive verification in words": (
        {"pairs": ["toy-dspark"], "space": {**SERVED, "method": ["dspark"],
                                            "enable_adaptive_verification": ["yes"]}},
        "spec: space.enable_adaptive_verification: true or false; got 'yes'"),
    "a request rate of 1e-9": (
        {"pairs": ["toy-dflash"], "space": {**SERVED, "request_rate": [1e-9]}},
        "spec: space.request_rate: at least 0.01 requests/s (one every 100 s); got 1e-09"),
    "a request rate that spreads a load over half an hour": (
        {"pairs": ["toy-dflash"], "task": {"name": "arith", "limit": 100},
         "space": {**SERVED, "request_rate": [8, 0.05]}},
        "spec: space.request_rate: 0.05 requests/s spreads a load of 100 requests over 1,980 s; at most "
        "1,800 s: raise the rate to 0.055 or more"),
    "a constraint no trial can meet": (
        {"constraints": ["accuracy >= 1.5"]},
        "spec: constraints: 'accuracy >= 1.5': no trial can meet it (accuracy is [0, 1])"),
    "a latency below zero": (
        {"constraints": ["latency_s <= -1"]},
        "spec: constraints: 'latency_s <= -1': no trial can meet it (latency_s is >= 0)"),
    "a task mix past its prompts": (
        {"task": {"name": "mix", "limit": 1000}}, "spec: task.limit: mix takes 3 to 36 examples"),
    "calibration without a multi-fidelity search": (
        {"search": {**GOOD["search"], "fidelity": {"calibration": 3}}},
        "spec: search.fidelity: applies to sampler multifidelity only"),
    "one calibration configuration": (
        {"search": {**GOOD["search"], "sampler": "multifidelity", "fidelity": {"calibration": 1}}},
        "spec: search.fidelity.calibration: Input should be greater than or equal to 2"),
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
    from orchestrator.analysis.outcome import constraint_terms
    from orchestrator.spec.sweep import parse_spec

    spec = parse_spec({**GOOD, "constraints": ["accuracy >= 5e-1", "latency_s <= .25"]})
    assert constraint_terms(spec.constraints) == [("accuracy", ">=", 0.5), ("latency_s", "<=", 0.25)]


def test_a_binary_spec_names_the_file(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"\xff\xfe\x00binary")
    result = runner.invoke(app, ["run", str(path), "--root", str(tmp_path)])
    one_line_error(result, f"spec: {path} is not UTF-8")


def test_a_limit_past_a_million_prompts_is_refused(tmp_path):
    huge = {**GOOD, "task": {"name": "arith", "limit": 10**15}}
    one_line_error(run_cli(tmp_path, huge), "spec: task.limit")


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
    from workloads.models.pairspec import BUNDLED

    toy = BUNDLED["toy"]
    spec = {**GOOD, "pairs": [{"name": "wrong", **toy, "profile": {"family": "dflash"}}]}
    one_line_error(run_cli(tmp_path, spec), f"spec: pairs: pair.drafter: {toy['drafter']} is not a DFlash "
                                            "drafter")
    assert tree(tmp_path) == ["spec.yaml"]


@pytest.mark.slow  # a real sweep
def test_a_model_whose_weights_fail_to_load_in_the_workers_leaves_nothing(tmp_path, broken_model, ray_head):
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
    result = run_cli(root, spec, "--ray-address", ray_head)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"error: pair.model: {broken_model} lacks 39 of the model's weights"), last
    assert not (root / ".specsweep" / "bad").exists() and not (root / ".specsweep" / "bad.lock").exists()
    client = MlflowClient(f"sqlite:///{root / '.specsweep' / 'mlflow.db'}")
    assert client.search_runs([client.get_experiment_by_name("bad").experiment_id]) == []


@on_vllm
def test_adaptive_verification_on_vllms_cpu_build_is_refused_before_any_state(tmp_path):
    """vLLM's CPU build refuses DSpark's adaptive verification at start: refused before a
    baseline, a server start or any state."""
    spec = {**GOOD, "pairs": ["toy-dspark"],
            "space": {**SERVED, "method": ["dspark"], "enable_adaptive_verification": [False, True]}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    before = tree(tmp_path)
    one_line_error(runner.invoke(app, ["run", str(path), "--root", str(tmp_path)]),
                   "spec: space.enable_adaptive_verification: true is refused by vLLM's CPU build")
    assert tree(tmp_path) == before
