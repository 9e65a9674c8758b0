"""Procedural text: reproducible from its seed, the requested size, paragraphs that reuse their cast."""
import re

import pytest

from assocmem.probes.experiments.textgen import NAMES, procedural_text


def test_same_seed_same_text_other_seed_other_text():
    assert procedural_text(5000, 3) == procedural_text(5000, 3)
    assert procedural_text(5000, 3) != procedural_text(5000, 4)


def test_size_and_alphabet():
    text = procedural_text(20_000, 0)
    assert 20_000 <= len(text) < 21_000
    assert text.isascii() and text.endswith("\n")
    assert "compasses" in text and "compasss" not in text


def test_each_paragraph_draws_its_names_from_a_cast_of_two_or_three():
    paragraphs = procedural_text(20_000, 1).strip().split("\n\n")
    counts = [len(set(re.findall(r"\b(" + "|".join(NAMES) + r")\b", p))) for p in paragraphs]
    assert max(counts) <= 3
    assert sum(c >= 2 for c in counts) > 0.8 * len(counts)  # names recur within a paragraph


def test_bad_size_raises():
    with pytest.raises(ValueError, match="num_chars"):
        procedural_text(0, 0)
