"""Bad command-line options, the files they name and the services they point at: refused
before anything decodes or is written (`bad_input` says how)."""

import time

import pytest

from orchestrator.cli import app
from tests.orchestrator.bad_input import GOOD, one_line_error, run_cli, runner, tree


@pytest.mark.parametrize(("flags", "starts"), [
    (["--temperature", "nan"], "temperature: must be a finite number"),
    (["--top-p", "inf"], "top_p: must be a finite number"),
    (["--threshold", "nan"], "threshold: must be a finite number"),
    (["--seed", "-1"], "seed: must be an integer in [0, 4294967295]; got -1"),
    (["--seed", str(2**70)], "seed: must be an integer in [0, 4294967295]; got 1180591620717411303424"),
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


def test_a_config_file_of_nested_aliases_is_refused_before_it_expands(tmp_path):
    """600 bytes of nested anchors stand for 10⁹ nodes: `decode --config` counts them first."""
    bomb = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    bomb.write_text("\n".join(lines) + "\n")
    one_line_error(runner.invoke(app, ["decode", "--pair", "toy", "--config", str(bomb), "--prompt", "1"]),
                   "config: a9: ")


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


def test_an_empty_data_file_is_named(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    one_line_error(runner.invoke(app, ["tasks", "sample", "gsm8k", "--data", str(empty)]),
                   f"data: {empty} holds no records")


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


def test_ray_address_auto_with_no_cluster_is_named_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))  # where `ray start` would leave its address
    one_line_error(run_cli(tmp_path, GOOD, "--ray-address", "auto"),
                   "cluster: the Ray address auto finds no Ray cluster")
    assert tree(tmp_path) == ["spec.yaml"]


def test_a_prompt_past_the_model_positions_is_refused_before_any_decodes(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("1+1=\n2+2=\n" + "1+" * 200 + "1=\n")
    one_line_error(runner.invoke(app, ["decode", "--pair", "toy", "--prompts", str(prompts)]),
                   "prompt 3: 402 tokens + max_new_tokens 64 pass the model's 256 positions")


def test_a_megabyte_prompt_is_refused_before_it_is_tokenised(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("1+" * 5_000_000 + "1=\n")  # 10 MB on one line: minutes of tokenising
    began = time.perf_counter()
    one_line_error(runner.invoke(app, ["decode", "--pair", "toy", "--prompts", str(prompts)]),
                   "prompt 1: 10,000,002 characters (at least ")
    assert time.perf_counter() - began < 30


@pytest.mark.parametrize("python", ["missing", "/usr/bin/true", "/usr/bin/python3"])
def test_a_serving_sweep_without_vllm_set_up_is_refused_before_anything_is_written(tmp_path, monkeypatch,
                                                                                  python):
    monkeypatch.setenv("SPECSWEEP_VLLM_PYTHON", str(tmp_path / python) if python == "missing" else python)
    served = {**GOOD, "pairs": ["toy-dflash"], "space": {"engine": ["vllm"], "method": ["none"],
                                                         "max_new_tokens": 8}}
    result = run_cli(tmp_path, served)
    one_line_error(result, "engine: vllm is not set up (")
    assert "run `make vllm`" in result.output
    assert tree(tmp_path) == ["spec.yaml"]


def test_conform_with_more_drafts_than_the_drafter_was_trained_for_is_refused_before_it_loads():
    one_line_error(runner.invoke(app, ["conform", "--draft-tokens", "8"]),
                   "--draft-tokens: 8 is more than the 7 drafts pair toy-dflash's DFlash drafter was trained "
                   "for")


def test_bench_batch_serves_in_vllm_only_a_dflash_pair():
    one_line_error(runner.invoke(app, ["bench", "batch", "--pair", "toy", "--vllm"]),
                   "--vllm: vLLM serves a DFlash pair's drafter; toy is a two-model pair")


def test_bench_batch_with_vllm_not_set_up_says_how_before_it_decodes(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSWEEP_VLLM_PYTHON", str(tmp_path / "missing"))
    one_line_error(runner.invoke(app, ["bench", "batch", "--pair", "toy-dflash", "--vllm"]),
                   "engine: vllm is not set up")
