"""`gpqa-diamond`: 198 graduate-level multiple-choice questions (Idavidrein/gpqa,
gpqa_diamond; gated on the hub: accept its terms, or pass --data).

The four options are shuffled per question with a fixed seed (the same letters every run);
the scorer reads the letter from the last `Answer: X`, else the last `\\boxed{X}`, else the
last `(X)`.
"""

from __future__ import annotations

import random
import re

from workloads.tasks.answers import last_boxed
from workloads.tasks.base import DatasetTask, Example, Score
from workloads.tasks.loading import Source

LETTERS = "ABCD"
OPTION_SEED = 0
INSTRUCTION = ("Answer the following multiple choice question. The last line of your response should "
               "be of the form 'Answer: X' where X is one of A, B, C or D.")
_ANSWER = re.compile(r"Answer\s*[:：]\s*\**\s*\(?([A-D])\b")
_PAREN = re.compile(r"\(([A-D])\)")


def extract_letter(completion: str) -> str | None:
    found = _ANSWER.findall(completion)
    if found:
        return found[-1]
    boxed = last_boxed(completion)
    if boxed is not None and boxed.strip().strip("()") in LETTERS:
        return boxed.strip().strip("()")
    found = _PAREN.findall(completion)
    return found[-1] if found else None


class GPQADiamond(DatasetTask):
    name = "gpqa-diamond"
    source = Source("Idavidrein/gpqa", "train",
                    ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
                     "Incorrect Answer 3"), config="gpqa_diamond")

    def make_example(self, index: int, record: dict) -> Example:
        correct = record["Correct Answer"].strip()
        options = [correct] + [record[f"Incorrect Answer {i}"].strip() for i in (1, 2, 3)]
        random.Random(f"gpqa:{OPTION_SEED}:{index}").shuffle(options)
        letter = LETTERS[options.index(correct)]
        body = "\n".join(f"{LETTERS[i]}) {text}" for i, text in enumerate(options))
        prompt = f"{INSTRUCTION}\n\n{record['Question'].strip()}\n\n{body}\n"
        return Example(index, prompt, f"Answer: {letter}", letter, {"options": options})

    def judge(self, example: Example, completion: str) -> Score:
        got = extract_letter(completion)
        if got is None:
            return Score(0.0, "no answer letter found")
        return Score(float(got == example.answer), f"answer {got} (expected {example.answer})")
