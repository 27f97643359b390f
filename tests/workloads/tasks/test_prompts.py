from pathlib import Path

import pytest

from workloads.models.tokenizer import build_char_tokenizer
from workloads.tasks import get_task
from workloads.tasks.prompts import PromptFormat, format_prompt

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_zero_shot_is_the_task_prompt():
    task = get_task("gsm8k", FIXTURES / "gsm8k.jsonl")
    ex = task.example(1)
    assert format_prompt(task, ex) == ex.prompt


def test_few_shot_prepends_other_solved_examples():
    task = get_task("gsm8k", FIXTURES / "gsm8k.jsonl")
    ex = task.example(0)
    text = format_prompt(task, ex, PromptFormat(shots=2))
    first, second = task.example(1), task.example(2)
    assert text == f"{first.prompt}{first.reference}\n\n{second.prompt}{second.reference}\n\n{ex.prompt}"
    arith = get_task("arith")
    shot = format_prompt(arith, arith.example(0), PromptFormat(shots=1))
    train = arith.examples("train", n=1)[0]
    assert shot.startswith(train.prompt + train.reference + "\n\n")


def test_chat_template_with_system_prompt_and_shots():
    task = get_task("gsm8k", FIXTURES / "gsm8k.jsonl")
    tok = build_char_tokenizer()
    tok.chat_template = TEMPLATE
    ex = task.example(0)
    text = format_prompt(task, ex, PromptFormat(chat=True, system="Be brief.", shots=1), tok)
    shot = task.example(1)
    assert text == (f"<system>Be brief.</system><user>{shot.prompt}</user><assistant>{shot.reference}"
                    f"</assistant><user>{ex.prompt}</user><assistant>")


def test_chat_without_a_template_and_system_without_chat_are_refused():
    task = get_task("arith")
    with pytest.raises(ValueError, match="chat template"):
        format_prompt(task, task.example(0), PromptFormat(chat=True), build_char_tokenizer())
    with pytest.raises(ValueError, match="system"):
        PromptFormat(system="x")
