"""Answer extraction and normal form against the published conventions.

Expected values are hand-copied from the behaviour of lm-evaluation-harness (EleutherAI), read in
lm_eval/tasks/hendrycks_math/utils.py (``last_boxed_only_string``, ``remove_boxed``, ``strip_string``
/ ``is_equiv``), lm_eval/tasks/minerva_math/utils.py (``normalize_final_answer``, Lewkowycz et al.
2022 App. D), lm_eval/tasks/gsm8k/gsm8k.yaml (strict-match ``#### (\\-?[0-9\\.\\,]+)`` + take_first;
regexes_to_ignore "," and "\\$"; flexible-extract ``(-?[$0-9.,]{2,})|(-?[0-9]+)`` group_select −1)
and MMLU-Pro's ``answer is \\(?([A-J])\\)?``.
"""
import pytest

from assocmem.training.verifiable import EXTRACTORS, extract_answers, is_equivalent, normalize_answer
from assocmem.training.verifiable.extract import boxed_contents, format_number


# remove_boxed(last_boxed_only_string(s)) in lm-eval's hendrycks_math utils
@pytest.mark.parametrize("text, expected", [
    ("so the answer is $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
    ("\\boxed{2} then \\boxed{\\{1,2\\}}", "\\{1,2\\}"),              # the last box, escaped braces counted
    ("$\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("the answer is $\\boxed 5$ indeed", "5"),                         # "\\boxed " form: up to the next $
    ("\\boxed{x^{2}+1}", "x^{2}+1"),
])
def test_last_boxed_matches_lm_eval(text, expected):
    assert boxed_contents(text)[-1] == expected


def test_unclosed_box_is_no_answer():
    assert boxed_contents("\\boxed{3") == []                          # lm-eval: last_boxed_only_string -> None
    assert extract_answers("no box here", "boxed") == []


# pairs is_equiv (strip_string) in lm-eval's hendrycks_math utils calls equivalent / not
@pytest.mark.parametrize("a, b, equivalent", [
    ("\\dfrac{3}{4}", "\\frac{3}{4}", True),      # dfrac -> frac
    ("\\tfrac34", "\\frac{3}{4}", True),          # tfrac and fix_fracs' \frac34 -> \frac{3}{4}
    ("3/4", "\\frac{3}{4}", True),                # fix_a_slash_b
    ("0.5", "\\frac{1}{2}", True),                # the "0.5" special case
    ("\\left( 1, 2 \\right)", "(1,2)", True),     # \left, \right and spaces removed
    ("10^{\\circ}", "10", True),                  # degrees
    ("10^\\circ", "10", True),
    ("50\\%", "50", True),                        # percent
    ("\\$5", "5", True),                          # dollar sign
    ("5 \\text{ cm}", "5", True),                 # remove_right_units
    ("x = 5", "5", True),                         # a left side of at most two characters
    ("\\sqrt3", "\\sqrt{3}", True),               # fix_sqrt
    ("1\\!000", "1000", True),                    # inverse space \!
    ("\\frac{1}{2}", "\\frac{1}{3}", False),
    ("(1,2)", "(2,1)", False),
])
def test_equivalence_agrees_with_lm_eval_strip_string(a, b, equivalent):
    assert is_equivalent(a, b) is equivalent


def test_minerva_normalisation_cases():
    # normalize_final_answer (Minerva): "100,000" -> "100000"; \text{..} unwrapped; trailing units text
    assert normalize_answer("100,000") == "100000"
    assert normalize_answer("\\text{Evelyn}") == "Evelyn"
    assert normalize_answer("\\textbf{7}") == "7"
    assert normalize_answer("\\boxed{7}.") == "7"                      # \boxed{..} wrapper, trailing period


def test_numbers_are_exact_values():
    assert [normalize_answer(t) for t in ["1,000", "$1,000.00", "1000.", "-\\frac{2}{3}", "\\frac{-2}{3}", "6/8",
                                          "\\frac{1}{3}", "1e3", "0.750"]] == [
        "1000", "1000", "1000", "-2/3", "-2/3", "0.75", "1/3", "1000", "0.75"]
    assert normalize_answer("1,2") == "1,2"                           # not a thousands grouping: a pair
    assert normalize_answer("  ") is None
    assert format_number(__import__("fractions").Fraction(7, 40)) == "0.175"


def test_gsm8k_strict_match_and_flexible_extract():
    # strict-match "#### (\-?[0-9\.\,]+)", then "," and "$" ignored (gsm8k.yaml)
    assert extract_answers("3 + 4 = 7\n#### 7", "gsm8k") == ["7"]
    assert extract_answers("#### 1,000\n#### -2.50", "gsm8k") == ["1000", "-2.5"]
    assert extract_answers("The answer is 7", "gsm8k") == []
    # flexible-extract takes the last match of (-?[$0-9.,]{2,})|(-?[0-9]+)
    assert extract_answers("I have 3 apples, then $1,200.50 and finally 42.", "last_number")[-1] == "42"
    assert extract_answers("costs $1,200", "last_number") == ["1200"]
    assert EXTRACTORS["gsm8k"].rule == "first" and EXTRACTORS["last_number"].rule == "last"
    assert EXTRACTORS["boxed"].rule == "last"


@pytest.mark.parametrize("text, expected", [
    ("The answer is (B).", ["B"]),                # MMLU-Pro's "answer is \(?([A-J])\)?"
    ("so the answer is C", ["C"]),
    ("Answer: D", ["D"]),
    ("the answer is (E) and not answer: A", ["E", "A"]),
    ("the answer is Because of x", []),           # a word, not a letter
    ("the answer is (F)", []),                    # letters A-E only
])
def test_multiple_choice_letters(text, expected):
    assert extract_answers(text, "multiple_choice") == expected


def test_unknown_extractor_is_named():
    with pytest.raises(ValueError, match="unknown answer extractor 'latex'; registered extractors"):
        extract_answers("x", "latex")
