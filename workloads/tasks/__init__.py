"""Tasks: loaders, prompt formats and scorers behind one interface."""

from pathlib import Path

from workloads.tasks.arith import Arith
from workloads.tasks.base import Example, Score, Task
from workloads.tasks.coding import MBPP, HumanEval
from workloads.tasks.gpqa import GPQADiamond
from workloads.tasks.gsm8k import GSM8K
from workloads.tasks.loading import DataError
from workloads.tasks.math500 import Math500
from workloads.tasks.mix import Mix
from workloads.tasks.writing import Writing

TASKS: dict[str, type[Task]] = {t.name: t for t in (Arith, GSM8K, Math500, HumanEval, MBPP, GPQADiamond,
                                                     Writing, Mix)}


def get_task(name: str, data: str | Path | None = None) -> Task:
    if name not in TASKS:
        raise ValueError(f"task: unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    if data is not None and name == "arith":
        raise ValueError("data: arith is generated; it takes no --data")
    return TASKS[name](data)


__all__ = ["DataError", "Example", "Score", "Task", "TASKS", "get_task"]
