"""The task interface: a loader of examples, a prompt format and a scorer."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from pathlib import Path

from workloads.tasks.loading import DataError, Source, load_records, subset

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class Example:
    """One prompt of a task with what a correct completion looks like."""

    index: int  # position in the task's dataset (stable across subsets)
    prompt: str  # the zero-shot prompt text (PromptFormat adds shots, system, chat template)
    reference: str  # a correct completion (for few-shot examples and inspection)
    answer: str  # the value the scorer checks
    meta: dict = field(default_factory=dict, compare=False)  # tests, entry point, choices


@dataclass(frozen=True)
class Score:
    correct: float | None  # in [0, 1]; None for speed-only tasks
    detail: str


class Task(ABC):
    name: str
    scored: bool = True  # False: speed only (writing)
    stop: tuple[str, ...] = ()  # stop strings a completion of this task ends at
    origin: str = "generated"  # where the examples come from by default

    def __init__(self, data: str | Path | None = None):
        self.data = data

    @abstractmethod
    def examples(self, split: str = "test", n: int | None = 100, seed: int = 0) -> list[Example]:
        """n examples of `split` (all when n is None), the same ones for the same seed."""

    @abstractmethod
    def judge(self, example: Example, completion: str) -> Score:
        """Score of `completion` (the text generated after the prompt), with why."""

    def score(self, example: Example, completion: str) -> float:
        return self.judge(example, completion).correct or 0.0

    def example(self, index: int) -> Example:
        """The example at dataset position `index`."""
        found = [e for e in self.examples(n=None) if e.index == index]
        if not found:
            raise ValueError(f"index: {self.name} has no example {index}")
        return found[0]


def check_split(split: str, allowed: tuple[str, ...] = SPLITS) -> None:
    if split not in allowed:
        raise ValueError(f"split must be one of {', '.join(allowed)}; got {split!r}")


class DatasetTask(Task):
    """A task over the records of one dataset split (hub id or --data file)."""

    source: Source

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "origin" not in cls.__dict__ and "source" in cls.__dict__:
            cls.origin = f"hub {cls.source.hub_id}"

    def __init__(self, data: str | Path | None = None):
        super().__init__(data)
        self._records: list[dict] | None = None

    def records(self) -> list[dict]:
        if self._records is None:
            self._records = load_records(self.name, self.source, self.data)
            if not self._records:
                raise DataError(f"data: {self.data or self.source.hub_id} holds no records")
        return self._records

    @abstractmethod
    def make_example(self, index: int, record: dict) -> Example:
        """The example (prompt, reference, answer, meta) of one dataset record."""

    def examples(self, split: str = "test", n: int | None = 100, seed: int = 0) -> list[Example]:
        check_split(split, ("test",))
        records = self.records()
        return [self._labelled(i, records[i]) for i in subset(len(records), n, seed)]

    def example(self, index: int) -> Example:
        records = self.records()
        if not 0 <= index < len(records):
            raise ValueError(f"index: {self.name} has examples 0..{len(records) - 1}; got {index}")
        return self._labelled(index, records[index])

    def _labelled(self, index: int, record: dict) -> Example:
        """`make_example`, with the record's `category` field (a string) in its meta, so
        figures are reported per category (SPEED-Bench style data)."""
        example = self.make_example(index, record)
        category = record.get("category")
        if isinstance(category, str) and category:
            return replace(example, meta={**example.meta, "category": category})
        return example
