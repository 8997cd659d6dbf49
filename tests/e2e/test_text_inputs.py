"""Text inputs on every path that reads them: a UTF-8 byte-order mark is accepted (JSON, CSV, OCR files), repeated
JSON keys are reported (one reader, :mod:`openvivqa_jax.jsonio`), and ``predict --questions --skip_bad`` skips
bad questions with their reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from conftest import ROOT, subprocess_env
from openvivqa_jax import evaluate, jsonio
from openvivqa_jax.data import ocr as ocr_lib
from openvivqa_jax.evaluation import formats, questions
from tfds_builders import readers

from test_openvivqa_builder import build, read, small_dataset

BOM = "\ufeff"


def _bom(path: Path, obj) -> Path:
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    return path


# ------------------------------------------------------------------------------------------- the one reader
def test_jsonio_bom_errors_and_repeats(tmp_path):
    p = _bom(tmp_path / "a.json", '{"1": "x",\n "2": "y",\n "1": "z"}')
    obj = jsonio.read_json(p)
    assert obj == {"1": "x", "2": "y"} and jsonio.duplicate_keys(obj) == ["1"]  # the first value is kept
    with pytest.raises(jsonio.JsonFileError) as e:
        jsonio.read_json(p, what="questions file", repeated_keys="error")
    assert str(e.value) == (f"questions file {p}: key '1' appears twice in one JSON object (again at line 3): a "
                            "duplicated question or image id; JSON readers keep only one of them, so fix the file")
    bad = _bom(tmp_path / "b.json", '{"a": 1,\n  "b": }')
    with pytest.raises(jsonio.JsonFileError, match=r"b\.json: invalid JSON at line 2 column 8: Expecting value$"):
        jsonio.read_json(bad)
    (tmp_path / "c.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(jsonio.JsonFileError, match=r"c\.json: not UTF-8 text \(byte 7"):
        jsonio.read_json(tmp_path / "c.json")
    with pytest.raises(jsonio.JsonFileError, match=r"nope\.json: cannot read: no such file"):
        jsonio.read_json(tmp_path / "nope.json")


def test_no_json_load_left_in_readers():
    """Every reader of a user's JSON file goes through jsonio (json.load is not called elsewhere)."""
    offenders = []
    for path in [*Path(ROOT, "openvivqa_jax").rglob("*.py"), *Path(ROOT, "tfds_builders").rglob("*.py")]:
        if path.name == "jsonio.py":
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            if "json.load(" in code and "``json.load" not in code:
                offenders.append(f"{path.relative_to(ROOT)}:{i}")
    assert offenders == []


# ------------------------------------------------------------------------------------------------ builders
def test_builder_reads_bom_annotation_and_ocr_files(tmp_path):
    from tfds_builders.openvivqa import OpenVivqaConfig

    ann = small_dataset(tmp_path / "m")
    _bom(ann, ann.read_text(encoding="utf-8"))
    _bom(tmp_path / "m" / "ocr.json", {"10": [{"text": "Phở Hòa", "box": [0.1, 0.1, 0.5, 0.3], "score": 0.9}]})
    b = build(tmp_path / "m", tmp_path / "d", config=OpenVivqaConfig(name="file_ocr", ocr_engine="file"))
    ex = read(b.as_data_source()["train"])
    assert ex["100"]["answers"] == ["phở hòa"] and ex["100"]["ocr"]["text"] == ["phở", "hòa"]


def test_vivqa_builder_reads_a_bom_csv(tmp_path):
    import tensorflow_datasets as tfds

    import test_dataset_configs as files
    from tfds_builders import vivqa

    m = files.make_vivqa(tmp_path / "m", n_train=4)
    for name in ("train.csv", "test.csv"):
        _bom(m / name, (m / name).read_text(encoding="utf-8"))
    b = vivqa.Builder(config=vivqa.VivqaConfig(name="none", ocr_engine="none", num_workers=1),
                      data_dir=str(tmp_path / "d"), file_format="array_record")
    b.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(m)))
    assert b.info.splits["train"].num_examples == 4 and b.info.splits["test"].num_examples == 4


def test_builder_ocr_file_with_a_repeated_image_id_is_named(tmp_path):
    from tfds_builders.openvivqa import OpenVivqaConfig

    small_dataset(tmp_path / "m")
    (tmp_path / "m" / "ocr.json").write_text('{"10": [],\n"11": [],\n"10": []}', encoding="utf-8")
    with pytest.raises(ocr_lib.OcrFileError, match=r"ocr\.json: key '10' appears twice .*line 3"):
        build(tmp_path / "m", tmp_path / "d", config=OpenVivqaConfig(name="file_ocr2", ocr_engine="file"))


# ----------------------------------------------------------------------------------------------- evaluate
def test_evaluate_reads_bom_files_and_names_repeats(tmp_path, capsys):
    refs = _bom(tmp_path / "r.json", {"1": ["xe đạp"], "2": ["màu đỏ"]})
    preds = _bom(tmp_path / "p.json", {"1": "xe đạp", "2": "màu đỏ"})
    assert evaluate.run(["--predictions", str(preds), "--references", str(refs), "--metrics", "EM"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["EM"] == 1.0
    _bom(preds, '{"1": "xe đạp",\n"1": "sai", "2": "màu đỏ"}')
    assert evaluate.run(["--predictions", str(preds), "--references", str(refs), "--metrics", "EM"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "key '1' appears twice" in err[0] and "line 2" in err[0]
    csv_refs = _bom(tmp_path / "r.csv", ",question,answer,img_id,type\n0,màu gì,màu đỏ,5,2\n")
    _bom(preds, {"0": "màu đỏ"})
    assert evaluate.run(["--predictions", str(preds), "--references", str(csv_refs), "--metrics", "EM"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["EM"] == 1.0


# ------------------------------------------------------------------------------------------------ predict
def _questions(tmp_path: Path, text: str) -> Path:
    for name, colour in (("a.png", (200, 30, 30)), ("c.png", (30, 30, 200))):
        Image.new("RGB", (64, 48), colour).save(tmp_path / name)
    return _bom(tmp_path / "questions.json", text)


QUESTIONS = ('{"images": {"1": "a.png", "3": "c.png", "1": "c.png"},\n'
             ' "annotations": {"10": {"image_id": 1, "question": "cửa hàng này tên gì ?"},\n'
             '                 "40": {"image_id": 3, "question": "   "},\n'
             '                 "50": {"image_id": 9, "question": "màu gì ?"},\n'
             '                 "30": {"image_id": 3, "question": "có mấy chiếc xe máy ?"},\n'
             '                 "10": {"image_id": 3, "question": "lặp lại ?"}}}')


def test_read_questions_file_bom_repeats_and_skips(tmp_path):
    q = _questions(tmp_path, QUESTIONS)
    with pytest.raises(formats.InputError) as e:
        questions.read_questions_file(str(q), str(tmp_path))
    assert "\n" not in str(e.value) and "image id '1' repeated as a key of 'images'" in str(e.value)
    assert "--skip_bad" in str(e.value)
    skipped: dict[str, str] = {}
    out = questions.read_questions_file(str(q), str(tmp_path), skipped)
    assert [(r["question_id"], Path(r["image_path"]).name, r["question"]) for r in out] == [
        ("10", "a.png", "cửa hàng này tên gì ?"), ("30", "c.png", "có mấy chiếc xe máy ?")]
    assert skipped == {
        "image 1 (repeat 2)": "image id '1' repeated as a key of 'images' (a repeated JSON key; the first entry is "
                              "kept)",
        "10 (repeat 2)": "question '10' repeated as a key of 'annotations' (a repeated JSON key; the first entry "
                         "is kept)",
        "40": "question '40': the question is empty",
        "50": "question '50' refers to image '9', which is not in 'images'"}


def test_read_ocr_table_accepts_a_bom_and_names_repeats(tmp_path):
    p = _bom(tmp_path / "ocr.json", {"a.png": [{"text": "COFFEE", "box": [0.1, 0.1, 0.4, 0.2], "score": 0.8}]})
    assert ocr_lib.read_ocr_table(str(p))["a.png"][0]["text"] == "coffee"
    plain = _bom(tmp_path / "one.json", [{"text": "Phở", "box": [0, 0, 1, 1]}])
    assert [t["text"] for t in ocr_lib.read_ocr_table(str(plain))] == ["phở"]
    _bom(p, '{"a.png": [],\n"a.png": []}')
    with pytest.raises(ocr_lib.OcrFileError, match=r"key 'a\.png' appears twice .*line 2"):
        ocr_lib.read_ocr_table(str(p))


def _predict(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "openvivqa_jax.predict", *map(str, args)], cwd=ROOT,
                          env=subprocess_env(), capture_output=True, text=True, timeout=timeout)


def _fake_workdir(tmp_path: Path) -> Path:
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "config.json").write_text('{"model": {"name": "mlpag", "vision": {"kind": "cnn"}}}')
    (wd / "spm.model").write_bytes(b"x")
    return wd


def test_predict_cli_repeated_key_one_line_and_skip_bad_without_usable_question(tmp_path):
    """Without --skip_bad the repeated image id stops the batch in one line (exit 2); with it, a file whose only
    questions are bad ends in one line counting them (both before any model is loaded)."""
    q = _questions(tmp_path, QUESTIONS)
    res = _predict("--workdir", _fake_workdir(tmp_path), "--questions", q)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "image id '1' repeated" in lines[0], res.stderr[-2000:]
    _bom(q, '{"images": {"1": "a.png"}, "annotations": {"40": {"image_id": 1, "question": ""}}}')
    res = _predict("--workdir", tmp_path / "wd", "--questions", q, "--skip_bad")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert "no question (1 skipped, e.g. question '40': the question is empty)" in lines[0]


@pytest.mark.slow
def test_predict_skip_bad_answers_the_good_questions(tmp_path, trained):
    """A BOM questions file with a repeated image id, a repeated question id, an empty question and an unknown
    image, plus a BOM OCR file: --skip_bad answers questions 10 and 30 and lists the four others with reasons."""
    q = _questions(tmp_path, QUESTIONS)
    ocr = _bom(tmp_path / "ocr.json", {"1": [{"text": "Phở", "box": [0.1, 0.1, 0.4, 0.2]}], "3": []})
    sub = tmp_path / "sub.json"
    res = _predict("--workdir", trained, "--questions", q, "--output", sub, "--skip_bad", "--ocr", ocr,
                   timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(json.loads(sub.read_text(encoding="utf-8"))) == ["10", "30"]
    skipped = json.loads((tmp_path / "sub.skipped.json").read_text(encoding="utf-8"))
    assert sorted(skipped) == ["10 (repeat 2)", "40", "50", "image 1 (repeat 2)"]
    assert "skipped 3 of 5 questions whose question or image could not be used and 1 image entry, by reason" in \
        res.stderr


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from conftest import build_once
    from test_predict import _train_predict_model

    return build_once(tmp_path_factory, "predict_trained", _train_predict_model) / "run"


def test_readers_read_json_is_jsonio():
    assert readers.JsonObject is jsonio.JsonObject


def test_analysis_reads_bom_files_and_names_repeats(tmp_path):
    from openvivqa_jax.analysis.records import AnalysisInputError, read_reference_file

    p = _bom(tmp_path / "dev.json", {"images": {"5": "a.jpg"},
                                     "annotations": {"1": {"image_id": 5, "question": "màu gì?", "answer": "đỏ"}}})
    [qa] = read_reference_file(p, "dev")
    assert (qa.question_id, qa.image_id, qa.answers) == ("1", "5", ("đỏ",))
    _bom(p, '{"images": {"5": "a.jpg"}, "annotations": {"1": {"image_id": 5, "question": "a", "answer": "b"},\n'
            '"1": {"image_id": 5, "question": "c", "answer": "d"}}}')
    with pytest.raises(AnalysisInputError, match=r"key '1' appears twice .*line 2"):
        read_reference_file(p, "dev")
