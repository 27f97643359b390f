import pytest

from workloads.tasks.answers import as_number, equivalent, gsm8k_answer, last_boxed, normalize


@pytest.mark.parametrize("text, expected", [
    ("so the answer is \\boxed{42}.", "42"),
    ("first \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # the last one counts
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
    ("\\fbox{7}", "7"),
    ("no box here", None),
    ("cut off \\boxed{12", None),
])
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize("completion, expected", [
    ("3 + 4 = 7 apples\n#### 7", "7"),
    ("The total is -12 degrees.", "-12"),
    ("They pay $1,250 in total.", "1,250"),
    ("first 5 then \\boxed{9}, more text 11", "9"),
    ("#### 1,000 dollars", "1,000"),
    ("no digits at all", None),
])
def test_gsm8k_answer_extraction(completion, expected):
    assert gsm8k_answer(completion) == expected


@pytest.mark.parametrize("predicted, reference", [
    ("1,000", "1000"), ("1,000,000", "1000000"), ("-7", "-7"), ("10.00", "10"), ("$18", "18"),
    ("0.75", "3/4"),
    ("\\frac{3}{4}", "0.75"), ("\\dfrac{7}{8}", "\\frac{7}{8}"), ("\\frac78", "\\frac{7}{8}"),
    ("120^\\circ", "120"), ("50\\%", "50"), ("x = 5", "5"), ("\\text{(B)}", "(B)"), ("(2, 1)", "(2,1)"),
    ("5 \\text{ cm}", "5"), ("\\left( 3, 4 \\right)", "(3,4)"), ("18 dollars", "18"),
])
def test_equivalent_answers(predicted, reference):
    assert equivalent(predicted, reference)


@pytest.mark.parametrize("predicted, reference", [
    ("7", "-7"), ("1/3", "0.33"), ("(1,2)", "(2,1)"), ("", "0"), (None, "1"), ("12", "1,2"),
])
def test_different_answers(predicted, reference):
    assert not equivalent(predicted, reference)


def test_normalize_and_numbers():
    assert normalize("\\left(\\frac{1}{2}, 3\\right).") == "((1)/(2),3)"
    assert as_number("-\\frac{3}{6}") == as_number("-0.5")
    assert as_number("\\frac{1}{0}") is None
    assert as_number("\\sqrt{2}") is None
