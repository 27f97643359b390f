"""The prompt each pair of a sweep decodes, per example index: what the workers decode and
what MLflow logs beside each record."""

from __future__ import annotations

from orchestrator.sweep.spec import SpecError, SweepSpec
from workloads.models.pair import load_tokenizer
from workloads.tasks.prompts import PromptFormat, format_prompt


def pair_prompts(spec: SweepSpec, task, examples: list) -> dict[str, dict[int, str]]:
    """The prompt each pair decodes (and MLflow logs) per example index: the task's
    zero-shot prompt with the spec's shots, system prompt and the pair's chat template."""
    t = spec.task
    fmt = PromptFormat(chat=t.chat, system=t.system, shots=t.shots)
    out = {}
    for pair in spec.pairs:
        tokenizer = load_tokenizer(pair.load_spec()) if t.chat else None
        try:
            out[pair.name] = {e.index: format_prompt(task, e, fmt, tokenizer) for e in examples}
        except ValueError as err:
            raise SpecError(f"spec: task.{err} (pair {pair.name})") from None
    return out

