"""`mix`: the bundled tasks of three categories, labelled, each scored by its own task."""

import pytest

from workloads.tasks import get_task
from workloads.tasks.mix import STRIDE


def test_a_mix_takes_each_category_in_turn_with_stable_indices():
    mix = get_task("mix")
    examples = mix.examples(n=8)
    labels = ["arithmetic", "code", "prose"]
    assert [e.meta["category"] for e in examples] == labels * 2 + labels[:2]
    assert [e.index // STRIDE for e in examples][:3] == [0, 1, 2]
    assert all(mix.example(e.index) == e for e in examples)
    assert len(mix.examples(n=30)) == 30
    assert max(len(e.prompt) for e in mix.examples(n=36)) < 128  # within the toy pairs' positions


def test_each_example_is_scored_by_its_own_task():
    mix = get_task("mix")
    arith, code, prose = mix.examples(n=3)
    assert mix.judge(arith, arith.reference).correct == 1.0
    assert mix.judge(code, code.reference).correct == 1.0  # the bundled function's tests, in the sandbox
    assert mix.judge(code, " None\n").correct == 0.0
    assert mix.judge(prose, "anything").correct is None  # prose is measured for speed only


@pytest.mark.parametrize(("call", "starts"), [
    (lambda: get_task("mix", "file.jsonl"), "data: mix takes its tasks' own data"),
    (lambda: get_task("mix").examples(n=2), "n: mix takes 3 to 36 examples"),
    (lambda: get_task("mix").examples(n=37), "n: mix takes 3 to 36 examples"),
    (lambda: get_task("mix").example(5 * STRIDE), "index: mix numbers its examples"),
])
def test_bad_mix_requests_name_the_field(call, starts):
    with pytest.raises(ValueError, match=f"^{starts}"):
        call()


def test_a_datasets_category_field_labels_its_examples(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "Write a haiku.", "category": "poetry"}\n{"prompt": "Summarise this."}\n')
    first, second = get_task("writing", data).examples(n=None)
    assert first.meta["category"] == "poetry" and "category" not in second.meta
