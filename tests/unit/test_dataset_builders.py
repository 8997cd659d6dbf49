"""Tests of the ViVQA, ST-VQA, TextVQA and ViQuAD TFDS builders on small files in the published formats."""

from __future__ import annotations

import csv
import json
import os
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from conftest import build_tfds as build
from conftest import read_examples, write_jpeg, write_json
from tfds_builders import readers
from tfds_builders.st_vqa import Builder as StVqaBuilder
from tfds_builders.st_vqa import StVqaConfig
from tfds_builders.textvqa import Builder as TextVqaBuilder
from tfds_builders.textvqa import TextVqaConfig
from tfds_builders.viquad import Builder as ViquadBuilder
from tfds_builders.viquad import ViquadConfig
from tfds_builders.vivqa import Builder as VivqaBuilder
from tfds_builders.vivqa import VivqaConfig

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("OPENVIVQA_SHARED", REPO.parent / "shared"))  # as in tests/conftest.py
VIVQA_SAMPLE = SHARED / "data" / "vivqa_sample"
needs_vivqa_sample = pytest.mark.skipif(not VIVQA_SAMPLE.is_dir(), reason=f"{VIVQA_SAMPLE} not present")

NFD = lambda s: unicodedata.normalize("NFD", s)  # noqa: E731


def read(builder, split) -> dict[str, dict]:
    """{question_id: example} of ``split`` with Python strings (conftest.read_examples)."""
    return read_examples(builder.as_data_source()[split])


# ================================================================================================ ViVQA

VIVQA_NO_OCR = VivqaConfig(name="no_ocr", ocr_engine="none")


def _vivqa_images(manual: Path, csv_paths: list[Path]) -> dict[int, tuple[int, int]]:
    """Writes a stand-in JPEG per img_id: even ids as COCO train2014, odd ids as val2014 (both searched).
    Returns {img_id: (width, height)}; sizes differ per image so the test can check which file was read."""
    sizes = {}
    for p in csv_paths:
        with p.open(encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                img_id = int(row["img_id"])
                sizes[img_id] = (8 + img_id % 13, 8 + img_id % 7)
    for img_id, size in sizes.items():
        if img_id % 2 == 0:
            write_jpeg(manual / "train2014" / f"COCO_train2014_{img_id:012d}.jpg", size)
        else:
            write_jpeg(manual / "val2014" / f"COCO_val2014_{img_id:012d}.jpg", size)
    return sizes


@pytest.fixture(scope="module")
def vivqa_manual(tmp_path_factory):
    if not VIVQA_SAMPLE.is_dir():
        pytest.skip(f"{VIVQA_SAMPLE} not present")
    manual = tmp_path_factory.mktemp("vivqa_manual")
    for name in ("train.csv", "test.csv"):
        shutil.copy(VIVQA_SAMPLE / name, manual / name)
    sizes = _vivqa_images(manual, [manual / "train.csv", manual / "test.csv"])
    return manual, sizes


def _expected_rows(path: Path) -> dict[str, tuple[str, str, str, int]]:
    """Independent reading of a ViVQA CSV: {row index: (img_id, question, answer, type)}. The sample text is
    lowercase NFC without punctuation, so its normalized form is the whitespace-collapsed text."""
    with path.open(encoding="utf-8", newline="") as f:
        return {r[""]: (r["img_id"], " ".join(r["question"].split()), " ".join(r["answer"].split()), int(r["type"]))
                for r in csv.DictReader(f)}


def test_vivqa_sample_round_trip(vivqa_manual, tmp_path):
    manual, sizes = vivqa_manual
    builder = build(VivqaBuilder, manual, tmp_path, VIVQA_NO_OCR)
    assert set(builder.info.splits.keys()) == {"train", "test"}
    for split, n in (("train", 300), ("test", 100)):
        expected = _expected_rows(VIVQA_SAMPLE / f"{split}.csv")
        got = read(builder, split)
        assert len(got) == len(expected) == n
        for qid, (img_id, question, answer, qtype) in expected.items():
            ex = got[qid]
            assert (ex["image_id"], ex["question"], ex["answers"], ex["question_type"]) == (img_id, question, [answer], qtype)
            assert ex["qa_type"] == -1
            w, h = sizes[int(img_id)]
            assert ex["image"].shape == (h, w, 3)
    # Spot checks written out by hand from the first rows of the sample.
    train = read(builder, "train")
    assert (train["0"]["question"], train["0"]["answers"], train["0"]["image_id"]) == (
        "màu của chiếc bình là gì", ["màu xanh lá"], "68857")
    assert builder.skip_counts == {"train": {}, "test": {}}


def _small_vivqa(manual: Path, rows: list[str]) -> Path:
    """Writes train.csv with the given raw lines after the header, and images for ids 1 (train) and 2 (val)."""
    manual.mkdir(parents=True, exist_ok=True)
    write_jpeg(manual / "val2014" / f"COCO_val2014_{1:012d}.jpg", (10, 10))
    write_jpeg(manual / "train2014" / f"COCO_train2014_{2:012d}.jpg", (12, 10))
    path = manual / "train.csv"
    path.write_text(",question,answer,img_id,type\n" + "".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def test_vivqa_normalization(tmp_path):
    _small_vivqa(tmp_path / "m", [
        f"0,{NFD('Màu của Hoa là gì?')},{NFD('màu HOÀ')},1,2",
        '1,con gì,"con\nmèo",2,0',  # quoted answer with a newline
        "2,   bao nhiêu   ,hòa,1,1",
    ])
    builder = build(VivqaBuilder, tmp_path / "m", tmp_path / "d", VIVQA_NO_OCR)
    ex = read(builder, "train")
    assert ex["0"]["question"] == "màu của hoa là gì ?"
    assert ex["0"]["answers"] == ["màu hòa"]  # NFD -> NFC, hoà -> hòa
    assert ex["1"]["answers"] == ["con mèo"]
    assert ex["2"]["question"] == "bao nhiêu" and ex["2"]["answers"] == ["hòa"]
    assert [ex[q]["question_type"] for q in "012"] == [2, 0, 1]


VIVQA_BAD = {
    "too few fields": ("3,màu gì,màu đỏ,1", r"train\.csv: line 3 \(row 3\): expected 5 fields"),
    "bad img_id": ("3,màu gì,màu đỏ,abc,2", r"train\.csv: line 3 \(row 3\): img_id 'abc' is not an integer"),
    "bad type": ("3,màu gì,màu đỏ,1,x", r"train\.csv: line 3 \(row 3\): type 'x' is not an integer"),
    "empty question": ("3, ,màu đỏ,1,2", r"train\.csv: line 3 \(row 3\): empty question"),
    "empty answer": ("3,màu gì,,1,2", r"train\.csv: line 3 \(row 3\): empty answer list"),
    "duplicate row index": ("0,màu gì,màu đỏ,1,2", r"train\.csv: line 3 \(row 0\): question id repeated \(also in "
                            r".*train\.csv\) with the same question and other answers"),
}


@pytest.mark.parametrize("case", sorted(VIVQA_BAD))
def test_vivqa_bad_rows_are_errors(tmp_path, case):
    row, pattern = VIVQA_BAD[case]
    _small_vivqa(tmp_path / "m", ["0,màu gì,màu xanh,1,2", row])
    with pytest.raises(readers.DatasetInputError, match=pattern):
        build(VivqaBuilder, tmp_path / "m", tmp_path / "d", VIVQA_NO_OCR)


def test_vivqa_bad_rows_skipped_and_counted(tmp_path):
    _small_vivqa(tmp_path / "m", ["0,màu gì,màu xanh,1,2"] + [r for r, _ in VIVQA_BAD.values()])
    config = VivqaConfig(name="skip", ocr_engine="none", skip_invalid_records=True)
    builder = build(VivqaBuilder, tmp_path / "m", tmp_path / "d", config)
    assert sorted(read(builder, "train")) == ["0"]
    assert builder.skip_counts["train"] == {"invalid_record": 5, "duplicate_question_id": 1}


def test_vivqa_missing_and_corrupt_images(tmp_path):
    path = _small_vivqa(tmp_path / "m", ["0,màu gì,màu xanh,1,2", "1,con gì,con mèo,3,0", "2,ở đâu,trong nhà,2,3"])
    with pytest.raises(readers.ImageFileError, match=r"train\.csv: line 3 \(row 1\): image COCO_train2014_000000000003\.jpg "
                       r"/ COCO_val2014_000000000003\.jpg \(img_id 3\) not found") as info:
        build(VivqaBuilder, tmp_path / "m", tmp_path / "d", VIVQA_NO_OCR)
    assert str(path) in str(info.value)
    (tmp_path / "m" / "train2014" / f"COCO_train2014_{2:012d}.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    config = VivqaConfig(name="skip_images", ocr_engine="none", skip_missing_images=True)
    builder = build(VivqaBuilder, tmp_path / "m", tmp_path / "d2", config)
    assert sorted(read(builder, "train")) == ["0"]
    assert builder.skip_counts["train"] == {"missing_or_corrupt_image": 2}


def test_vivqa_missing_column_is_an_error(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "train.csv").write_text(",question,img_id\n0,gì,1\n", encoding="utf-8")
    with pytest.raises(readers.DatasetInputError, match=r"train\.csv: header .* lacks columns \['answer'\]"):
        build(VivqaBuilder, tmp_path / "m", tmp_path / "d", VIVQA_NO_OCR)


# ================================================================================================ ST-VQA


def _stvqa(manual: Path, task: int = 1) -> None:
    write_jpeg(manual / "coco-text" / "COCO_train2014_000000000042.jpg", (20, 10))
    write_jpeg(manual / "ic15" / "img_7.jpg", (10, 20))
    write_jpeg(manual / "test_images" / "vizwiz" / "v_1.jpg", (12, 12))
    train = {"dataset_name": "ST-VQA", "data": [
        {"file_path": "coco-text/COCO_train2014_000000000042.jpg", "question": "What brand is the Phone?",
         "answers": ["Nokia", "nokia 3310"], "question_id": 1, "set_name": "train"},
        {"file_path": "ic15/img_7.jpg", "question": NFD("Tên quán là gì?"), "answers": [NFD("Phở Hoà")],
         "question_id": 2, "set_name": "train"},
    ]}
    test = {"dataset_name": "ST-VQA", "data": [
        {"file_path": "vizwiz/v_1.jpg", "question": "what is written?", "question_id": 3,
         "dictionary": ["EXIT", NFD("Hoà"), "stop"] if task == 1 else None},
    ]}
    if task != 1:
        del test["data"][0]["dictionary"]
    write_json(manual / f"train_task_{task}.json", train)
    write_json(manual / f"test_task_{task}.json", test)


def test_stvqa_task1_round_trip(tmp_path):
    _stvqa(tmp_path / "m", task=1)
    builder = build(StVqaBuilder, tmp_path / "m", tmp_path / "d", "task1")
    train, test = read(builder, "train"), read(builder, "test")
    assert train["1"]["question"] == "what brand is the phone ?"
    assert train["1"]["answers"] == ["nokia", "nokia 3310"]
    assert train["2"]["question"] == "tên quán là gì ?" and train["2"]["answers"] == ["phở hòa"]
    assert train["1"]["image_id"] == "coco-text/COCO_train2014_000000000042.jpg"
    assert train["1"]["image"].shape == (10, 20, 3) and train["2"]["image"].shape == (20, 10, 3)
    assert train["1"]["qa_type"] == 1 and train["1"]["dictionary"] == []
    assert test["3"]["answers"] == [] and test["3"]["dictionary"] == ["exit", "hòa", "stop"]
    assert test["3"]["image"].shape == (12, 12, 3)  # found under test_images/


def test_stvqa_task2_global_dictionary(tmp_path):
    _stvqa(tmp_path / "m", task=2)
    (tmp_path / "m" / "global_dictionary.txt").write_text("Nokia\nhoà\n\nhòa\nexit\n", encoding="utf-8")
    builder = build(StVqaBuilder, tmp_path / "m", tmp_path / "d", "task2")
    for split in ("train", "test"):
        for ex in read(builder, split).values():
            assert ex["dictionary"] == ["nokia", "hòa", "exit"]  # normalized, blank dropped, deduplicated


STVQA_BAD = {
    "empty answers": ({"answers": []}, r"train_task_3\.json: question 2: empty answer list"),
    "empty question": ({"question": "  "}, r"train_task_3\.json: question 2: empty question"),
    "missing image": ({"file_path": "ic15/nope.jpg"}, r"train_task_3\.json: question 2: image file 'ic15/nope\.jpg' not found"),
    "no question id": ({"question_id": None}, r"train_task_3\.json: data\[1\]: no 'question_id'"),
}


@pytest.mark.parametrize("case", sorted(STVQA_BAD))
def test_stvqa_bad_input(tmp_path, case):
    change, pattern = STVQA_BAD[case]
    _stvqa(tmp_path / "m", task=3)
    path = tmp_path / "m" / "train_task_3.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["data"][1].update(change)
    write_json(path, data)
    with pytest.raises(readers.DatasetInputError, match=pattern):
        build(StVqaBuilder, tmp_path / "m", tmp_path / "d", "task3")
    skip = StVqaConfig(name="skip", task=3, skip_missing_images=True, skip_invalid_records=True)
    builder = build(StVqaBuilder, tmp_path / "m", tmp_path / "d2", skip)
    assert sorted(read(builder, "train")) == ["1"]
    assert sum(builder.skip_counts["train"].values()) == 1


# =============================================================================================== TextVQA


def _textvqa(manual: Path) -> None:
    write_jpeg(manual / "train_images" / "abc.jpg", (30, 20))
    write_jpeg(manual / "train_images" / "def.jpg", (20, 30))
    write_jpeg(manual / "test_images" / "xyz.jpg", (10, 10))
    answers = ["Coca Cola"] * 6 + ["coca-cola"] * 3 + ["Coke"]
    write_json(manual / "TextVQA_0.5.1_train.json", {"dataset_name": "textvqa", "data": [
        {"question_id": 11, "question": "What Brand is this?", "image_id": "abc", "answers": answers,
         "image_classes": ["Bottle"], "set_name": "train"},
        {"question_id": 12, "question": "what number?", "image_id": "def", "answers": ["12"] * 10},
    ]})
    write_json(manual / "TextVQA_0.5.1_val.json", {"data": [
        {"question_id": 21, "question": "what does it say?", "image_id": "def", "answers": ["stop"] * 10}]})
    write_json(manual / "TextVQA_0.5.1_test.json", {"data": [
        {"question_id": 31, "question": "what time?", "image_id": "xyz"}]})
    write_json(manual / "TextVQA_Rosetta_OCR_v0.2_train.json", {"data": [
        {"image_id": "abc", "ocr_tokens": ["COCA", "Cola"], "ocr_info": [
            {"word": "COCA", "bounding_box": {"top_left_x": 0.1, "top_left_y": 0.2, "width": 0.3, "height": 0.1,
                                              "rotation": 0, "roll": 0, "pitch": 0, "yaw": 0}},
            {"word": "Cola", "bounding_box": {"top_left_x": 0.8, "top_left_y": 0.9, "width": 0.4, "height": 0.2}},
            {"word": " ", "bounding_box": {"top_left_x": 0, "top_left_y": 0, "width": 0.1, "height": 0.1}},
        ]},
    ]})


def test_textvqa_round_trip_with_rosetta(tmp_path):
    _textvqa(tmp_path / "m")
    builder = build(TextVqaBuilder, tmp_path / "m", tmp_path / "d")
    assert set(builder.info.splits.keys()) == {"train", "val", "test"}
    train = read(builder, "train")
    ex = train["11"]
    assert ex["question"] == "what brand is this ?"
    assert ex["answers"] == ["coca cola"] * 6 + ["coca - cola"] * 3 + ["coke"]
    assert ex["image_id"] == "abc" and ex["image"].shape == (20, 30, 3) and ex["qa_type"] == -1
    assert ex["ocr"]["text"] == ["coca", "cola"]
    np.testing.assert_allclose(ex["ocr"]["box"], [[0.1, 0.2, 0.4, 0.3], [0.8, 0.9, 1.0, 1.0]], rtol=1e-6)
    np.testing.assert_allclose(ex["ocr"]["score"], [1.0, 1.0])
    assert train["12"]["ocr"]["text"] == []  # image def has no Rosetta record: counted
    assert builder.ocr_stats == {"dropped_empty_after_normalization": 1, "images_missing_from_rosetta": 1,
                                 "missing_rosetta_file": 2}
    assert read(builder, "val")["21"]["answers"] == ["stop"] * 10
    test = read(builder, "test")["31"]
    assert test["answers"] == [] and test["image"].shape == (10, 10, 3)


def test_textvqa_bad_input(tmp_path):
    _textvqa(tmp_path / "m")
    path = tmp_path / "m" / "TextVQA_0.5.1_train.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["data"][1]["answers"] = []
    data["data"].append({"question_id": 13, "question": "which?", "image_id": "missing", "answers": ["a"]})
    write_json(path, data)
    with pytest.raises(readers.DatasetInputError, match=r"TextVQA_0\.5\.1_train\.json: question 12: empty answer list"):
        build(TextVqaBuilder, tmp_path / "m", tmp_path / "d")
    data["data"][1]["answers"] = ["12"] * 10
    write_json(path, data)
    with pytest.raises(readers.ImageFileError, match=r"question 13: image file missing\.jpg not found"):
        build(TextVqaBuilder, tmp_path / "m", tmp_path / "d2")
    builder = build(TextVqaBuilder, tmp_path / "m", tmp_path / "d3", TextVqaConfig(name="skip", skip_missing_images=True))
    assert sorted(read(builder, "train")) == ["11", "12"]
    assert builder.skip_counts["train"] == {"missing_or_corrupt_image": 1}
    rosetta = tmp_path / "m" / "TextVQA_Rosetta_OCR_v0.2_train.json"
    write_json(rosetta, {"data": [{"image_id": "abc", "ocr_info": [{"word": "x", "bounding_box": {"top_left_x": 0.1}}]}]})
    with pytest.raises(readers.DatasetInputError, match=r"Rosetta_OCR_v0\.2_train\.json: image abc: ocr_info\[0\] needs"):
        build(TextVqaBuilder, tmp_path / "m", tmp_path / "d4")


# ================================================================================================ ViQuAD


def _squad(manual: Path) -> None:
    context = NFD("Hà Nội là thủ đô của Việt Nam.\nThành phố nằm bên sông Hồng. Hoà Bình ở phía tây.")
    write_json(manual / "train_ViQuAD.json", {"version": "1.1", "data": [{"title": "Hà Nội", "paragraphs": [{
        "context": context,
        "qas": [
            {"id": "uit_1", "question": "Thủ đô của Việt Nam là gì?", "answers": [{"text": "Hà Nội", "answer_start": 0}]},
            {"id": "uit_2", "question": NFD("Tỉnh nào ở phía tây?"),
             "answers": [{"text": NFD("Hoà Bình"), "answer_start": 78}, {"text": "Hòa Bình", "answer_start": 78}]},
        ]}]}]})
    write_json(manual / "dev_ViQuAD.json", {"version": "1.1", "data": [{"title": "Sông", "paragraphs": [{
        "context": "Sông Hồng chảy qua Hà Nội.",
        "qas": [{"id": "uit_9", "question": "Sông nào?", "answers": [{"text": "sông\nHồng", "answer_start": 0}]}]}]}]})


def test_viquad_round_trip(tmp_path):
    _squad(tmp_path / "m")
    builder = build(ViquadBuilder, tmp_path / "m", tmp_path / "d")
    assert set(builder.info.splits.keys()) == {"train", "dev"}
    assert "image" not in builder.info.features and "context" in builder.info.features
    train = read(builder, "train")
    assert train["uit_1"]["question"] == "thủ đô của việt nam là gì ?"
    assert train["uit_1"]["answers"] == ["hà nội"] and train["uit_1"]["image_id"] == "Hà Nội"
    assert train["uit_2"]["question"] == "tỉnh nào ở phía tây ?"
    assert train["uit_2"]["answers"] == ["hòa bình", "hòa bình"]
    assert train["uit_1"]["context"] == "hà nội là thủ đô của việt nam . thành phố nằm bên sông hồng . hòa bình ở phía tây ."
    assert train["uit_1"]["qa_type"] == -1 and train["uit_1"]["ocr"]["text"] == []
    assert read(builder, "dev")["uit_9"]["answers"] == ["sông hồng"]


def test_viquad_bad_input(tmp_path):
    _squad(tmp_path / "m")
    path = tmp_path / "m" / "train_ViQuAD.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["data"][0]["paragraphs"][0]["qas"][1]["answers"] = []
    write_json(path, data)
    with pytest.raises(readers.DatasetInputError, match=r"train_ViQuAD\.json: question uit_2: empty answer list"):
        build(ViquadBuilder, tmp_path / "m", tmp_path / "d")
    builder = build(ViquadBuilder, tmp_path / "m", tmp_path / "d2", ViquadConfig(name="skip", skip_invalid_records=True))
    assert sorted(read(builder, "train")) == ["uit_1"]
    assert builder.skip_counts["train"] == {"invalid_record": 1}
    data["data"][0]["paragraphs"][0]["qas"][1] = {"id": "uit_2", "question": "x?", "answers": ["Hòa Bình"]}
    write_json(path, data)
    with pytest.raises(readers.DatasetInputError, match=r"question uit_2: answers must be a list of \{text, answer_start\}"):
        build(ViquadBuilder, tmp_path / "m", tmp_path / "d3")


# =========================================================================================== split files


def test_split_from_filename():
    assert readers.split_from_filename(Path("vlsp2023_train_data.json")) == "train"
    assert readers.split_from_filename(Path("vlsp2023_dev_data.json")) == "dev"
    assert readers.split_from_filename(Path("TextVQA_0.5.1_val.json")) == "dev"
    assert readers.split_from_filename(Path("test_ViQuAD.json")) == "test"
    assert readers.split_from_filename(Path("examples_data.json")) is None
    assert readers.split_from_filename(Path("train_test.json")) is None  # ambiguous
    assert readers.split_from_filename(Path("attestation.json")) is None  # keyword must be a whole token
