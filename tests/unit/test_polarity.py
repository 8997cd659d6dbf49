"""The negation rules of a yes/no question, and the polarity of its answer (openvivqa_jax.text.polarity)."""

import json
import os

import pytest

from openvivqa_jax.text.polarity import answer_polarity, negation_cues, polarity

REAL = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "real", "evjvqa",
                    "evjvqa_public_test-lang-qtype-answer.json")

# Each question labelled by reading it: +1 asks whether a statement holds, -1 whether its negation does.
LABELLED = [
    ("is there a red shape ?", "en", 1),
    ("is there no red shape ?", "en", -1),
    ("is the circle not red ?", "en", -1),
    ("is the small star red ?", "en", 1),
    ("does the image not contain a blue shape?", "en", -1),
    ("is there not a rectangle in the image?", "en", -1),
    ("isn't the cat black?", "en", -1),
    ("doesn’t the sign say milk?", "en", -1),
    ("is it not the case that there is no dog?", "en", 1),
    ("có hình màu đỏ nào không ?", "vi", 1),
    ("không có hình màu đỏ nào , đúng không ?", "vi", -1),
    ("hình tròn có màu đỏ không ?", "vi", 1),
    ("hình tròn không có màu đỏ , đúng không ?", "vi", -1),
    ("hình màu đỏ có phải là hình tròn không ?", "vi", 1),
    ("hình màu đỏ không phải là hình tròn , đúng không ?", "vi", -1),
    ("hình tròn không lớn , đúng không ?", "vi", -1),
    ("hình tròn có lớn không?", "vi", 1),
    ("anh ấy đã ăn cơm chưa?", "vi", 1),
    ("anh ấy chưa ăn cơm, phải không?", "vi", -1),
    ("bức ảnh này chẳng có con chó nào à?", "vi", -1),
    ("không gian trong ảnh có rộng không?", "vi", 1),
    ("không khí ở đây có trong lành không ?", "vi", 1),
    # an English question that names a Vietnamese word, and the reverse
    ("is the word phở not written in the picture ?", "en", -1),
    ("is the word chợ written in the picture ?", "en", 1),
    ("trong ảnh không có chữ milk , đúng không ?", "vi", -1),
]


@pytest.mark.parametrize("question,language,expected", LABELLED)
def test_polarity_of_labelled_questions(question, language, expected):
    assert polarity(question, language) == expected
    # the language detector reaches the same answer for these questions
    assert polarity(question) == expected


def test_cue_positions_name_the_negating_word():
    assert negation_cues("is there no red shape ?", "en") == [2]
    # the final "không" is the question particle, the first one negates
    assert negation_cues("hình tròn không lớn , đúng không ?", "vi") == [2]
    assert negation_cues("có hình màu đỏ nào không ?", "vi") == []


def test_language_rules_apply_to_their_language_only():
    # "no" is not a Vietnamese negation word, "không" not an English one
    assert negation_cues("con mèo có no không ?", "vi") == []
    assert negation_cues("is there no cat ?", "vi") == []
    assert negation_cues("không có mèo , đúng không ?", "en") == []
    assert negation_cues("これは猫ではない?", "ja") == []


@pytest.mark.parametrize("answer,expected", [
    ("yes", 1), ("Yes.", 1), ("có", 1), ("đúng", 1), (" phải ", 1), ("no", -1), ("không", -1), ("Sai", -1),
    ("no!", -1), ("một", 0), ("red square", 0), ("không có gì", 0), ("", 0)])
def test_answer_polarity(answer, expected):
    assert answer_polarity(answer) == expected


@pytest.mark.skipif(not os.path.isfile(REAL), reason="the EVJVQA public test file is not beside this checkout")
def test_real_evjvqa_questions_with_khong():
    """Every EVJVQA public-test question with the syllable "không", as published: "không gian" (space) is a noun,
    not a negation; "không mặc" (not wearing) and the like are negations (in relative clauses, which the rules do
    not scope)."""
    with open(REAL, encoding="utf-8") as f:
        questions = [a["question"] for a in json.load(f)["annotations"]]
    khong = sorted(q for q in questions if "không" in q.lower())
    cues = {q: len(negation_cues(q, "vi")) for q in khong}
    compound = [q for q in khong if "không gian" in q]
    assert compound and all(cues[q] == 0 for q in compound)
    negating = [q for q in khong if any(f"không {v}" in q for v in ("mặc", "đội", "đi", "đeo"))]
    assert len(negating) >= 3 and all(cues[q] == 1 for q in negating)
    assert set(compound) | set(negating) == set(khong)
