"""The prompt a model sees: the task's zero-shot prompt, optionally with few-shot examples,
a system prompt and the tokenizer's chat template. What this returns is what gets logged.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.tasks.base import Example, Task


@dataclass(frozen=True)
class PromptFormat:
    chat: bool = False  # wrap in the tokenizer's chat template (generation prompt added)
    system: str | None = None
    shots: int = 0  # solved examples before the question

    def __post_init__(self):
        if self.shots < 0:
            raise ValueError(f"shots: must be >= 0; got {self.shots}")
        if self.system is not None and not self.chat:
            raise ValueError("system: a system prompt needs chat: true (a chat template)")


def shot_examples(task: Task, example: Example, k: int) -> list[Example]:
    """k solved examples other than `example`: the first of the task's train split when it
    has one (arith), else the first records of the dataset by position."""
    if k == 0:
        return []
    if task.name == "arith":
        return task.examples("train", n=k)
    pool = task.examples(n=None)[: k + 1]
    return [e for e in pool if e.index != example.index][:k]


def format_prompt(task: Task, example: Example, fmt: PromptFormat = PromptFormat(), tokenizer=None) -> str:
    shots = shot_examples(task, example, fmt.shots)
    if not fmt.chat:
        return "".join(f"{s.prompt}{s.reference}\n\n" for s in shots) + example.prompt
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat: the tokenizer has no chat template; set chat: false")
    messages = [{"role": "system", "content": fmt.system}] if fmt.system else []
    for s in shots:
        messages += [{"role": "user", "content": s.prompt}, {"role": "assistant", "content": s.reference}]
    messages.append({"role": "user", "content": example.prompt})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
