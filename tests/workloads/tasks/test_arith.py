from workloads.tasks import get_task
from workloads.tasks.arith import Arith, parse_answer, render, split_of
from workloads.tasks.base import Example


def test_scratchpad_restates_each_step_and_ends_with_value():
    assert render([37, 45, 12], ["+", "-"]) == ("37+45-12=", "37+45=82;82-12=70#70", 70)
    assert render([3, 50], ["-"]) == ("3-50=", "3-50=-47#-47", -47)


def test_generator_is_seeded_and_reproducible():
    a = Arith().examples("test", n=30, seed=7)
    assert a == Arith().examples("test", n=30, seed=7)
    assert a != Arith().examples("test", n=30, seed=8)


def test_prompts_have_two_or_three_operands_in_range():
    for ex in Arith().examples("train", n=300, seed=0):
        body = ex.prompt.rstrip("=").replace("-", "+").split("+")
        assert 2 <= len(body) <= 3 and all(0 <= int(x) <= 99 for x in body)
        assert ex.reference.endswith(f"#{ex.answer}")
        assert str(eval(ex.prompt[:-1])) == ex.answer


def test_splits_do_not_overlap():
    prompts = {s: {e.prompt for e in Arith().examples(s, n=600, seed=s_i)}
               for s_i, s in enumerate(("train", "validation", "test"))}
    assert not prompts["train"] & prompts["validation"]
    assert not prompts["train"] & prompts["test"]
    assert not prompts["validation"] & prompts["test"]
    assert all(split_of(p) == "test" for p in prompts["test"])


def test_scorer_reads_negative_values():
    ex = Example(0, "3-50=", "3-50=-47#-47", "-47")
    assert Arith().score(ex, "3-50=-47#-47") == 1.0
    assert Arith().score(ex, "3-50=47#47") == 0.0


def test_scorer_uses_the_last_hash():
    ex = Example(0, "1+1=", "1+1=2#2", "2")
    assert Arith().score(ex, "#3;1+1=2#2") == 1.0
    assert Arith().score(ex, "#2;#3") == 0.0


def test_scorer_gives_zero_to_malformed_completions():
    ex = Example(0, "1+1=", "1+1=2#2", "2")
    for bad in ("", "2", "1+1=2#", "#-", "#x2", "1+1=2 # 2"):
        assert Arith().score(ex, bad) == 0.0, bad
    assert parse_answer("#-") is None


def test_unknown_task_and_split_are_named():
    import pytest

    with pytest.raises(ValueError, match="unknown task 'nope'"):
        get_task("nope")
    with pytest.raises(ValueError, match="split must be one of"):
        Arith().examples("dev")
