"""Scripts without word spaces are tokenized per character in the general metrics (as the EVJVQA scorer does for
Japanese), detected from the text when no language is given; noted in the metrics; parity mode untouched."""

from __future__ import annotations

import math

import pytest

from openvivqa_jax.evaluation import score
from openvivqa_jax.evaluation.scripts import split_spaceless

HYP, REF = "提灯は3個", "提灯は3個です"


def test_split_spaceless():
    assert split_spaceless(HYP) == "提 灯 は 3 個"
    assert split_spaceless("ABC カフェ 24h") == "ABC カ フ ェ 24h"
    # Thai: the vowel and tone marks stay with their consonant (ก + ้ is one character).
    assert split_spaceless("ก้าว") == "ก้ า ว"
    assert split_spaceless("phở bò") == "phở bò"


@pytest.mark.parametrize("fields", [None, {"language": {"1": "ja"}}])
def test_japanese_near_miss_scores_per_character(fields):
    """Hypothesis 5 characters, all in the 7-character reference: hand-computed values."""
    out = score({"1": HYP}, {"1": [REF]}, metrics=["BLEU", "ROUGE-L", "EM", "F1", "ANLS"], fields=fields)
    o = out["overall"]
    p, r = 1.0, 5 / 7
    assert o["F1"] == pytest.approx(2 * p * r / (p + r))  # 0.8333
    beta2 = 1.2 ** 2  # ROUGE-L of pycocoevalcap, beta 1.2
    assert o["ROUGE-L"] == pytest.approx((1 + beta2) * p * r / (r + beta2 * p), rel=1e-6)
    assert o["BLEU-1"] == pytest.approx(math.exp(1 - 7 / 5), rel=1e-4)  # precision 1, brevity penalty
    assert o["EM"] == 0.0
    assert o["ANLS"] == pytest.approx(1 - 2 / 7)  # on the text as written: 2 edits over 7 characters
    assert out["counts"]["per_character_questions"] == 1
    assert any("tokenized per character" in n for n in out["notes"])


def test_other_language_is_not_cut():
    out = score({"1": HYP}, {"1": [REF]}, metrics=["F1"], fields={"language": {"1": "vi"}})
    assert out["overall"]["F1"] == 0.0 and out["counts"]["per_character_questions"] == 0


def test_vietnamese_scores_unchanged():
    out = score({"1": "quán phở", "2": "màu đỏ"}, {"1": ["quán phở bò"], "2": ["màu đỏ"]}, metrics=["F1", "EM"])
    assert out["overall"]["F1"] == pytest.approx((0.8 + 1.0) / 2) and out["overall"]["EM"] == 0.5
    assert out["counts"]["per_character_questions"] == 0


def test_empty_prediction_notes_match_the_scores():
    """Empty vs empty scores ANLS 1 (NL of two empty strings is 0, the ST-VQA script's rule), and the notes say so;
    empty vs a non-empty reference scores 0 and is noted as such."""
    out = score({"1": "", "2": ""}, {"1": [""], "2": ["phở"]}, metrics=["ANLS", "EM"], per_question=True)
    assert out["per_question"]["1"]["ANLS"] == 1.0 and out["per_question"]["2"]["ANLS"] == 0.0
    assert out["counts"]["empty_predictions"] == 1 and out["counts"]["empty_predictions_on_empty_references"] == 1
    assert any("score the maximum (ANLS 1" in n for n in out["notes"])
    assert any(n.startswith("1 predictions are empty after normalization and score 0") for n in out["notes"])


def test_vqa_english_answer_deletes_at_most_32_periods():
    """vqaEval.py's periodStrip.sub('', text, re.UNICODE) passes re.UNICODE (32) as the count."""
    from openvivqa_jax.evaluation.vqa_accuracy import MAX_PERIODS_DELETED, english_answer

    assert MAX_PERIODS_DELETED == 32
    assert english_answer("yes" + "." * 40) == "yes" + "." * 8
    assert english_answer("yes...") == "yes" and english_answer("2.5") == "2.5"
