"""The count a counting question's answer gives (``openvivqa_jax/text/counts.py``), on hand-written Vietnamese
questions and answers: counts in words and digits, answers with none or several counts, and questions that ask
for a price or a colour; English ``how many`` questions."""

from __future__ import annotations

import pytest

from openvivqa_jax.text.counts import answer_count


@pytest.mark.parametrize("question,answer,want", [
    ("có bao nhiêu người ?", "có ba người", 3),
    ("trong ảnh có mấy chiếc ghế nhựa ?", "có bốn chiếc ghế nhựa", 4),
    ("có bao nhiêu cửa hàng ?", "có mười cửa hàng", 10),
    ("có mấy chiếc xe ?", "3 chiếc xe", 3),
    ("Có bao nhiêu người?", "Có HAI người.", 2),  # raw text: normalized (case, punctuation) first
    ("có bao nhiêu người ?", "không có người nào", None),  # no count in the answer
    ("có bao nhiêu người ?", "hai người và một chiếc xe", None),  # two counts: which one is ambiguous
    ("ly cà phê giá bao nhiêu ?", "hai mươi nghìn đồng", None),  # a price, not a count
    ("người bên trái mặc áo màu gì ?", "người bên trái mặc áo màu đỏ", None),  # not a counting question
    # English "how many" questions: the answer's one number, a word or digits
    ("How many red circles are there?", "two", 2),
    ("how many cats ?", "there are 3 cats", 3),
    ("how many stars are there ?", "twelve", 12),
    ("how many stars are there ?", "zero", None),  # below 1
    ("how many stars are there ?", "one or two", None),  # two numbers
    ("how many stars are there ?", "none", None),
    ("what is left of the two circles ?", "one square", None),  # not a counting question
])
def test_answer_count(question, answer, want):
    assert answer_count(question, answer) == want
