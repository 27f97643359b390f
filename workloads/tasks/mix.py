"""`mix`: the bundled tasks of three categories in one sweep, each example labelled with its
category, so acceptance and speed are reported per category (acceptance depends on the task:
a drafter accepts more of arithmetic it was trained on than of prose).

Categories: `arithmetic` (arith), `code` (humaneval's format over the bundled one-line
functions of data/code.jsonl, short enough for the toy pairs' 256 positions; scored by their
tests in the sandbox) and `prose` (writing, the bundled prompts). n examples (3 to 36) are
n // 3 of each (the first categories take the remainder), interleaved; an example keeps its own
task's prompt, answer and scorer. Its index is 1,000,000 · category + its index in its own
task, stable across subsets.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from workloads.tasks.arith import Arith
from workloads.tasks.base import Example, Score, Task, check_split
from workloads.tasks.coding import HumanEval
from workloads.tasks.writing import Writing

CODE = Path(__file__).with_name("data") / "code.jsonl"
MOST = 36  # 12 of each category: the bundled code and prose sets hold 12 prompts each
STRIDE = 1_000_000  # above every index of the tasks mixed (a task's limit is at most 1,000,000)


class Mix(Task):
    name = "mix"
    origin = "arith (generated), bundled code and writing prompts"
    categories = {"arithmetic": Arith, "code": lambda: HumanEval(CODE), "prose": Writing}

    def __init__(self, data: str | Path | None = None):
        if data is not None:
            raise ValueError("data: mix takes its tasks' own data; it takes no --data")
        super().__init__(None)
        self.tasks = [task() for task in self.categories.values()]

    def examples(self, split: str = "test", n: int | None = 100, seed: int = 0) -> list[Example]:
        check_split(split, ("test",))
        if n is None or not len(self.tasks) <= n <= MOST:
            raise ValueError(f"n: mix takes {len(self.tasks)} to {MOST} examples (one to 12 of each "
                             f"category: the bundled code and prose prompts are 12 each); got {n}")
        counts = [n // len(self.tasks) + (k < n % len(self.tasks)) for k in range(len(self.tasks))]
        parts = [[self._label(k, e) for e in task.examples(split, count, seed)]
                 for k, (task, count) in enumerate(zip(self.tasks, counts, strict=True))]
        return [part[j] for j in range(max(counts)) for part in parts if j < len(part)]

    def _label(self, k: int, example: Example) -> Example:
        meta = {**example.meta, "category": list(self.categories)[k]}
        return dataclasses.replace(example, index=k * STRIDE + example.index, meta=meta)

    def _own(self, example: Example) -> tuple[Task, Example]:
        """The task an example comes from and the example as that task numbers it."""
        k, index = divmod(example.index, STRIDE)
        return self.tasks[k], dataclasses.replace(example, index=index)

    def example(self, index: int) -> Example:
        k, own = divmod(index, STRIDE)
        if not 0 <= k < len(self.tasks):
            raise ValueError(f"index: mix numbers its examples category * {STRIDE:,} + index; got {index}")
        return self._label(k, self.tasks[k].example(own))

    def judge(self, example: Example, completion: str) -> Score:
        task, own = self._own(example)
        return task.judge(own, completion)
