"""The task interface: a loader of examples, a prompt format and a scorer."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class Example:
    """One prompt of a task with what a correct completion looks like."""

    index: int
    prompt: str
    reference: str  # a correct completion (for training and inspection)
    answer: str  # the value the scorer checks


class Task(ABC):
    name: str

    @abstractmethod
    def examples(self, split: str = "test", n: int = 100, seed: int = 0) -> list[Example]:
        """The first `n` examples of `split` in the order fixed by `seed`."""

    @abstractmethod
    def score(self, example: Example, completion: str) -> float:
        """Score in [0, 1] of `completion` (the text generated after the prompt)."""


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
