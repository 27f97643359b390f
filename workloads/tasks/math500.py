"""`math500`: the MATH-500 subset (HuggingFaceH4/MATH-500, test: 500).

Zero-shot prompt asking for a boxed final answer; the last `\\boxed{}` of the completion
must be equivalent to the reference answer after normalization (answers.py).
"""

from __future__ import annotations

from workloads.tasks.answers import equivalent, last_boxed
from workloads.tasks.base import DatasetTask, Example, Score
from workloads.tasks.loading import Source

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


class Math500(DatasetTask):
    name = "math500"
    source = Source("HuggingFaceH4/MATH-500", "test", ("problem", "solution", "answer"))

    def make_example(self, index: int, record: dict) -> Example:
        prompt = f"{record['problem'].strip()}\n{INSTRUCTION}\n"
        return Example(index, prompt, record["solution"], str(record["answer"]),
                       {"subject": record.get("subject"), "level": record.get("level")})

    def judge(self, example: Example, completion: str) -> Score:
        got = last_boxed(completion)
        if got is None:
            return Score(0.0, "no \\boxed{} answer")
        return Score(float(equivalent(got, example.answer)), f"answer {got!r} (expected {example.answer!r})")
