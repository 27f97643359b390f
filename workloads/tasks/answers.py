"""Final-answer extraction and normalization for the math tasks (pure functions).

Two answers are equivalent when their normalized strings are equal, or when both read as
exact rational numbers (`1,000`, `-3.50`, `3/4`, `\\frac{3}{4}`, `50\\%`) with the same value.
"""

from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_GSM8K_MARK = re.compile(r"####\s*([^\n]+)")
_UNITS = (r"\text{ }", "\\mbox{", "^\\circ", "^{\\circ}", "\\%", "%", "\\$", "$", "\\!", "\\,", "\\;",
          "\\ ")


def last_boxed(text: str) -> str | None:
    r"""Content of the last `\boxed{...}` (or `\fbox{...}`), braces balanced; None if none."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        rest = text[start + len("\\boxed"):].strip()  # `\boxed 5`
        return rest.split()[0].rstrip(".$") if rest else None
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[brace + 1 : i]
    return None  # unbalanced: the answer was cut off


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1] if found else None


def gsm8k_answer(completion: str) -> str | None:
    r"""The final answer of a GSM8K-style completion: the last `\boxed{}`, else the text after
    the last `####`, else the last number in the text."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    marks = _GSM8K_MARK.findall(completion)
    if marks:
        return last_number(marks[-1]) or marks[-1].strip()
    return last_number(completion)


def _strip_text_wrappers(s: str) -> str:
    return re.sub(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}", r"\1", s)


def _frac_to_slash(s: str) -> str:
    r"""`\frac{a}{b}` and `\frac ab` -> `(a)/(b)` (innermost first)."""
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    previous = None
    while previous != s:
        previous = s
        s = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", s)
    return s


def normalize(answer: str) -> str:
    """Canonical string of a math answer: no spacing, units markup, dollar signs, `\\left`/
    `\\right`, trailing period; fractions as (a)/(b); `x = 5` -> `5`; `0.5` stays `0.5`."""
    s = answer.strip()
    s = s.replace("\\left", "").replace("\\right", "")
    s = _strip_text_wrappers(s)
    for unit in _UNITS:
        s = s.replace(unit, "")
    s = _frac_to_slash(s)
    s = re.sub(r"\s+", "", s).rstrip(".")
    s = re.sub(r"^[a-zA-Z]=", "", s)  # `x=5`
    s = re.sub(r"(\d),(\d{3})(?!\d)", r"\1\2", s)  # thousands separators
    s = re.sub(r"(\d),(\d{3})(?!\d)", r"\1\2", s)
    s = re.sub(r"^\((-?[\d.]+)\)$", r"\1", s)
    return s


def as_number(answer: str) -> Fraction | None:
    """The exact value of a plain number or a/b fraction after normalize(); None otherwise."""
    s = normalize(answer)
    s = re.sub(r"[a-zA-Z]+$", "", s)  # trailing units: `18dollars`, `5cm`
    sign = -1 if s.startswith("-(") else 1  # `-\\frac{3}{6}` became `-(3)/(6)`
    s = s[1:] if sign < 0 else s
    m = re.fullmatch(r"\(?(-?[\d.]+)\)?/\(?(-?[\d.]+)\)?", s)
    try:
        if m:
            return sign * Fraction(m.group(1)) / Fraction(m.group(2))
        return sign * Fraction(s) if re.fullmatch(r"-?(\d+\.?\d*|\.\d+)", s) else None
    except (ValueError, ZeroDivisionError):
        return None


def equivalent(predicted: str | None, reference: str) -> bool:
    """Whether a predicted final answer matches the reference (see module docstring)."""
    if predicted is None:
        return False
    a, b = normalize(predicted), normalize(reference)
    if a and a == b:
        return True
    x, y = as_number(predicted), as_number(reference)
    return x is not None and x == y
