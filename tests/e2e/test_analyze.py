"""Tests of the dataset analysis (openvivqa_jax.analysis, python -m openvivqa_jax.analyze).

Expected values are worked out by hand in the comments, or are those of the widely used worked example of Fleiss'
kappa (10 subjects, 14 raters, 5 categories), computed with the definitions of Fleiss (1971).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, SHARED, subprocess_env
from openvivqa_jax import analyze
from openvivqa_jax.analysis import guideline, kappa, linguistic, stats
from openvivqa_jax.analysis.records import QA, EmptySplitError, read_reference_file, syllables

EXAMPLES = os.path.join(SHARED, "data", "openvivqa_examples", "examples_data.json")
VIVQA = os.path.join(SHARED, "data", "vivqa_sample")

# The textbook worked example of Fleiss' kappa: 10 subjects, 14 raters, 5 categories (n_ij per subject).
FLEISS_TABLE = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]


def qa(qid, question, answer, image="1", qa_type=-1, split="train", ocr=None):
    answers = (answer,) if isinstance(answer, str) else tuple(answer)
    return QA(split, qid, image, question, answers, qa_type, ocr)


# ---------------------------------------------------------------------------------------------------------
# Fleiss' kappa


def test_fleiss_kappa_worked_example():
    r = kappa.fleiss_kappa(np.array(FLEISS_TABLE))
    # P_bar = 172/455 = 0.378, P_e = 417/1960 = 0.213, kappa = 4211/20059 = 0.210 (the published value 0.210).
    assert r["kappa"] == pytest.approx(0.210, abs=5e-4)
    assert r["kappa"] == pytest.approx(4211 / 20059, rel=1e-12)
    assert r["P_bar"] == pytest.approx(172 / 455, rel=1e-12)
    assert r["P_e"] == pytest.approx(417 / 1960, rel=1e-12)
    assert r["p_j"] == pytest.approx([20 / 140, 28 / 140, 39 / 140, 21 / 140, 32 / 140])
    assert (r["N"], r["n"], r["k"]) == (10, 14, 5)
    assert r["percent_agreement"] == pytest.approx(0.1)  # only subject 1 is unanimous


def test_agreement_file_from_labels(tmp_path):
    # The worked example written as labels (one column per rater) gives the same kappa.
    path = tmp_path / "labels.tsv"
    lines = ["# item labels, one per rater"]
    for row in FLEISS_TABLE:
        lines.append("\t".join(f"c{j + 1}" for j, n in enumerate(row) for _ in range(n)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = kappa.agreement(path)
    assert r["categories"] == ["c1", "c2", "c3", "c4", "c5"]
    assert r["kappa"] == pytest.approx(4211 / 20059, rel=1e-12)

    # 4 items, 3 annotators, 2 types: n_ij = [3,0],[2,1],[0,3],[1,2] -> P_i = 1, 1/3, 1, 1/3; P_bar = 2/3;
    # p = (1/2, 1/2), P_e = 1/2; kappa = (2/3 - 1/2) / (1/2) = 1/3; 2 of 4 items unanimous.
    small = tmp_path / "qa_type.csv"
    small.write_text("text,text,text\ntext,text,non-text\n\nnon-text,non-text,non-text\ntext,non-text,non-text\n")
    r = kappa.agreement(small)
    assert r["kappa"] == pytest.approx(1 / 3)
    assert r["percent_agreement"] == pytest.approx(0.5)
    assert (r["N"], r["n"], r["k"]) == (4, 3, 2)


def test_kappa_undefined_and_bad_input(tmp_path):
    assert kappa.fleiss_kappa(np.array([[3, 0], [3, 0]]))["kappa"] is None  # P_e = 1
    with pytest.raises(ValueError, match="item 1 has 2 labels"):
        kappa.fleiss_kappa(np.array([[3, 0], [1, 1]]))
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("a,a,b\na,b\n")
    with pytest.raises(kappa.AgreementFileError, match="line 2 has 2 labels but line 1 has 3"):
        kappa.read_agreement_file(ragged)
    one = tmp_path / "one.csv"
    one.write_text("a\nb\n")
    with pytest.raises(kappa.AgreementFileError, match="at least two"):
        kappa.read_agreement_file(one)


# ---------------------------------------------------------------------------------------------------------
# Linguistic levels


@pytest.mark.parametrize("text, level", [
    ("đèn", "word"),
    ("đường tạ hiện", "phrase"),
    ("cửa tiệm cắt tóc bầu", "phrase"),
    ("có một người đàn ông và một người phụ nữ", "phrase"),  # no subject before "có"
    ("ở cạnh bên một gian hàng", "phrase"),
    ("đây là tỉnh vĩnh long", "sentence"),
    ("cửa tiệm này tên mộc", "sentence"),
    ("chiếc xe đạp đang được dựng ở cạnh bên một gian hàng", "sentence"),  # paper Figure 7 (c)
    ("món ăn có giá 20.000đ", "sentence"),
])
def test_linguistic_level(text, level):
    assert linguistic.linguistic_level(text) == level


# ---------------------------------------------------------------------------------------------------------
# Guideline rules: one violating and one clean QA each


def test_rule_qas_per_image():
    qas = [qa("a1", "q1", "x y", image="A"), qa("a2", "q2", "x y", image="A"), qa("a3", "q3", "x y", image="A"),
           qa("b1", "q4", "x y", image="B"), qa("b2", "q5", "x y", image="B")]
    r = guideline.rule_qas_per_image(qas)
    assert r.violations == ["b1", "b2"] and r.count == 2
    assert r.checked == 2 and r.extra["images_below_minimum"] == 1
    r = guideline.rule_qas_per_image([qa("s", "q", "a", image=None)])
    assert not r.checkable and r.count == 0


@pytest.mark.parametrize("rule, qas, violations, reasons", [
    pytest.param("answer_complexity", [qa("bad", "đèn màu gì ?", "đỏ"), qa("ok", "đèn màu gì ?", "đèn màu đỏ")],
                 ["bad"], {"single_word": ["bad"]}, id="answer_complexity"),
    pytest.param("question_type", [
        qa("yn", "chiếc xe này có màu đỏ không ?", "có"),
        qa("sel", "chiếc áo màu đỏ hay màu xanh lá ?", "màu đỏ"),
        qa("ok", "có bao nhiêu chiếc xe ?", "có hai chiếc xe"),
    ], ["yn", "sel"], {"yes_no": ["yn"], "selective": ["sel"]}, id="question_type"),
    pytest.param("quantities", [
        qa("digits", "có bao nhiêu người ?", "có 3 người"),
        qa("over", "có bao nhiêu chiếc xe ?", "có mười hai chiếc xe"),
        qa("vague", "có bao nhiêu người ?", "có hàng chục người"),
        qa("ok", "có bao nhiêu người ?", "có ba người đứng ở sạp hàng số 371"),
        qa("price", "tô phở giá bao nhiêu ?", "tô phở có giá 20,000 đồng"),
        qa("phone", "số điện thoại là gì ?", "số điện thoại là 0912 345 678"),
    ], ["digits", "over", "vague"], {"digits": ["digits"], "over_ten": ["over", "vague"]}, id="quantities"),
    pytest.param("colours", [
        qa("tia", "màu của chăn là gì", "màu tía"),
        qa("xanh", "áo của cô ấy màu gì ?", "cô ấy mặc áo xanh"),
        qa("ok", "màu áo của cô ấy là gì ?", "áo màu xanh lá cây và trắng"),
    ], ["tia", "xanh"], {"off_list": ["tia"], "ambiguous_xanh": ["xanh"]}, id="colours"),
])
def test_rule_flags_the_violating_qas_with_reasons(rule, qas, violations, reasons):
    r = getattr(guideline, f"rule_{rule}")(qas)
    assert r.violations == violations
    assert r.reasons == reasons


@pytest.mark.parametrize("words, value", [
    ("ba", 3), ("mười", 10), ("mười một", 11), ("hai mươi lăm", 25), ("ba mươi mốt", 31),
    ("một trăm linh năm", 105), ("hai nghìn", 2000),
])
def test_number_value(words, value):
    assert guideline.number_value(words.split()) == value


def test_colour_table_is_the_generators():
    from tfds_builders.synthetic_openvivqa import generator

    assert len(guideline.GUIDELINE_COLORS) == 12
    assert [forms[0] for forms in guideline.GUIDELINE_COLORS.values()] == list(generator.COLORS)


def test_rule_directions_lists_for_review():
    r = guideline.rule_directions([qa("lr", "xe nào ở bên trái ?", "chiếc xe đỏ ở bên trái"),
                                   qa("none", "xe màu gì ?", "xe màu đỏ")])
    assert not r.checkable and r.count == 0 and r.review == ["lr"]


def test_rule_prices():
    r = guideline.rule_prices([qa("raw", "tô phở giá bao nhiêu?", "tô phở giá 20.000đ"),
                               qa("ok", "tô phở giá bao nhiêu ?", "tô phở giá 20,000 đồng")])
    assert r.violations == ["raw"] and r.reasons == {"price_form": ["raw"]}


# ---------------------------------------------------------------------------------------------------------
# Statistics


def test_statistics_of_the_openvivqa_examples():
    qas = read_reference_file(EXAMPLES, "examples")
    st = stats.statistics(qas)
    assert (st["images"], st["questions"], st["answers"]) == (7, 7, 7)
    # Questions: "cửa tiệm này tên gì?" 5, "cửa tiệm cắt tóc nam tên gì?" 7, "quán bia saigon nằm trên con đường
    # nào?" 8, "đây là tỉnh nào?" 4, "sản phẩm này tên gì?" 5, "bạn nữ đang đứng ở con phố nào?" 8, "quán này làm
    # bánh xèo theo kiểu gì?" 8.
    assert st["question_length"]["histogram"] == {"4": 1, "5": 2, "7": 1, "8": 3}
    assert st["question_length"]["mean"] == pytest.approx(45 / 7)
    # Answers: 5 (cửa tiệm này tên mộc), 5, 3 (đường tạ hiện), 5, 9, 3, 9.
    assert st["answer_length"]["histogram"] == {"3": 2, "5": 3, "9": 2}
    assert st["answer_length"]["mean"] == pytest.approx(39 / 7)
    assert st["answer_length"]["median"] == 5.0
    assert st["answer_length"]["share_2_to_10"] == 1.0
    assert st["qa_types"] == {"text": 0, "non_text": 0, "unknown": 7}
    # sentences: "... này tên mộc", "đây là ...", "sản phẩm này tên ...", "quán này làm ..."
    assert st["linguistic_level"]["counts"] == {"word": 0, "phrase": 3, "sentence": 4}
    # 31 distinct answer syllables: cửa tiệm này tên mộc cắt tóc bầu đường tạ hiện đây là tỉnh vĩnh long sản
    # phẩm bánh cosy quế các vị phố quán làm xèo theo kiểu nhật bản.
    assert st["vocabulary"]["answers"] == 31
    assert st["qas_per_image"]["mean"] == 1.0
    assert st["ocr_coverage"] is None
    rules = guideline.check(qas)
    assert rules["qas_per_image"].count == 7
    assert all(rules[name].count == 0 for name in guideline.RULES if name != "qas_per_image")


def _release_file(tmp_path):
    """A public-release JSON: image 10 has 3 QAs, image 11 has 2."""
    data = {
        "images": {"10": "a.jpg", "11": "b.jpg"},
        "annotations": {
            "1": {"image_id": 10, "question": "quán này tên gì?", "answer": "quán này tên là phở hà", "QA-type": 1},
            "2": {"image_id": 10, "question": "tô phở giá bao nhiêu?", "answer": "một tô phở giá 35.000đ",
                  "QA-type": 1},
            "3": {"image_id": 10, "question": "có bao nhiêu người?", "answer": "có 3 người", "QA-type": 0},
            "4": {"image_id": 11, "question": "chiếc xe màu gì?", "answer": "đỏ", "QA-type": 0},
            "5": {"image_id": 11, "question": "chiếc ô tô có màu xanh không?", "answer": "chiếc ô tô màu xanh",
                  "QA-type": 0},
        },
    }
    path = tmp_path / "custom_train_data.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_cli_on_a_release_file_with_ocr(tmp_path, capsys):
    path = _release_file(tmp_path)
    box = [0.1, 0.1, 0.2, 0.2]
    ocr = {"10": [{"text": "phở", "box": box}, {"text": "hà", "box": box}], "11": []}
    ocr_path = tmp_path / "ocr.json"
    ocr_path.write_text(json.dumps(ocr, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "out"
    assert analyze.run(["--input", str(path), "--ocr_file", str(ocr_path), "--out", str(out)]) == 0
    res = json.loads((out / "analysis.json").read_text(encoding="utf-8"))
    assert list(res["splits"]) == ["train"]  # from the file name
    st = res["splits"]["train"]
    assert (st["images"], st["questions"]) == (2, 5)
    assert st["qa_types"] == {"text": 2, "non_text": 3, "unknown": 0}
    # Answer syllables: 6 (quán này tên là phở hà), 6 (một tô phở giá 35,000 đồng), 3, 1, 5.
    assert st["answer_length"]["histogram"] == {"1": 1, "3": 1, "5": 1, "6": 2}
    assert st["answer_length"]["share_2_to_10"] == pytest.approx(4 / 5)
    # sentence: "quán này tên là ..."; word: "đỏ"; phrases: "một tô phở giá ...", "có 3 người", "chiếc ô tô màu xanh".
    assert st["linguistic_level"]["counts"] == {"word": 1, "phrase": 3, "sentence": 1}
    # OCR: answers 1 and 2 contain "phở"; train is the reference split itself, so the new-word fields are None.
    cov = st["ocr_coverage"]
    assert cov["any_word_in_ocr"] == pytest.approx(2 / 5)
    assert cov["images_with_ocr_tokens"] == 1 and cov["ceiling"] is None
    g = res["guideline"]
    assert g["qas_per_image"]["splits"]["train"]["question_ids"] == ["4", "5"]
    assert g["answer_complexity"]["splits"]["train"]["question_ids"] == ["4"]
    assert g["question_type"]["splits"]["train"]["question_ids"] == ["5"]
    assert g["quantities"]["splits"]["train"]["question_ids"] == ["3"]
    assert g["colours"]["splits"]["train"]["question_ids"] == ["5"]
    assert g["prices"]["splits"]["train"]["question_ids"] == ["2"]
    for name in res["figures"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "qas_per_image" in capsys.readouterr().out


def test_ocr_coverage_new_words():
    # Reference split "train" knows {có, màu, đỏ}. Test answers: "biển hiệu màu đỏ" (new: biển, hiệu; both in
    # OCR), "quán tên lan" (new: quán, tên, lan; only lan in OCR), "màu đỏ" (no new word).
    known = {"có", "màu", "đỏ"}
    qas = [qa("1", "q", "biển hiệu màu đỏ", split="test", ocr=("biển hiệu",)),
           qa("2", "q", "quán tên lan", split="test", ocr=("lan",)),
           qa("3", "q", "màu đỏ", split="test", ocr=())]
    cov = stats.ocr_coverage(qas, known, "train")
    assert cov["any_word_in_ocr"] == pytest.approx(2 / 3)
    assert cov["answers_with_new_words"] == 2
    assert cov["all_new_words_in_ocr"] == pytest.approx(1 / 2)
    assert cov["ceiling"] == pytest.approx(2 / 3)


def test_vivqa_csv(tmp_path):
    out = tmp_path / "out"
    rc = analyze.run(["--input", os.path.join(VIVQA, "train.csv"), os.path.join(VIVQA, "test.csv"), "--out",
                      str(out), "--no_figures"])
    assert rc == 0
    res = json.loads((out / "analysis.json").read_text(encoding="utf-8"))
    assert list(res["splits"]) == ["train", "test"]
    assert res["splits"]["train"]["questions"] == 300 and res["splits"]["test"]["questions"] == 100
    # "màu tía" (purple-red, not among the 12) is the answer of 16 train rows and 7 test rows.
    assert res["guideline"]["colours"]["count"] == 23
    assert res["guideline"]["colours"]["reasons"] == {"off_list": 23}


def test_syllables():
    assert syllables("Cửa tiệm này tên gì?") == ["cửa", "tiệm", "này", "tên", "gì"]
    assert syllables("20.000đ") == ["20,000", "đồng"]


# ---------------------------------------------------------------------------------------------------------
# One-line errors


def test_error_empty_split(tmp_path, capsys):
    path = tmp_path / "empty_dev_data.json"
    path.write_text('{"images": {}, "annotations": {}}')
    with pytest.raises(EmptySplitError):
        read_reference_file(path, "dev")
    assert analyze.run(["--input", str(path), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: split 'dev' ({path}) has no questions"]


def test_error_ragged_agreement_file(tmp_path, capsys):
    path = tmp_path / "agree.csv"
    path.write_text("text,text\ntext,non-text,text\n")
    assert analyze.run(["--agreement", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "line 2 has 3 labels but line 1 has 2" in err[0]


def test_error_missing_dataset_is_one_line(tmp_path):
    # The real command line: a dataset that is not built in data_dir, and a missing release file.
    cmd = [sys.executable, "-m", "openvivqa_jax.analyze", "--builder", "synthetic_openvivqa", "--builder_config",
           "tiny", "--data_dir", str(tmp_path / "tfds"), "--out", str(tmp_path / "o")]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=300)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error: dataset synthetic_openvivqa/tiny/") and "is not built in" in lines[0]
    assert "Traceback" not in p.stderr
    assert analyze.run(["--input", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")]) == 2


@pytest.mark.slow
def test_tfds_synthetic_tiny(tmp_path):
    # Builds synthetic_openvivqa/tiny and reads it through the training data source.
    out = tmp_path / "out"
    rc = analyze.run(["--builder", "synthetic_openvivqa", "--builder_config", "tiny", "--data_dir",
                      str(tmp_path / "tfds"), "--prepare", "--out", str(out), "--no_figures"])
    assert rc == 0
    res = json.loads((out / "analysis.json").read_text(encoding="utf-8"))
    import tensorflow_datasets as tfds

    builder = tfds.builder("synthetic_openvivqa/tiny", data_dir=str(tmp_path / "tfds"))
    for split in ("train", "validation", "test"):
        st = res["splits"][split]
        assert st["questions"] == builder.info.splits[split].num_examples
        assert st["qa_types"]["unknown"] == 0
        assert st["images"] == {"train": 40, "validation": 10, "test": 10}[split]
    assert res["vocab_split"] == "train"
    assert res["splits"]["train"]["ocr_coverage"]["ceiling"] is None
    assert res["splits"]["test"]["ocr_coverage"]["ceiling"] is not None
    # The generator follows the guideline's colours, quantities and prices.
    for name in ("colours", "quantities", "prices", "question_type", "answer_complexity"):
        assert res["guideline"][name]["count"] == 0, (name, res["guideline"][name]["examples"])


def test_data_config_from_an_experiment_config():
    # --config reads the experiment's data section; --data_dir and --builder_config override it.
    args = analyze.build_parser().parse_args(["--config", os.path.join(ROOT, "configs", "default.py"), "--data_dir",
                                              "/tmp/x", "--builder_config", "tiny", "--out", "o"])
    data = analyze._data_config(args)
    assert (data.builder, data.builder_config, data.data_dir) == ("synthetic_openvivqa", "tiny", "/tmp/x")
    args = analyze.build_parser().parse_args(["--builder", "vivqa", "--out", "o"])
    data = analyze._data_config(args)
    assert (data.builder, data.builder_config, data.data_dir) == ("vivqa", None, None)
    # A config whose get_config raises (an unknown variant) is the command's input error, one line.
    args = analyze.build_parser().parse_args(["--config", "configs/viquad/reader.py:drqa_cpuu", "--out", "o"])
    with pytest.raises(analyze.AnalysisInputError, match=r"did not load: ValueError: unknown variant 'drqa_cpuu'"):
        analyze._data_config(args)


def test_textvqa_layout_and_named_split(tmp_path):
    # TextVQA / ST-VQA layout: several answers per question, every QA a Text QA; SPLIT=FILE names the split.
    data = {"dataset_name": "textvqa", "data": [
        {"question_id": 1, "image_id": "i1", "question": "what brand?", "answers": ["nokia", "nokia phone", "nokia"]},
        {"question_id": 2, "image_id": "i1", "question": "what number?", "answers": ["7", "seven"]},
    ]}
    path = tmp_path / "x.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "out"
    assert analyze.run(["--input", f"val={path}", "--out", str(out), "--no_figures"]) == 0
    st = json.loads((out / "analysis.json").read_text(encoding="utf-8"))["splits"]["val"]
    assert (st["images"], st["questions"], st["answers"]) == (1, 2, 5)
    assert st["qa_types"] == {"text": 2, "non_text": 0, "unknown": 0}
    assert st["answer_length"]["histogram"] == {"1": 4, "2": 1}  # nokia, nokia phone, nokia, 7, seven
    assert st["linguistic_level"]["counts"] == {"word": 4, "phrase": 1, "sentence": 0}
