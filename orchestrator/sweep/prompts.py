"""The prompt each pair of a sweep decodes, per example index: what the workers decode and
what MLflow logs beside each record."""

from __future__ import annotations

from orchestrator.spec.sweep import SpecError, SweepSpec
from workloads.decoding import DecodeConfig
from workloads.decoding.engine import check_texts_fit
from workloads.models.pair import load_tokenizer
from workloads.models.pairspec import PairError, check_drafts, max_positions
from workloads.tasks.prompts import PromptFormat, format_prompt


def spec_prompts(spec: SweepSpec) -> tuple[object, list, dict[str, dict[int, str]]]:
    """A sweep's task, its examples (the spec's limit and seed) and each pair's prompts
    (`pair_prompts`), as the sweep's workers decode them."""
    from workloads.tasks import get_task

    task = get_task(spec.task.name, spec.task.data)
    examples = task.examples(n=spec.task.limit, seed=spec.task.seed)
    return task, examples, pair_prompts(spec, task, examples)


def pair_prompts(spec: SweepSpec, task, examples: list) -> dict[str, dict[int, str]]:
    """The prompt each pair decodes (and MLflow logs) per example index: the task's
    zero-shot prompt with the spec's shots, system prompt and the pair's chat template;
    each checked to fit in the pair's positions with the space's largest max_new_tokens
    (when the pair's config is here), before the sweep state exists."""
    check_batch_sizes(spec, len(examples))
    t = spec.task
    fmt = PromptFormat(chat=t.chat, system=t.system, shots=t.shots)
    longest = max(spec.dimension_values().get("max_new_tokens", [DecodeConfig.max_new_tokens]))
    out = {}
    for pair in spec.pairs:
        limit = max_positions(pair.load_spec())
        drafts = max(spec.dimension_values().get("num_speculative_tokens", [0]))
        dflash = "dflash" in spec.dimension_values().get("method", [])
        try:
            check_drafts(pair.name, pair.load_spec(), drafts, dflash)
        except PairError as err:
            raise SpecError(f"spec: space.num_speculative_tokens: {err}") from None
        tokenizer = load_tokenizer(pair.load_spec()) if t.chat or limit else None
        try:
            out[pair.name] = {e.index: format_prompt(task, e, fmt, tokenizer if t.chat else None)
                              for e in examples}
        except ValueError as err:
            raise SpecError(f"spec: task.{err} (pair {pair.name})") from None
        check_texts_fit(tokenizer, {f"spec: task: example {i} (pair {pair.name})": prompt
                                    for i, prompt in out[pair.name].items()}, longest, limit)
    return out


def check_batch_sizes(spec: SweepSpec, prompts: int) -> None:
    """Refuse a batch size, or a vLLM concurrency, larger than the task's prompt count: such a
    batch is never formed (every prompt would go in one smaller batch), nor are that many
    requests ever in flight, so its results would carry a size that was not measured."""
    for key in ("batch_size", "concurrency"):
        over = [b for b in spec.dimension_values().get(key, [1]) if b > prompts]
        if over:
            limit = " (task.limit)" if spec.task.limit == prompts else ""
            raise SpecError(f"spec: space.{key}: {over[0]} is more than the task's {prompts} "
                            f"prompts{limit}; at most {prompts}")
