"""`writing`: open-ended writing prompts, measured for speed only (no score).

Defaults to the small English set bundled in data/writing.jsonl; the papers' WritingBench
(555 English queries) runs with --data pointing at its JSONL (field `query`) or any file
with a `prompt` field.
"""

from __future__ import annotations

from pathlib import Path

from workloads.tasks.base import DatasetTask, Example, Score
from workloads.tasks.loading import DataError, Source

BUNDLED = Path(__file__).with_name("data") / "writing.jsonl"


class Writing(DatasetTask):
    name = "writing"
    scored = False
    origin = "bundled prompts (WritingBench via --data)"
    source = Source("bundled", "test", ())

    def __init__(self, data: str | Path | None = None):
        super().__init__(data if data is not None else BUNDLED)

    def make_example(self, index: int, record: dict) -> Example:
        text = record.get("prompt") or record.get("query")
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"data: record {index} of {self.data} has no 'prompt' or 'query' text")
        return Example(index, text.strip() + "\n", "", "")

    def judge(self, example: Example, completion: str) -> Score:
        return Score(None, "speed only: writing is not scored")
