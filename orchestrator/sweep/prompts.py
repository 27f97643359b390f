"""The prompt each pair of a sweep decodes, per example index: what the workers decode and
what MLflow logs beside each record."""

from __future__ import annotations

from orchestrator.sweep.spec import SpecError, SweepSpec, check_batch_sizes
from workloads.decoding import DecodeConfig
from workloads.decoding.engine import check_texts_fit
from workloads.models.pair import drafter_block, load_tokenizer, max_positions
from workloads.tasks.prompts import PromptFormat, format_prompt


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
        check_drafts(spec, pair, limit)
        tokenizer = load_tokenizer(pair.load_spec()) if t.chat or limit else None
        try:
            out[pair.name] = {e.index: format_prompt(task, e, fmt, tokenizer if t.chat else None)
                              for e in examples}
        except ValueError as err:
            raise SpecError(f"spec: task.{err} (pair {pair.name})") from None
        check_texts_fit(tokenizer, {f"spec: task: example {i} (pair {pair.name})": prompt
                                    for i, prompt in out[pair.name].items()}, longest, limit)
    return out


def check_drafts(spec: SweepSpec, pair, limit: int | None) -> None:
    """Refuse vLLM drafts per verification that `pair` cannot hold: as many as its models'
    positions (`limit`), or more than a DFlash drafter's trained block drafts (block_size − 1)."""
    drafts = max(spec.dimension_values().get("num_speculative_tokens", [0]))
    if limit is not None and drafts >= limit:
        raise SpecError(f"spec: space.num_speculative_tokens: {drafts} drafts do not fit in pair "
                        f"{pair.name}'s {limit} positions")
    block = drafter_block(pair.load_spec())
    if block is not None and drafts > block - 1 and "dflash" in spec.dimension_values().get("method", []):
        raise SpecError(f"spec: space.num_speculative_tokens: {drafts} is more than the {block - 1} drafts "
                        f"pair {pair.name}'s DFlash drafter was trained for (its block_size {block}); at "
                        f"most {block - 1}")
