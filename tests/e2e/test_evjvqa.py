"""EVJVQA: the builder on a test-made public-test-layout file in three languages, and the challenge's metrics
(the scorer's token-set F1 with Japanese detected from the reference, BLEU = mean of BLEU-1..4) in the evaluator and
the evaluate CLI. The expected metric values are those the challenge's scorer (``evaluate_metrics.py`` of
phanxuanphucnd/EVJVQA) gives on the same answers; tests/unit/test_official_parity.py compares with its stored
outputs on the real baseline submission."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from openvivqa_jax.evaluation import evaluator
from openvivqa_jax.evaluation import evjvqa
from tfds_builders import readers
from tfds_builders.evjvqa import Builder, EvjvqaConfig

REPO = Path(__file__).resolve().parents[2]

# (id, image_id, question, answer, language) as in the public-test file; the expected normalized text
# (lowercase, a space before punctuation; the full-width "？" folded to "?" by NFKC) is written out in EXPECTED.
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
    "103": ("1", "女性は何を売っていますか ?", ["フォーを売っています"], "ja"),
    "104": ("2", "what color is the car ?", ["red"], "en"),
    "105": ("2", "chiếc xe màu gì ?", ["màu đỏ"], "vi"),
    "106": ("3", "看板には何と書いてありますか ?", ["ハノイ"], "ja"),
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
    b = build(manual, tmp_path / "data")
    got = {ex["question_id"].decode(): ex["question"].decode() for ex in b.as_data_source()["test"]}
    assert got["101#2"] == "again ?" and "101" in got and len(got) == len(ANNOTATIONS) + 1
    assert b.repairs["test"].totals() == {"repeated_id_renamed": 1}
    with pytest.raises(readers.DatasetInputError, match=r"question 101: question id repeated with another question "
                       r"\(also in .*\) \(refused by the builder option strict"):
        build(manual, tmp_path / "data2", EvjvqaConfig(name="strict", ocr_engine="none", strict=True))


# ---- metrics -------------------------------------------------------------------------------------------


def test_tokens_as_the_scorer_cuts_them():
    # Japanese: every character as written (no lowercasing, punctuation and spaces kept); otherwise lowercased,
    # ASCII punctuation deleted without a space, whitespace tokens.
    assert evjvqa.answer_tokens("フォーを売っています。", True) == list("フォーを売っています。")
    assert evjvqa.answer_tokens("She is selling a T-shirt.", False) == ["she", "is", "selling", "a", "tshirt"]
    assert evjvqa.answer_tokens("Cô ấy đang bán phở", False) == ["cô", "ấy", "đang", "bán", "phở"]
    assert evjvqa.is_japanese("2人") and evjvqa.is_japanese("ＡＢＣ") and not evjvqa.is_japanese("màu đỏ")


def test_japanese_one_character_off():
    # 9 of the reference's 10 characters: p = 9/9, r = 9/10, F1 = 2 * 0.9 / 1.9 (the scorer: 0.9473684210526316).
    f1 = evjvqa.f1_scores(["フォーを売っていま"], [["フォーを売っています"]])
    assert f1[0] == pytest.approx(18 / 19)
    # BLEU-1..4 precisions are all 1; brevity penalty exp(1 - 10/9).
    bleu, per_q = evjvqa.bleu_mean(["フォーを売っていま"], [["フォーを売っています"]])
    assert bleu["overall"] == pytest.approx(math.exp(1 - 10 / 9), rel=1e-6)
    assert per_q[0] == pytest.approx(math.exp(1 - 10 / 9), rel=1e-6)
    # The reference's characters decide, not a language field: a question without one scores the same.
    assert evaluator.score({"q": "フォーを売っていま"}, {"q": ["フォーを売っています"]},
                           metrics=["EVJVQA-F1"])["overall"]["EVJVQA-F1"] == pytest.approx(18 / 19)


def test_f1_on_token_sets_max_over_references():
    # Sets, as the scorer: "a a b" vs "a b b" share {a, b}: F1 1 (a multiset count would give 2/3).
    assert evjvqa.token_f1(["a", "a", "b"], ["a", "b", "b"]) == 1.0
    f1 = evjvqa.f1_scores(["màu đỏ"], [["đỏ", "màu xanh"]])
    assert f1[0] == pytest.approx(2 / 3)  # vs "đỏ": p 1/2, r 1 -> 2/3; vs "màu xanh": 1/2
    assert evjvqa.f1_scores(["?"], [["đỏ"]])[0] == 0.0  # no token left: 0 against a non-empty reference
    assert evjvqa.f1_scores(["?"], [["..."]])[0] == 1.0  # and 1 against a reference with none either


def test_evaluator_scores_per_language_tokens():
    preds = {"1": "フォーを売っていま", "2": "they sell pho noodles", "3": "ở đây bán bún"}
    refs = {"1": ["フォーを売っています"], "2": ["they sell pho"], "3": ["ở đây bán phở"]}
    langs = {"1": "ja", "2": "en", "3": "vi"}
    out = evaluator.score(preds, refs, metrics=["EVJVQA"], fields={"language": langs}, per_question=True)
    # en: common 3, p 3/4, r 1 -> 6/7; vi: p = r = 3/4 (the scorer: F1 0.8515037593984962, BLEU 0.857383335838779).
    expected = {"1": 18 / 19, "2": 6 / 7, "3": 0.75}
    assert out["overall"]["EVJVQA-F1"] == pytest.approx(np.mean(list(expected.values())))
    for q, v in expected.items():
        assert out["per_question"][q]["EVJVQA-F1"] == pytest.approx(v)
    # Corpus BLEU over the 3 questions: tokens ja 9/10, en 4/3, vi 4/4. Matches: 1-grams 9+3+3 of 9+4+4,
    # 2-grams 8+2+2 of 8+3+3, 3-grams 7+1+1 of 7+2+2, 4-grams 6+0+0 of 6+1+1; hyp length 17 >= ref 17.
    p = [15 / 17, 12 / 14, 9 / 11, 6 / 8]
    b = [math.prod(p[: k + 1]) ** (1 / (k + 1)) for k in range(4)]
    assert out["overall"]["EVJVQA-BLEU"] == pytest.approx(np.mean(b), rel=1e-6)
    assert out["overall"]["EVJVQA-BLEU"] == pytest.approx(0.857383335838779, abs=1e-12)
    assert out["rules"]["EVJVQA-F1"]["official"] and "evaluate_metrics.py" in out["rules"]["EVJVQA-F1"]["rule"]
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
    # SQuAD F1 per character too (Japanese has no word spaces): 9 of the 10 reference characters.
    assert q103["F1"] == pytest.approx(18 / 19)
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
    # The challenge's scorer on the same answers: F1 0.9912280701754387; on the two ja questions BLEU
    # 0.9200444144614472.
    assert out["overall"]["EVJVQA-F1"] == pytest.approx(0.9912280701754387, abs=1e-12)
    assert by_lang["ja"]["EVJVQA-BLEU"] == pytest.approx(0.9200444144614472, abs=1e-12)


# ---- the config and its tokenizer ------------------------------------------------------------------------------

# A three-language corpus (12 objects x 8 colours x 3 templates per language = 288 questions and answers each).

OBJECTS = {  # en, vi, ja
    "car": ("xe hơi", "車"), "bicycle": ("xe đạp", "自転車"), "sign": ("biển hiệu", "看板"),
    "hat": ("cái nón", "帽子"), "umbrella": ("cây dù", "傘"), "building": ("tòa nhà", "建物"),
    "dog": ("con chó", "犬"), "motorbike": ("xe máy", "バイク"), "shop": ("cửa hàng", "お店"),
    "flower": ("bông hoa", "花"), "fruit": ("trái cây", "果物"), "boat": ("chiếc thuyền", "ボート"),
}
COLORS = {"red": ("đỏ", "赤"), "blue": ("xanh dương", "青"), "green": ("xanh lá", "緑"), "yellow": ("vàng", "黄色"),
          "white": ("trắng", "白"), "black": ("đen", "黒"), "brown": ("nâu", "茶色"), "pink": ("hồng", "ピンク")}
NUMS = {2: ("two", "hai", "二"), 3: ("three", "ba", "三"), 4: ("four", "bốn", "四")}


def three_language_corpus():
    """[(language, question, answer)]: 12 objects x 8 colours x 3 templates per language."""
    out = []
    objs = list(OBJECTS.items())
    for (i, (o_en, (o_vi, o_ja))), (c_en, (c_vi, c_ja)) in itertools.product(enumerate(objs), COLORS.items()):
        o2_en, (o2_vi, o2_ja) = objs[(i + 1) % len(objs)]
        n = 2 + (i % 3)
        n_en, n_vi, n_ja = NUMS[n]
        out += [
            ("en", f"what color is the {o_en} in the picture?", f"the {o_en} is {c_en}"),
            ("en", f"how many {o_en}s are next to the {c_en} {o2_en}?", f"there are {n_en} {o_en}s"),
            ("en", f"what is next to the {c_en} {o_en}?", f"a {o2_en} is next to the {c_en} {o_en}"),
            ("vi", f"{o_vi} trong ảnh có màu gì?", f"{o_vi} có màu {c_vi}"),
            ("vi", f"có bao nhiêu {o_vi} bên cạnh {o2_vi} màu {c_vi}?", f"có {n_vi} {o_vi}"),
            ("vi", f"bên cạnh {o_vi} màu {c_vi} là gì?", f"bên cạnh {o_vi} màu {c_vi} là {o2_vi}"),
            ("ja", f"写真の{o_ja}は何色ですか？", f"{o_ja}は{c_ja}です"),
            ("ja", f"{c_ja}い{o2_ja}の隣に{o_ja}はいくつありますか？", f"{o_ja}は{n_ja}つあります"),
            ("ja", f"{c_ja}の{o_ja}の隣に何がありますか？", f"{c_ja}の{o_ja}の隣に{o2_ja}があります"),
        ]
    return out


def _japanese(ch: str) -> bool:
    name = unicodedata.name(ch, "")
    return any(k in name for k in ("HIRAGANA", "KATAKANA", "CJK"))


def test_sentencepiece_covers_latin_vietnamese_and_japanese(tmp_path):
    """The config's tokenizer (BPE, character_coverage 1.0, vocab 8,000) on the three-language corpus: every
    character is a piece (no byte fallback), Japanese pieces exist, text round-trips, nothing is cut at the
    config's 30 pieces."""
    import sentencepiece as spm

    from openvivqa_jax.config_files import load_config
    from openvivqa_jax.text.normalize import normalize_text
    from openvivqa_jax.text.tokenizer import train_sentencepiece

    cfg = load_config(str(REPO / "configs/evjvqa/mlpag.py"))
    rows = [(lang, normalize_text(q), normalize_text(a)) for lang, q, a in three_language_corpus()]
    assert len(rows) == 864
    texts = [t for _, q, a in rows for t in (q, a)]
    train_sentencepiece(texts, str(tmp_path / "spm.model"), cfg.tokenizer.vocab_size,
                        model_type=cfg.tokenizer.model_type)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    chars = {c for t in texts for c in t if c != " "}
    ja_chars = {c for c in chars if _japanese(c)}
    assert len(ja_chars) == 51  # the distinct kana and kanji of the word lists and templates above
    for c in chars:  # every character has its own piece (with or without the word-start mark)
        assert sp.piece_to_id(c) != sp.unk_id() or sp.piece_to_id("\u2581" + c) != sp.unk_id(), c
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert sum(any(_japanese(c) for c in p) for p in pieces) > len(ja_chars)  # characters + merged words
    longest = {}
    for lang, q, a in rows:
        for t in (q, a):
            ids = sp.encode(t)
            assert not any(sp.is_byte(i) for i in ids), t
            assert sp.decode(ids) == t
        longest[lang] = max(longest.get(lang, 0), len(sp.encode(q)))
    assert max(longest.values()) <= cfg.model.max_question_len  # cut rate 0 at 30 pieces
    # An unseen kanji falls back to its 3 UTF-8 byte pieces instead of an unknown piece.
    ids = sp.encode("麺")
    assert sum(sp.is_byte(i) for i in ids) == 3 and sp.decode(ids) == "麺"


def test_config_points_at_evjvqa():
    from openvivqa_jax.config_files import load_config

    c = load_config(str(REPO / "configs/evjvqa/mlpag.py"))
    assert (c.data.builder, c.model.name, c.train.best_metric) == ("evjvqa", "mlpag", "EVJVQA-F1")
    assert (c.data.train_split, c.data.eval_split, c.data.test_split) == ("train[:90%]", "train[90%:]", "test")
    assert c.eval.metrics[:2] == ("EVJVQA-F1", "EVJVQA-BLEU")
    assert (c.tokenizer.model_type, c.tokenizer.vocab_size) == ("bpe", 8000)


@pytest.mark.slow
def test_mlpag_trains_on_evjvqa_and_reports_per_language(tmp_path):
    """configs/evjvqa/mlpag.py through `main` at tiny sizes on a train file (30 questions) and the public test
    (6): the metrics files carry EVJVQA-F1 and EVJVQA-BLEU overall and per language (2-3 min on 2 busy cores)."""
    from conftest import subprocess_env

    manual = tmp_path / "manual"
    make_public_test(manual)
    rows = three_language_corpus()
    train = [(1000 + i, 1 + i % 3, q, a, lang) for i, (lang, q, a) in enumerate(rows[:30])]
    data = {"images": [{"id": i, "filename": f"{i:05d}.jpg"} for i in (1, 2, 3)],
            "annotations": [{"id": q, "image_id": im, "question": qu, "answer": a, "language": lang}
                            for q, im, qu, a, lang in train]}
    (manual / "train-images").mkdir()
    for i in (1, 2, 3):
        Image.new("RGB", (48, 32), (30 * i, 80, 40)).save(manual / "train-images" / f"{i:05d}.jpg", format="JPEG")
    (manual / "evjvqa_train.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    wd = tmp_path / "run"
    tiny = ["--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.ffn_dim=64",
            "--config.model.vision.cnn_channels=(8, 16)", "--config.data.image_size=(32, 24)",
            "--config.tokenizer.vocab_size=300", "--config.train.batch_size=2", "--config.train.num_train_steps=2",
            "--config.train.eval_every_steps=2", "--config.train.checkpoint_every_steps=2",
            "--config.train.log_every_steps=1", "--config.eval.batch_size=2", "--config.eval.beam_size=1",
            "--config.model.num_fusion_layers=1", "--config.model.num_decoder_layers=1", "--config.model.num_ocr=4"]
    res = subprocess.run(
        [sys.executable, "-m", "openvivqa_jax.main", "--config=configs/evjvqa/mlpag.py", f"--workdir={wd}",
         f"--config.data.manual_dir={manual}", f"--config.data.data_dir={tmp_path / 'tfds'}", *tiny],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    test = json.loads((wd / "eval" / "test_metrics.json").read_text(encoding="utf-8"))
    preds = json.loads((wd / "eval" / "test_predictions.json").read_text(encoding="utf-8"))
    assert {p["question_id"]: p["language"] for p in preds} == {k: v[3] for k, v in EXPECTED.items()}
    by_lang = test["by_field"]["language"]
    assert {k: v["num_questions"] for k, v in by_lang.items()} == {"en": 2, "ja": 2, "vi": 2}
    # EVJVQA-F1 recomputed here from the written predictions with the challenge's rule (on the answers as given).
    for lang in ("en", "ja", "vi"):
        mine = [p for p in preds if p["language"] == lang]
        f1 = evjvqa.f1_scores([p["prediction"] for p in mine], [p["references"] for p in mine])
        assert by_lang[lang]["EVJVQA-F1"] == pytest.approx(float(f1.mean()))
        assert "EVJVQA-BLEU" in by_lang[lang]
    assert set(test["metrics"]) == {"EVJVQA-F1", "EVJVQA-BLEU", "EM", "ROUGE-L"}
    assert test["text_mode"] == "openvivqa" and test["rules"]["EVJVQA-F1"]["official"]
    assert not test["rules"]["EM"]["official"] and "Vietnamese-normalized" in test["rules"]["ROUGE-L"]["rule"]
    dev = json.loads((wd / "eval" / "dev_metrics.json").read_text(encoding="utf-8"))
    assert dev["num_questions"]["overall"] == 3
