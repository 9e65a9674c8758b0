"""Answers in text: extraction by registered name and one normal form, so that equal answers compare equal.

An extractor reads every answer a text states, in order, each in normal form; the scoring rule
(base.py ``RULES``) picks one. ``EXTRACTORS`` is the one table: name -> (function, default rule).

    boxed            ``\\boxed{...}`` (braces nested to any depth), ``\\boxed x$`` and ``\\fbox{...}``:
                     the MATH convention (Hendrycks et al. 2021), whose solutions put the answer in the
                     last box; default rule ``last`` (lm-evaluation-harness ``last_boxed_only_string``)
    gsm8k            the number after ``#### `` (GSM8K, Cobbe et al. 2021; lm-evaluation-harness'
                     strict-match ``#### (\\-?[0-9\\.\\,]+)`` then take_first); default rule ``first``
    last_number      every number, lm-evaluation-harness' flexible-extract ``(-?[$0-9.,]{2,})|(-?[0-9]+)``
                     (commas and $ ignored); default rule ``last`` (its group_select −1)
    multiple_choice  a letter A-E in "the answer is (B)", "answer: B", "Answer is C." (the MMLU-Pro
                     pattern ``answer is \\(?([A-J])\\)?``, letters A-E, not followed by a letter);
                     default rule ``first`` (``re.search``)
    whole            the whole text is the answer (a reference field that holds only the answer)

``normalize_answer`` is the normal form. A number (thousands commas, $, %, trailing zeros and period,
a fraction ``3/4``, ``\\frac{3}{4}``, ``\\dfrac34``, ``-\\frac{2}{3}``) becomes its exact value: an
integer, a terminating decimal ("0.5" for 1/2, "0.75" for 3/4) or a reduced fraction "1/3". Other
text is LaTeX stripped of what does not change the answer (lm-evaluation-harness' MATH ``strip_string``
and Minerva's ``normalize_final_answer``, Lewkowycz et al. 2022 App. D): spacing ``\\, \\! \\; \\:``,
``\\left``/``\\right``, ``\\text{..}``/``\\mathrm{..}``/``\\textbf{..}``/``\\mbox{..}`` wrappers, degrees
``^\\circ``, ``$``, spaces, a trailing period, a short left side ``x = `` (two characters at most),
``tfrac``/``dfrac`` -> ``frac`` and ``\\sqrt3`` -> ``\\sqrt{3}``.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, localcontext
from fractions import Fraction
from typing import Callable, NamedTuple

# ---------------------------------------------------------------- normal form
_HASH_ANSWER = re.compile(r"####\s*(-?[$0-9.,]*[0-9])")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_FRACTION = re.compile(r"(-?)\\frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}")
_SLASH = re.compile(r"(-?[\d.]+)/(-?[\d.]+)")
_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mbox|mathbf)\{([^{}]*)\}")
_LATEX_SPACING = ("\\!", "\\,", "\\;", "\\:", "\\ ", "\\quad", "\\qquad")


def _decimal(text: str) -> Fraction | None:
    """The exact value of a plain or comma-grouped decimal, or None."""
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    if not _PLAIN_NUMBER.fullmatch(text):
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return Fraction(value) if value.is_finite() else None


def _value(text: str) -> Fraction | None:
    """The exact rational a number or a fraction of numbers stands for (None: not a number)."""
    number = _decimal(text)
    if number is not None:
        return number
    for pattern in (_FRACTION, _SLASH):
        m = pattern.fullmatch(text)
        if m:
            sign, (top, bottom) = (m.group(1) if pattern is _FRACTION else ""), m.groups()[-2:]
            a, b = _decimal(top), _decimal(bottom)
            if a is None or b is None or b == 0:
                return None
            return -a / b if sign else a / b
    return None


def format_number(value: Fraction) -> str:
    """Integer ("12"), terminating decimal ("0.75", no trailing zeros) or reduced fraction ("1/3")."""
    den = value.denominator
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    if den != 1:
        return f"{value.numerator}/{value.denominator}"
    with localcontext() as ctx:
        ctx.prec = 4 * (len(str(value.numerator)) + len(str(value.denominator))) + 10
        exact = (Decimal(value.numerator) / Decimal(value.denominator)).normalize()
    return format(exact, "f")


def _fix_shorthand(text: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{7}`` -> ``\\frac{1}{7}``, ``\\sqrt3`` -> ``\\sqrt{3}``."""
    text = re.sub(r"\\frac([^{\\\s])([^{\\\s])", r"\\frac{\1}{\2}", text)
    text = re.sub(r"\\frac([^{\\\s])\{", r"\\frac{\1}{", text)
    text = re.sub(r"\\frac\{([^{}]*)\}([^{\\\s])", r"\\frac{\1}{\2}", text)
    return re.sub(r"\\sqrt([^{\\\s])", r"\\sqrt{\1}", text)


def _strip_latex(text: str) -> str:
    """The LaTeX clean-up of the module docstring (no number parsing)."""
    text = text.strip()
    boxed = boxed_contents(text)
    if len(boxed) == 1 and text.startswith(("\\boxed", "\\fbox")):
        text = boxed[0]
    text = text.replace("\\\\", "\\")
    if "\\text{ " in text:                         # "\text{ cm}": units on the right (strip_string's rule)
        text = text.split("\\text{ ")[0]
    for spacing in _LATEX_SPACING:
        text = text.replace(spacing, "")
    text = text.replace("\\left", "").replace("\\right", "").replace("\\$", "").replace("$", "")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac").replace("\\%", "").replace("%", "")
    for degrees in ("^{\\circ}", "^\\circ", "°"):
        text = text.replace(degrees, "")
    while _WRAPPERS.search(text):
        text = _WRAPPERS.sub(r"\1", text)
    text = _fix_shorthand(text)
    text = re.sub(r"\s+", "", text).rstrip(".")
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:   # "x=5", "k=3": the value (strip_string's rule)
        text = sides[1]
    return text


def normalize_number(text: str) -> str | None:
    """Canonical string of a number written with optional $, commas and trailing zeros (GSM8K's
    ``regexes_to_ignore``: every comma and $ dropped), or None."""
    cleaned = text.replace(",", "").replace("$", "").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return format_number(Fraction(value)) if value.is_finite() else None


def normalize_answer(text: str) -> str | None:
    """The normal form of one answer (module docstring); None for an empty one."""
    cleaned = _strip_latex(text)
    if not cleaned:
        return None
    value = _value(cleaned)
    return format_number(value) if value is not None else cleaned


def is_equivalent(a: str | None, b: str | None) -> bool:
    """Equal normal forms (a missing answer equals nothing)."""
    na, nb = (normalize_answer(a) if a is not None else None), (normalize_answer(b) if b is not None else None)
    return na is not None and na == nb


def answer_value(answer: str | None) -> Fraction | None:
    """The exact value of a normal-form answer that is a number (None otherwise)."""
    return None if answer is None else _value(answer)


# ---------------------------------------------------------------- extractors
def boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces), and ``\\boxed x`` up to ``$``, in order.

    An unclosed box is skipped. ``\\{`` counts as a brace, as in lm-evaluation-harness.
    """
    found = []
    for m in re.finditer(r"\\(?:boxed|fbox)(\s*)", text):
        start = m.end()
        if start < len(text) and text[start] == "{":
            depth = 0
            for i in range(start, len(text)):
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                if depth == 0:
                    found.append(text[start + 1:i])
                    break
        elif m.group(1):                                      # "\boxed 5$": up to the next $
            found.append(text[start:].split("$")[0])
    return found


def extract_hash_answers(text: str) -> list[str]:
    """Every ``#### <number>`` of ``text``, normalised, in order (unparseable ones skipped)."""
    found = (normalize_number(m.group(1)) for m in _HASH_ANSWER.finditer(text))
    return [a for a in found if a is not None]


def _boxed(text: str) -> list[str]:
    return [a for a in map(normalize_answer, boxed_contents(text)) if a is not None]


_FLEXIBLE_NUMBER = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")


def _last_number(text: str) -> list[str]:
    out = []
    for wide, narrow in _FLEXIBLE_NUMBER.findall(text):
        answer = normalize_answer((wide or narrow).replace(",", "").replace("$", ""))
        if answer is not None and answer_value(answer) is not None:
            out.append(answer)
    return out


_CHOICE = re.compile(r"answer(?:\s+is)?\s*:?\s*\(?([A-E])\)?(?![A-Za-z])", re.IGNORECASE)


def _multiple_choice(text: str) -> list[str]:
    return [m.group(1).upper() for m in _CHOICE.finditer(text) if m.group(1).isupper()]


def _whole(text: str) -> list[str]:
    answer = normalize_answer(text)
    return [] if answer is None else [answer]


class Extractor(NamedTuple):
    fn: Callable[[str], list[str]]
    rule: str


EXTRACTORS: dict[str, Extractor] = {
    "boxed": Extractor(_boxed, "last"),
    "gsm8k": Extractor(extract_hash_answers, "first"),
    "last_number": Extractor(_last_number, "last"),
    "multiple_choice": Extractor(_multiple_choice, "first"),
    "whole": Extractor(_whole, "first"),
}


def get_extractor(name: str) -> Extractor:
    if name not in EXTRACTORS:
        raise ValueError(f"unknown answer extractor {name!r}; registered extractors: {list(EXTRACTORS)}")
    return EXTRACTORS[name]


def extract_answers(text: str, name: str) -> list[str]:
    """Every answer ``text`` states, in normal form, by the extractor ``name``."""
    return get_extractor(name).fn(text)
