"""`arith`: synthetic arithmetic with a checkable answer, the toy pair's task.

Prompt: 2–3 operands in 0..99 joined by `+` or `-`, then `=`, e.g. `37+45-12=`.
Reference completion: a scratchpad that restates each step, then `#<value>`:
`37+45=82;82-12=70#70`. The tokenizer's end-of-sequence token follows it.
"""

from __future__ import annotations

import hashlib
import random
import re

from workloads.tasks.base import Example, Score, Task, check_split

_ANSWER = re.compile(r"#(-?\d+)")
# Fraction of the prompt space in each split; membership is a hash of the prompt, so the
# splits can never overlap whatever seed or count is asked for.
_SPLIT_BUCKETS = {"train": range(0, 90), "validation": range(90, 95), "test": range(95, 100)}


def split_of(prompt: str) -> str:
    bucket = int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 100
    return next(name for name, buckets in _SPLIT_BUCKETS.items() if bucket in buckets)


def random_prompt(rng: random.Random) -> tuple[list[int], list[str]]:
    n = rng.choice((2, 3))
    operands = [rng.randint(0, 99) for _ in range(n)]
    ops = [rng.choice("+-") for _ in range(n - 1)]
    return operands, ops


def render(operands: list[int], ops: list[str]) -> tuple[str, str, int]:
    """Return (prompt, scratchpad completion, value) for one expression."""
    prompt = str(operands[0]) + "".join(op + str(x) for op, x in zip(ops, operands[1:])) + "="
    steps, acc = [], operands[0]
    for op, x in zip(ops, operands[1:]):
        new = acc + x if op == "+" else acc - x
        steps.append(f"{acc}{op}{x}={new}")
        acc = new
    return prompt, ";".join(steps) + f"#{acc}", acc


def parse_answer(completion: str) -> int | None:
    """The integer after the last `#`, or None when there is none."""
    found = _ANSWER.findall(completion)
    return int(found[-1]) if found else None


class Arith(Task):
    name = "arith"

    def examples(self, split: str = "test", n: int | None = 100, seed: int = 0) -> list[Example]:
        check_split(split)
        if n is None:
            raise ValueError("n: arith generates examples; give how many")
        if n < 0:
            raise ValueError(f"n must be >= 0; got {n}")
        rng = random.Random(f"arith:{split}:{seed}")
        seen: set[str] = set()
        out: list[Example] = []
        while len(out) < n:
            prompt, reference, value = render(*random_prompt(rng))
            if prompt in seen or split_of(prompt) != split:
                continue
            seen.add(prompt)
            out.append(Example(len(out), prompt, reference, str(value)))
        return out

    def example(self, index: int) -> Example:
        """Test example `index` of the default (seed 0) sequence."""
        if index < 0:
            raise ValueError(f"index: must be >= 0; got {index}")
        return self.examples("test", n=index + 1)[index]

    def judge(self, example: Example, completion: str) -> Score:
        got = parse_answer(completion)
        return Score(float(got is not None and str(got) == example.answer),
                     f"answer {got} (expected {example.answer})")
