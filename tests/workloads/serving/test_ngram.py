"""vLLM's n-gram drafting replayed: the proposer agrees with vLLM's own on sequences built to
repeat, and a replay counts drafts, drafted and accepted tokens as a verification does."""

import json
import random
import subprocess

from tests.needs_vllm import on_vllm
from workloads.serving.ngram import PROMPT_LOOKUP, Lookup, propose, replay
from workloads.serving.venv import vllm_python

VLLM_PROPOSER = """
import json, sys
import numpy as np
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as find
cases = json.load(sys.stdin)
print(json.dumps([find(np.array(t, dtype=np.int32), lo, hi, 4096, k).tolist() for t, k, lo, hi in cases]))
"""


def test_a_draft_follows_the_earliest_occurrence_of_the_longest_suffix():
    assert propose([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], k=2) == [9, 1]  # 3-gram 1 2 3: first at 0
    assert propose([5, 2, 3, 8, 1, 2, 3], k=4) == [8, 1, 2, 3]  # only the 2-gram 2 3 occurs before
    assert propose([4, 4, 4], k=3) == [4]  # an occurrence may overlap the suffix; drafts stop at the end
    assert propose([1, 2, 3], k=3) == [] and propose([4, 4], k=1) == []  # n >= 2, before the suffix


def test_a_replay_accepts_the_draft_prefix_the_greedy_output_continues_with():
    # after the prefill's 4: 3 4 and 4 1 occur nowhere before (no draft, one token each); then
    # 1 2 occurs at 0 and drafts 3 4 1, of which the greedy 3 5 accepts 3; 5 is emitted with it
    lookup = replay([1, 2, 3], [4, 1, 2, 3, 5], k=3)
    assert (lookup.steps, lookup.iterations, lookup.drafted, lookup.accepted) == (3, 1, 3, 1)
    assert replay([1, 2, 3, 1, 2], [3, 1, 2, 3, 9], k=3) == Lookup(1, 1, 3, 3)  # 1 2 3 accepted, 9 with them


@on_vllm
def test_proposals_equal_vllms_own_proposer():
    rng = random.Random(0)
    cases = []
    for _ in range(300):
        alphabet = rng.choice([2, 3, 5, 12])  # small alphabets repeat, so n-grams match
        tokens = [rng.randrange(alphabet) for _ in range(rng.randrange(1, 40))]
        cases.append((tokens, rng.choice([1, 3, 5, 7]), *PROMPT_LOOKUP))
    theirs = json.loads(subprocess.run([str(vllm_python()), "-c", VLLM_PROPOSER], input=json.dumps(cases),
                                       capture_output=True, text=True, check=True).stdout)
    ours = [propose(tokens, k) for tokens, k, *_ in cases]
    assert sum(bool(d) for d in ours) > 100  # cases that draft something
    assert ours == theirs
