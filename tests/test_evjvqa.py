"""EVJVQA: the builder on a test-made public-test-layout file in three languages, and the challenge's metrics
(token F1 with Japanese cut per character, BLEU = mean of BLEU-1..4) in the evaluator and the evaluate CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from openvivqa_jax.evaluation import evaluator
from openvivqa_jax.evaluation import evjvqa
from tfds_builders import readers
from tfds_builders.evjvqa import Builder, EvjvqaConfig

REPO = Path(__file__).resolve().parents[1]

# (id, image_id, question, answer, language) as in the public-test file; the expected normalized text
# (lowercase, a space before punctuation, also before the full-width "？") is written out in EXPECTED.
ANNOTATIONS = [
    (101, 1, "What is the woman selling?", "She is selling Pho.", "en"),
    (102, 1, "Người phụ nữ đang bán gì?", "Cô ấy đang bán phở", "vi"),
    (103, 1, "女性は何を売っていますか？", "フォーを売っています", "ja"),
    (104, 2, "What color is the car?", "red", "en"),
    (105, 2, "Chiếc xe màu gì?", "màu đỏ", "vi"),
    (106, 3, "看板には何と書いてありますか？", "ハノイ", "ja"),
]
EXPECTED = {
    "101": ("1", "what is the woman selling ?", ["she is selling pho ."], "en"),
    "102": ("1", "người phụ nữ đang bán gì ?", ["cô ấy đang bán phở"], "vi"),
    "103": ("1", "女性は何を売っていますか ？", ["フォーを売っています"], "ja"),
    "104": ("2", "what color is the car ?", ["red"], "en"),
    "105": ("2", "chiếc xe màu gì ?", ["màu đỏ"], "vi"),
    "106": ("3", "看板には何と書いてありますか ？", ["ハノイ"], "ja"),
}


def make_public_test(manual: Path, annotations=ANNOTATIONS, name="evjvqa_public_test.json") -> Path:
    """Writes the public-test layout with stand-in photos in public-test-images/."""
    images = manual / "public-test-images"
    images.mkdir(parents=True, exist_ok=True)
    for i in (1, 2, 3):
        Image.new("RGB", (48, 32), (60 * i, 100, 160)).save(images / f"{i:05d}.jpg", format="JPEG")
    data = {
        "images": [{"id": i, "filename": f"{i:05d}.jpg"} for i in (1, 2, 3)],
        "annotations": [{"id": q, "image_id": im, "question": qu, "answer": a, "language": lang}
                        for q, im, qu, a, lang in annotations],
    }
    path = manual / name
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def build(manual: Path, data_dir: Path, config: EvjvqaConfig | None = None) -> Builder:
    b = Builder(config=config or EvjvqaConfig(name="no_ocr", ocr_engine="none"), data_dir=str(data_dir),
                file_format="array_record")
    b.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
    return b


def test_builder_reads_every_question_with_its_language(tmp_path):
    manual = tmp_path / "manual"
    make_public_test(manual)
    b = build(manual, tmp_path / "data")
    assert list(b.info.splits) == ["test"]
    got = {}
    for ex in b.as_data_source()["test"]:
        got[ex["question_id"].decode()] = (ex["image_id"].decode(), ex["question"].decode(),
                                           [a.decode() for a in ex["answers"]], ex["language"].decode())
        assert ex["image"].shape == (32, 48, 3)
    assert got == EXPECTED
    assert b.language_counts["test"] == {"en": 2, "vi": 2, "ja": 2}
    assert b.skip_counts["test"] == {}


def test_language_aliases_and_errors(tmp_path):
    assert [readers_lang(v) for v in ("EN", "Japanese", "vie", " vi ")] == ["en", "ja", "vi", "vi"]
    manual = tmp_path / "manual"
    bad = list(ANNOTATIONS)
    bad[2] = (103, 1, "女性は何を売っていますか？", "フォー", "korean")
    make_public_test(manual, bad)
    with pytest.raises(readers.DatasetInputError, match=r"evjvqa_public_test\.json: question 103: language 'korean'"):
        build(manual, tmp_path / "data")
    b = build(manual, tmp_path / "data2", EvjvqaConfig(name="skip", ocr_engine="none", skip_invalid_records=True))
    assert b.skip_counts["test"] == {"invalid_record": 1}
    assert b.info.splits["test"].num_examples == 5


def readers_lang(value):
    from tfds_builders.evjvqa.evjvqa_dataset_builder import parse_language
    return parse_language(value, path="f.json", record="question 1")


def test_missing_language_needs_default_language(tmp_path):
    manual = tmp_path / "manual"
    path = make_public_test(manual)
    data = json.loads(path.read_text(encoding="utf-8"))
    del data["annotations"][0]["language"]
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(readers.DatasetInputError, match=r"question 101: no 'language' field"):
        build(manual, tmp_path / "data")
    b = build(manual, tmp_path / "data2", EvjvqaConfig(name="default_en", ocr_engine="none", default_language="en"))
    langs = {ex["question_id"].decode(): ex["language"].decode() for ex in b.as_data_source()["test"]}
    assert langs["101"] == "en"


def test_duplicate_question_id_in_list_form(tmp_path):
    manual = tmp_path / "manual"
    make_public_test(manual, ANNOTATIONS + [(101, 2, "again?", "again", "en")])
    with pytest.raises(readers.DatasetInputError, match=r"question 101: question id listed twice"):
        build(manual, tmp_path / "data")


# ---- metrics -------------------------------------------------------------------------------------------


def test_tokenize_per_language():
    assert evjvqa.tokenize("フォーを売っています 。", "ja") == list("フォーを売っています")
    assert evjvqa.tokenize("she is selling pho .", "en") == ["she", "is", "selling", "pho"]
    assert evjvqa.tokenize("cô ấy đang bán phở", "vi") == ["cô", "ấy", "đang", "bán", "phở"]
    assert evjvqa.tokenize("フォー", None) == ["フォー"]


def test_japanese_one_character_off():
    # 9 of the reference's 10 characters: p = 9/9, r = 9/10, F1 = 2 * 0.9 / 1.9.
    f1 = evjvqa.f1_scores(["フォーを売っていま"], [["フォーを売っています"]], ["ja"])
    assert f1[0] == pytest.approx(18 / 19)
    # BLEU-1..4 precisions are all 1; brevity penalty exp(1 - 10/9).
    bleu, per_q = evjvqa.bleu_mean(["フォーを売っていま"], [["フォーを売っています"]], ["ja"])
    assert bleu["overall"] == pytest.approx(math.exp(1 - 10 / 9), rel=1e-6)
    assert per_q[0] == pytest.approx(math.exp(1 - 10 / 9), rel=1e-6)
    # Whitespace tokens make the whole answer one token: nothing matches.
    assert evjvqa.f1_scores(["フォーを売っていま"], [["フォーを売っています"]], ["vi"])[0] == 0.0


def test_f1_max_over_references_and_multiset():
    # "a a b" vs "a b b": common = min(2,1) + min(1,2) = 2; p = r = 2/3.
    assert evjvqa.token_f1(["a", "a", "b"], ["a", "b", "b"]) == pytest.approx(2 / 3)
    f1 = evjvqa.f1_scores(["màu đỏ"], [["đỏ", "màu xanh"]], ["vi"])
    assert f1[0] == pytest.approx(2 / 3)  # vs "đỏ": p 1/2, r 1 -> 2/3; vs "màu xanh": 1/2
    assert evjvqa.f1_scores(["?"], [["đỏ"]], ["vi"])[0] == 0.0


def test_evaluator_scores_per_language_tokens():
    preds = {"1": "フォーを売っていま", "2": "they sell pho noodles", "3": "ở đây bán bún"}
    refs = {"1": ["フォーを売っています"], "2": ["they sell pho"], "3": ["ở đây bán phở"]}
    langs = {"1": "ja", "2": "en", "3": "vi"}
    out = evaluator.score(preds, refs, metrics=["EVJVQA"], fields={"language": langs}, per_question=True)
    # en: common 3, p 3/4, r 1 -> 6/7; vi: p = r = 3/4.
    expected = {"1": 18 / 19, "2": 6 / 7, "3": 0.75}
    assert out["overall"]["EVJVQA-F1"] == pytest.approx(np.mean(list(expected.values())))
    for q, v in expected.items():
        assert out["per_question"][q]["EVJVQA-F1"] == pytest.approx(v)
    # Corpus BLEU over the 3 questions: tokens ja 9/10, en 4/3, vi 4/4. Matches: 1-grams 9+3+3 of 9+4+4,
    # 2-grams 8+2+2 of 8+3+3, 3-grams 7+1+1 of 7+2+2, 4-grams 6+0+0 of 6+1+1; hyp length 17 >= ref 17.
    p = [15 / 17, 12 / 14, 9 / 11, 6 / 8]
    b = [math.prod(p[: k + 1]) ** (1 / (k + 1)) for k in range(4)]
    assert out["overall"]["EVJVQA-BLEU"] == pytest.approx(np.mean(b), rel=1e-6)
    # Named defaults: added when a question is not Vietnamese, absent for an all-Vietnamese set.
    named = evaluator.score(preds, refs, fields={"language": langs}, metrics=["F1"])["metrics"]
    assert named == ["F1"]
    assert evaluator.resolve_metrics(None, multilingual=True)[-2:] == ["EVJVQA-F1", "EVJVQA-BLEU"]
    assert "EVJVQA-F1" not in evaluator.resolve_metrics(None)


def test_evaluate_cli_japanese_one_character_off(tmp_path):
    manual = tmp_path / "manual"
    ref = make_public_test(manual)
    preds = {"101": "she is selling pho", "102": "cô ấy đang bán phở", "103": "フォーを売っていま",
             "104": "red", "105": "màu đỏ", "106": "ハノイ"}
    pred_path = tmp_path / "preds.json"
    pred_path.write_text(json.dumps(preds, ensure_ascii=False), encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "openvivqa_jax.evaluate", "--predictions", str(pred_path),
                          "--references", str(ref), "--metrics", "F1,EVJVQA", "--per_question"],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    q103 = out["per_question"]["103"]
    assert q103["EVJVQA-F1"] == pytest.approx(18 / 19) and q103["EVJVQA-F1"] > 0.8
    assert q103["F1"] == 0.0  # SQuAD F1 on whitespace tokens: the Japanese answer is one token
    assert out["overall"]["EVJVQA-F1"] == pytest.approx((5 + 18 / 19) / 6)
    # Per language: en and vi exact (the final "." is punctuation); ja = questions 103 (9 of 10 characters)
    # and 106 (exact). BLEU over the two ja answers: every n-gram precision is 1 (12/12, 10/10, 8/8, 6/6),
    # brevity penalty exp(1 - 13/12).
    by_lang = out["by_field"]["language"]
    assert {k: v["num_questions"] for k, v in by_lang.items()} == {"en": 2, "ja": 2, "vi": 2}
    assert by_lang["en"]["EVJVQA-F1"] == pytest.approx(1.0) and by_lang["vi"]["EVJVQA-F1"] == pytest.approx(1.0)
    assert by_lang["ja"]["EVJVQA-F1"] == pytest.approx((1 + 18 / 19) / 2)
    assert by_lang["ja"]["EVJVQA-BLEU"] == pytest.approx(math.exp(1 - 13 / 12), rel=1e-6)
    assert by_lang["en"]["EVJVQA-BLEU"] == pytest.approx(1.0, rel=1e-6)
