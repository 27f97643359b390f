"""`gsm8k`: grade-school math word problems (openai/gsm8k, main, test: 1,319).

Zero-shot prompt asking for a boxed final answer. The scorer takes the last `\\boxed{}`,
else the number after the last `####`, else the last number, and compares it with the
reference answer as an exact number (`1,000` = `1000.00`, `3/4` = `0.75`).
"""

from __future__ import annotations

import re

from workloads.tasks.answers import equivalent, gsm8k_answer
from workloads.tasks.base import DatasetTask, Example, Score
from workloads.tasks.loading import Source

INSTRUCTION = "Solve the following problem step by step. Put your final answer within \\boxed{}."
_CALCULATOR = re.compile(r"<<[^>]*>>")


class GSM8K(DatasetTask):
    name = "gsm8k"
    source = Source("openai/gsm8k", "test", ("question", "answer"), config="main")

    def make_example(self, index: int, record: dict) -> Example:
        work, _, final = record["answer"].rpartition("####")
        answer = final.strip().replace(",", "")
        reference = _CALCULATOR.sub("", work).strip() + f"\nThe final answer is \\boxed{{{answer}}}."
        return Example(index, f"{INSTRUCTION}\n\n{record['question'].strip()}\n", reference, answer)

    def judge(self, example: Example, completion: str) -> Score:
        got = gsm8k_answer(completion)
        if got is None:
            return Score(0.0, "no answer found")
        return Score(float(equivalent(got, example.answer)), f"answer {got!r} (expected {example.answer!r})")
