"""Tasks: loaders, prompt formats and scorers behind one interface."""

from workloads.tasks.arith import Arith
from workloads.tasks.base import Example, Task

TASKS: dict[str, type[Task]] = {"arith": Arith}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]()


__all__ = ["Example", "Task", "TASKS", "get_task"]
