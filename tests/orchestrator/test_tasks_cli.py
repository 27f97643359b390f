import json
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app

FIXTURES = Path(__file__).parents[1] / "workloads" / "tasks" / "fixtures"
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_list_names_every_task_and_its_source():
    out = run("tasks", "list").output
    for name in ("arith", "gsm8k", "math500", "humaneval", "mbpp", "gpqa-diamond", "writing"):
        assert name in out
    assert "openai/gsm8k" in out and "speed only" in out


def test_sample_from_local_data_is_reproducible():
    args = ("tasks", "sample", "gsm8k", "--data", FIXTURES / "gsm8k.jsonl", "--n", 2, "--seed", 5, "--json")
    first, again = run(*args), run(*args)
    assert first.exit_code == 0 and first.output == again.output
    rows = [json.loads(line) for line in first.output.splitlines()]
    assert len(rows) == 2 and {"index", "prompt", "reference", "answer"} <= rows[0].keys()


def test_score_prints_correct_and_detail(tmp_path):
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text("    return a + b\n")
    bad.write_text("    return a * b\n")
    base = ("tasks", "score", "humaneval", "--data", FIXTURES / "humaneval.jsonl", "--index", 0, "--json")
    assert json.loads(run(*base, "--completion-file", good).output) == {"correct": 1, "detail": "passed"}
    failed = json.loads(run(*base, "--completion-file", bad).output)
    assert failed["correct"] == 0 and "AssertionError" in failed["detail"]


def test_offline_dataset_without_data_is_one_line_exit_2():
    result = run("tasks", "sample", "math500", "--n", 1)
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "--data" in result.output
    assert "HuggingFaceH4/MATH-500" in result.output and "Traceback" not in result.output


def test_bad_index_and_missing_completion_file(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("#### 10")
    data = FIXTURES / "gsm8k.jsonl"
    result = run("tasks", "score", "gsm8k", "--data", data, "--index", 9, "--completion-file", f)
    assert result.exit_code == 2 and "index" in result.output
    result = run("tasks", "score", "gsm8k", "--index", 0, "--completion-file", tmp_path / "none.txt")
    assert result.exit_code == 2 and "--completion-file" in result.output
