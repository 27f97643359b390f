import json

from typer.testing import CliRunner

from orchestrator.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_tasks_list_names_arith():
    result = run("tasks", "list")
    assert result.exit_code == 0 and "arith" in result.output.split()


def test_tasks_sample_prints_json_lines():
    result = run("tasks", "sample", "arith", "--n", "4", "--seed", "2", "--json")
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 0 and len(records) == 4
    assert all(set(r) == {"index", "prompt", "reference", "answer"} for r in records)
    assert all(r["reference"].endswith("#" + r["answer"]) for r in records)


def test_unknown_task_is_one_line_and_exit_code_2():
    result = run("tasks", "sample", "nope", "--n", "1")
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: task: unknown task 'nope'; known tasks: arith, ")
    assert result.stderr.count("\n") == 1


def test_decode_json_has_text_ids_and_every_measurement():
    from workloads.decoding import MEASUREMENTS

    result = run("decode", "--pair", "toy", "--prompt", "12+34=", "--schedule", "linear", "--block", "4",
                 "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert {"text", "token_ids", *MEASUREMENTS} <= set(record)
    assert record["text"] == "12+34=46#46"


def test_decode_self_speculative_schedules_report_their_rows():
    rows = {}
    for schedule in ("linear", "packed", "quadratic"):
        result = run("decode", "--pair", "toy-self", "--prompt", "12+34=", "--schedule", schedule,
                     "--block", "4", "--json")
        assert result.exit_code == 0, result.output
        record = json.loads(result.stdout)
        assert record["text"] == "12+34=46#46" and record["exact"]
        rows[schedule] = record["rows"] / record["iterations"]
    assert rows["quadratic"] > 2 * rows["packed"]
    result = run("decode", "--pair", "toy-self", "--prompt", "1", "--schedule", "packed", "--steps", "2")
    assert result.exit_code == 2 and "steps: packed on a dual-mode pair" in result.stderr


def test_decode_num_samples_uses_consecutive_seeds():
    result = run("decode", "--pair", "toy", "--prompt", "5", "--temperature", "1", "--max-new-tokens", "4",
                 "--seed", "7", "--num-samples", "3", "--json")
    assert [json.loads(line)["seed"] for line in result.stdout.splitlines()] == [7, 8, 9]


def test_decode_reads_text_and_jsonl_prompt_files(tmp_path):
    text = tmp_path / "prompts.txt"
    text.write_text("1+2=\n\n3+4=\n")
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text('{"prompt": "1+2="}\n{"prompt": "3+4="}\n')
    for path in (text, jsonl):
        result = run("decode", "--pair", "toy", "--prompts", str(path), "--json")
        assert [json.loads(line)["prompt"] for line in result.stdout.splitlines()] == ["1+2=", "3+4="]


def test_decode_config_file_sets_and_flags_override(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("pair: toy\nconfig:\n  schedule: packed\n  block: 3\n  max_new_tokens: 5\n")
    result = run("decode", "--config", str(config), "--prompt", "1+2=", "--max-new-tokens", "2", "--json")
    record = json.loads(result.stdout)
    assert record["new_tokens"] == 2 and record["stop_reason"] == "length"


def test_decode_of_a_vllm_options_file_points_at_the_export_beside_it(tmp_path):
    options = tmp_path / "trial3.vllm.yaml"
    options.write_text("model: /m/verifier\ndtype: float32\nenforce-eager: true\n")
    result = run("decode", "--config", str(options), "--prompt", "1")
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: config: {options} holds vLLM's options (for `vllm serve "
                                     f"--config`); specsweep decodes the export beside it: specsweep decode "
                                     f"--config {tmp_path / 'trial3.yaml'}")


def test_decode_bad_value_names_the_field():
    result = run("decode", "--pair", "toy", "--prompt", "1", "--rule", "linear", "--leniency", "1.5")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: leniency: λ for rule linear must be in [0, 1]; got 1.5"


def test_decode_unknown_pair_is_refused():
    result = run("decode", "--pair", "/no/such/pair", "--prompt", "1")
    assert result.exit_code == 2 and "pair: unknown pair" in result.stderr


def test_toy_eval_on_a_missing_directory_is_refused(tmp_path):
    result = run("toy", "eval", "--dir", str(tmp_path))
    assert result.exit_code == 2 and "holds no trained toy pair" in result.stderr


def test_every_command_is_at_most_60_lines():
    """A command parses its options and calls the modules that do the work; a pipeline longer
    than this belongs in the module it calls."""
    import ast
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "orchestrator" / "commands"
    nodes = [(p, node) for p in sorted(folder.glob("*.py")) for node in ast.parse(p.read_text()).body]
    long = [f"{path.name}:{node.name} {node.end_lineno - node.lineno + 1}" for path, node in nodes
            if isinstance(node, ast.FunctionDef) and node.decorator_list
            and node.end_lineno - node.lineno + 1 > 60]
    assert long == []
