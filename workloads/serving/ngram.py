"""vLLM's n-gram drafter (prompt lookup) replayed over a greedy output: what vLLM would draft
and accept for a request, without serving it.

Before each verification vLLM's proposer takes the longest n (PROMPT_LOOKUP: 2 to 5) whose
last n tokens of the request so far occur earlier in it, the earliest such occurrence, and
drafts the up-to-k tokens that followed it (none where no n matches). Verification is
lossless, so at temperature 0 the request emits the verifier's greedy tokens whatever was
drafted: a draft's accepted tokens are its longest prefix equal to the greedy continuation,
and each verification emits them plus one. The first token comes from the prefill. Replayed
over the verifier's greedy output, this gives vLLM's drafts, drafted and accepted tokens per
request (checked against a vLLM server), and one greedy decode serves every k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PROMPT_LOOKUP = (2, 5)  # the n-gram sizes vLLM matches (prompt_lookup_min, prompt_lookup_max)


def propose(tokens: Sequence[int], k: int, sizes: tuple[int, int] = PROMPT_LOOKUP) -> list[int]:
    """The draft after `tokens`: for the largest n in `sizes` whose last n tokens also occur
    at some s with s + n <= len - 1 (earlier, possibly overlapping), the smallest such s;
    the draft is tokens[s + n : s + n + k]. [] where no n matches."""
    tokens = list(tokens)
    total = len(tokens)
    smallest, largest = sizes
    for n in range(min(largest, total - 1), smallest - 1, -1):
        suffix = tokens[total - n:]
        for start in range(total - n):
            if tokens[start:start + n] == suffix:
                return tokens[start + n:start + n + k]
    return []


@dataclass(frozen=True)
class Lookup:
    """One request replayed: its verifications after the prefill (`steps`), those that had a
    draft (vLLM's `drafts`, specsweep's `iterations`), draft tokens and accepted ones."""

    steps: int
    iterations: int
    drafted: int
    accepted: int


def replay(prompt: Sequence[int], output: Sequence[int], k: int) -> Lookup:
    """vLLM's n-gram drafting with `num_speculative_tokens` k over a request whose greedy
    output is `output` (its first token from the prefill)."""
    context = [*prompt, *output[:1]]
    steps = iterations = drafted = accepted = 0
    done = min(1, len(output))
    while done < len(output):
        draft = propose(context, k)
        hits = 0
        while hits < len(draft) and done + hits < len(output) and draft[hits] == output[done + hits]:
            hits += 1
        steps += 1
        if draft:
            iterations += 1
            drafted += len(draft)
            accepted += hits
        emitted = min(hits + 1, len(output) - done)
        context += output[done:done + emitted]
        done += emitted
    return Lookup(steps, iterations, drafted, accepted)
