"""Compatibility characters (ligatures, full-width forms, ...) fold to their plain forms in normalize_text (NFKC),
while every Vietnamese letter stays exactly as written."""

from __future__ import annotations

import unicodedata

from openvivqa_jax.data import ocr as ocr_lib
from openvivqa_jax.evaluation import score
from openvivqa_jax.text.normalize import fold_compatibility, normalize_text

# The 12 Vietnamese vowels, each with its 6 tones (none, grave, acute, hook above, tilde, dot below), written out.
VOWELS = {
    "a": "aàáảãạ", "ă": "ăằắẳẵặ", "â": "âầấẩẫậ", "e": "eèéẻẽẹ", "ê": "êềếểễệ", "i": "iìíỉĩị",
    "o": "oòóỏõọ", "ô": "ôồốổỗộ", "ơ": "ơờớởỡợ", "u": "uùúủũụ", "ư": "ưừứửữự", "y": "yỳýỷỹỵ",
}
UPPER = {
    "a": "AÀÁẢÃẠ", "ă": "ĂẰẮẲẴẶ", "â": "ÂẦẤẨẪẬ", "e": "EÈÉẺẼẸ", "ê": "ÊỀẾỂỄỆ", "i": "IÌÍỈĨỊ",
    "o": "OÒÓỎÕỌ", "ô": "ÔỒỐỔỖỘ", "ơ": "ƠỜỚỞỠỢ", "u": "UÙÚỦŨỤ", "ư": "ƯỪỨỬỮỰ", "y": "YỲÝỶỸỴ",
}


def test_all_146_vietnamese_letters_round_trip():
    lower = "".join(VOWELS.values()) + "đ"
    upper = "".join(UPPER.values()) + "Đ"
    assert len(set(lower)) == 73 and len(set(upper)) == 73  # 146 letters in all
    for lo, up in zip(lower, upper):
        assert fold_compatibility(lo) == lo and fold_compatibility(up) == up, (lo, up)
        assert normalize_text(lo) == lo and normalize_text(up) == lo, (lo, up)
        # NFD input (combining marks) comes back as the precomposed letter.
        assert normalize_text(unicodedata.normalize("NFD", up)) == lo
    assert normalize_text("Trường Đại học Quốc gia Hà Nội") == "trường đại học quốc gia hà nội"


def test_compatibility_forms_fold():
    assert normalize_text("ﬁsh") == "fish" and normalize_text("ﬂower") == "flower"
    assert normalize_text("COﬀEE") == "coffee"
    assert normalize_text("ＣＡＦＥ　２４ｈ") == "cafe 24h"  # full-width letters, digits and ideographic space
    assert normalize_text("２０.０００đ") == "20,000 đồng"  # full-width digits reach the price rule
    assert normalize_text("m²") == "m2" and normalize_text("①") == "1"
    assert normalize_text("ｶﾌｪ") == "カフェ"  # half-width katakana
    assert normalize_text("giá\u00a0rẻ") == "giá rẻ"  # no-break space
    assert normalize_text("20.000₫") == "20,000 đồng"  # the dong sign has no compatibility form


def test_ligature_answers_score_as_their_letters():
    out = score({"1": "ﬁsh", "2": "ＣＯＦＦＥＥ"}, {"1": ["fish"], "2": ["coffee"]}, metrics=["EM", "F1"])
    assert out["overall"]["EM"] == 1.0 and out["overall"]["F1"] == 1.0


def test_ocr_token_with_a_ligature_is_copyable_as_the_word():
    tokens = ocr_lib.validate_tokens([{"text": "COﬀEE", "box": [0.1, 0.1, 0.5, 0.3], "score": 0.9}],
                                     source="ocr.json", image_id="7")
    assert [t["text"] for t in tokens] == ["coffee"]
    assert normalize_text("coffee") == tokens[0]["text"]  # the answer word equals the OCR token: a copy target
