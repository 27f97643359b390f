"""Every dataset task on its fixture file: loading, prompts, and scoring of correct, wrong
and malformed completions."""

from pathlib import Path

import pytest

from workloads.tasks import get_task
from workloads.tasks.gpqa import extract_letter

FIXTURES = Path(__file__).parent / "fixtures"


def task(name, fixture):
    return get_task(name, FIXTURES / fixture)


def test_gsm8k():
    t = task("gsm8k", "gsm8k.jsonl")
    ex = t.examples(n=None)
    assert [e.answer for e in ex] == ["10", "4800", "-7"]
    assert "\\boxed{}" in ex[0].prompt and ex[0].prompt.rstrip().endswith("left?")
    assert "<<" not in ex[1].reference and ex[1].reference.endswith("\\boxed{4800}.")
    assert t.score(ex[1], "So it makes \\boxed{4,800} dollars.") == 1.0
    assert t.score(ex[1], "It makes $4,800.") == 1.0  # last number
    assert t.score(ex[2], "#### -7") == 1.0
    assert t.score(ex[2], "#### 7") == 0.0
    assert t.score(ex[0], "I am not sure.") == 0.0
    assert all(t.score(e, e.reference) == 1.0 for e in ex)


def test_math500():
    t = task("math500", "math500.jsonl")
    frac, angle, pair = t.examples(n=None)
    assert "\\boxed{}" in frac.prompt and frac.meta["subject"] == "Prealgebra"
    assert t.score(frac, "It is \\boxed{\\dfrac{7}{8}}") == 1.0
    assert t.score(frac, "\\boxed{0.875}") == 1.0
    assert t.score(frac, "\\boxed{7/9}") == 0.0
    assert t.score(frac, "7/8 without a box") == 0.0
    assert t.score(angle, "\\boxed{120}") == 1.0
    assert t.score(pair, "\\boxed{(1,2)} no wait \\boxed{(2, 1)}") == 1.0
    assert t.score(pair, "\\boxed{(1,2)}") == 0.0
    assert all(t.score(e, e.reference) == 1.0 for e in (frac, angle, pair))


def test_gpqa_options_are_shuffled_reproducibly():
    t = task("gpqa-diamond", "gpqa.jsonl")
    ex = t.examples(n=None)
    again = task("gpqa-diamond", "gpqa.jsonl").examples(n=None)
    assert [e.prompt for e in ex] == [e.prompt for e in again]
    assert len({e.answer for e in ex}) > 1  # the correct option does not always sit first
    for e in ex:
        assert f"{e.answer}) {e.meta['options']['ABCD'.index(e.answer)]}" in e.prompt
        assert t.score(e, f"Reasoning...\nAnswer: {e.answer}") == 1.0
        wrong = next(x for x in "ABCD" if x != e.answer)
        assert t.score(e, f"Answer: {wrong}") == 0.0
        assert t.score(e, "I cannot tell.") == 0.0


@pytest.mark.parametrize("text, letter", [
    ("Answer: C", "C"), ("answer is (B) ... Answer: **D**", "D"), ("\\boxed{A}", "A"),
    ("between (A) and (C), (C)", "C"), ("none", None),
])
def test_gpqa_letter_extraction(text, letter):
    assert extract_letter(text) == letter


def test_writing_is_speed_only():
    t = task("writing", "writing.jsonl")
    ex = t.examples(n=None)
    assert [e.prompt.strip() for e in ex][0] == "Write a haiku about autumn leaves."
    assert not t.scored and t.judge(ex[0], "Leaves fall").correct is None
    assert len(get_task("writing").examples(n=None)) >= 10  # the bundled set


def test_mbpp_prompt_shows_the_base_tests_and_scores_by_execution():
    t = task("mbpp", "mbpp.jsonl")
    shared, prime = t.examples(n=None)
    assert "assert set(similar_elements" in shared.prompt and "expert Python programmer" in shared.prompt
    assert t.score(shared, shared.reference) == 1.0
    assert t.score(prime, prime.reference) == 1.0
    assert t.score(prime, "```python\n" + prime.reference + "\n```\nDone.") == 1.0
    assert t.score(prime, "def is_not_prime(n):\n    return False") == 0.0
    assert t.score(prime, "def is_not_prime(n) return") == 0.0  # syntax error


def test_humaneval_fixture_and_completion_handling():
    t = task("humaneval", "humaneval.jsonl")
    add, even = t.examples(n=None)
    assert add.prompt.startswith("def add") and add.answer == "add"
    assert t.score(add, add.reference) == 1.0
    assert t.score(add, "    return a + b\n\ndef unrelated(:\n") == 1.0  # cut at the next def
    assert t.score(add, "    return a - b\n") == 0.0
    assert t.score(even, "```python\ndef is_even(n):\n    return not n % 2\n```") == 1.0
    assert t.score(even, "") == 0.0


def test_examples_by_index_and_bad_index():
    t = task("gsm8k", "gsm8k.jsonl")
    assert t.example(2).answer == "-7"
    with pytest.raises(ValueError, match="index"):
        t.example(3)


WRONG_BUT_EXITS_ZERO = {
    "sys.exit in the body": "    import sys\n    sys.exit(0)\n",
    "atexit os._exit": "    import atexit, os\n    atexit.register(lambda: os._exit(0))\n    return a - b\n",
    "top-level os._exit": "    return a - b\n\nimport os\nos._exit(0)\n",
    "always-equal result": ("    class Same:\n        def __eq__(self, other):\n            return True\n"
                            "    return Same()\n"),
    "always-equal int subclass": ("    class Same(int):\n        def __eq__(self, other):\n"
                                  "            return True\n    return Same(0)\n"),
    "in a list": "    class Same:\n        __eq__ = lambda s, o: True\n    return [Same()][0]\n",
    "rewrites its checks": "    open('checks.py', 'w').write('pass')\n    return a - b\n",
}


@pytest.mark.parametrize("name", list(WRONG_BUT_EXITS_ZERO))
def test_a_wrong_completion_cannot_exit_or_compare_its_way_to_a_pass(name):
    t = task("humaneval", "humaneval.jsonl")
    add = t.examples(n=None)[0]
    assert t.score(add, WRONG_BUT_EXITS_ZERO[name]) == 0.0


def test_the_datasets_check_replaces_a_check_of_the_completions():
    t = task("humaneval", "humaneval.jsonl")
    add = t.examples(n=None)[0]
    assert t.score(add, "    return a - b\n\ndef check(candidate):\n    pass\n") == 0.0


def test_mbpp_asserts_run_after_the_program_and_guard_its_functions():
    t = task("mbpp", "mbpp.jsonl")
    prime = next(e for e in t.examples(n=None) if "is_not_prime" in e.reference)
    program, checks = t.program(prime, prime.reference)
    assert "assert" not in program and "is_not_prime" in checks.guarded
    assert t.score(prime, "import sys\ndef is_not_prime(n):\n    sys.exit(0)") == 0.0
    cheat = ("class T:\n    __eq__ = lambda s, o: True\n    __bool__ = lambda s: True\n"
             "def is_not_prime(n):\n    return T()")
    assert t.score(prime, cheat) == 0.0
