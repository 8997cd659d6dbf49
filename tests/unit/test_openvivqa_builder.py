"""Tests of the OpenViVQA TFDS builder: the real sample folder, both JSON forms, OCR sources, feature files,
bad input (`tfds build` from the command line: tests/e2e/test_tfds_cli.py)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import build_tfds, read_examples, write_jpeg, write_json
from openvivqa_jax.data.ocr import engines as ocr_engines
from tfds_builders import readers
from tfds_builders.openvivqa import Builder, OpenVivqaConfig

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("OPENVIVQA_SHARED", REPO.parent / "shared"))  # as in tests/conftest.py
SAMPLE = SHARED / "data" / "openvivqa_examples"

# question_id -> (image_id, question, answer) of examples_data.json, normalized by hand (docs/design.md §4: a space
# before "?"; the text is already lowercase NFC).
SAMPLE_EXPECTED = {
    "0": ("0", "cửa tiệm này tên gì ?", "cửa tiệm này tên mộc"),
    "1": ("1", "cửa tiệm cắt tóc nam tên gì ?", "cửa tiệm cắt tóc bầu"),
    "2": ("2", "quán bia saigon nằm trên con đường nào ?", "đường tạ hiện"),
    "4": ("4", "đây là tỉnh nào ?", "đây là tỉnh vĩnh long"),
    "6": ("6", "sản phẩm này tên gì ?", "sản phẩm này tên bánh cosy quế các vị"),
    "7": ("7", "bạn nữ đang đứng ở con phố nào ?", "phố tạ hiện"),
    "9": ("9", "quán này làm bánh xèo theo kiểu gì ?", "quán này làm bánh xèo theo kiểu nhật bản"),
}

NO_OCR = OpenVivqaConfig(name="no_ocr", ocr_engine="none")

needs_sample = pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"OpenViVQA sample folder {SAMPLE} not present")


def build(manual_dir: Path, data_dir: Path, config=NO_OCR) -> Builder:
    return build_tfds(Builder, manual_dir, data_dir, config)


#: Decodes a data source split into {question_id: example} with Python strings.
read = read_examples
#: This file's JSON is indented (one key a line).
write_json = functools.partial(write_json, indent=1)
RED = (200, 30, 30)


def public_form(qas: dict, images: dict) -> dict:
    return {"images": images, "annotations": qas}


def small_dataset(root: Path, qas=None, images=None, name="train_data.json") -> Path:
    """A public-release-form file with two images (a.jpg 40x30, b.jpg 20x50) and three questions."""
    images = images or {"10": "a.jpg", "11": "b.jpg"}
    qas = qas or {
        "100": {"image_id": 10, "question": "Biển hiệu ghi gì?", "answer": "phở hòa"},
        "101": {"image_id": 10, "question": "màu gì?", "answer": "màu đỏ"},
        "102": {"image_id": 11, "question": "có mấy người?", "answer": "hai người"},
    }
    write_jpeg(root / "images" / "a.jpg", (40, 30), RED)
    write_jpeg(root / "images" / "b.jpg", (20, 50), (10, 200, 10))
    return write_json(root / name, public_form(qas, images))


# --------------------------------------------------------------------------------------- the real sample


@pytest.mark.slow  # tesseract over the 7 full-size sample photos: the slowest test of the fast tier (285 s loaded)
@needs_sample
def test_sample_folder_builds_as_is_with_tesseract(tmp_path):
    start = time.perf_counter()
    builder = build(SAMPLE, tmp_path, config="default")
    elapsed = time.perf_counter() - start
    print(f"openvivqa sample build with tesseract: {elapsed:.1f} s")
    assert set(builder.info.splits.keys()) == {"train"}  # single unnamed json -> train
    examples = read(builder.as_data_source()["train"])
    assert len(examples) == 7
    raw = json.loads((SAMPLE / "examples_data.json").read_text(encoding="utf-8"))
    for qid, (image_id, question, answer) in SAMPLE_EXPECTED.items():
        ex = examples[qid]
        assert (ex["image_id"], ex["question"], ex["answers"]) == (image_id, question, [answer])
        assert ex["qa_type"] == -1
        with Image.open(SAMPLE / "images" / raw["images"][image_id]) as im:
            ref = np.asarray(im.convert("RGB"), dtype=np.int16)
        assert ex["image"].shape == ref.shape
        assert np.abs(ex["image"].astype(np.int16) - ref).mean() < 2.0  # same JPEG bytes, decoder rounding
        o = ex["ocr"]
        assert o["box"].shape == (len(o["text"]), 4) and o["score"].shape == (len(o["text"]),)
        assert np.all((o["box"] >= 0) & (o["box"] <= 1)) and np.all(o["box"][:, :2] <= o["box"][:, 2:])
        assert np.all((o["score"] >= 0.5) & (o["score"] <= 1))
        for t in o["text"]:
            assert t and t == t.lower() and unicodedata.is_normalized("NFC", t) and t == " ".join(t.split())
    assert builder.ocr_stats["images"] == 7
    # The price tag "BÁNH COSY QUẾ CÁC VỊ 132G" of image 6 is the clearest text in the sample.
    assert {"quế", "các", "vị", "132g"} & set(examples["6"]["ocr"]["text"])
    assert builder.skip_counts == {"train": {}}


@needs_sample
def test_sample_split_chosen_with_split_files(tmp_path):
    config = OpenVivqaConfig(name="sample_dev", ocr_engine="none", split_files={"dev": "examples_data.json"})
    builder = build(SAMPLE, tmp_path, config=config)
    assert set(builder.info.splits.keys()) == {"dev"}
    examples = read(builder.as_data_source()["dev"])
    assert {k: (v["image_id"], v["question"], v["answers"][0]) for k, v in examples.items()} == SAMPLE_EXPECTED
    assert all(len(ex["ocr"]["text"]) == 0 for ex in examples.values())


@needs_sample
def test_split_keywords_in_file_names(tmp_path):
    manual = tmp_path / "manual"
    shutil.copytree(SAMPLE / "images", manual / "images")
    data = json.loads((SAMPLE / "examples_data.json").read_text(encoding="utf-8"))
    dev = {"images": data["images"], "annotations": {k: data["annotations"][k] for k in ("0", "1")}}
    train = {"images": data["images"], "annotations": {k: v for k, v in data["annotations"].items() if k not in dev["annotations"]}}
    write_json(manual / "vlsp2023_train_data.json", train)
    write_json(manual / "vlsp2023_dev_data.json", dev)
    builder = build(manual, tmp_path / "data")
    assert set(builder.info.splits.keys()) == {"train", "dev"}
    assert sorted(read(builder.as_data_source()["dev"])) == ["0", "1"]
    assert sorted(read(builder.as_data_source()["train"])) == ["2", "4", "6", "7", "9"]


def test_two_unnamed_files_are_an_error(tmp_path):
    small_dataset(tmp_path / "m", name="a.json")
    small_dataset(tmp_path / "m", name="b.json")
    with pytest.raises(readers.DatasetInputError, match=r"cannot tell the split.*a\.json.*b\.json.*split_files"):
        build(tmp_path / "m", tmp_path / "d")


# ------------------------------------------------------------------------- formats, normalization, OCR


def test_list_form_with_qa_type_answers_and_ocr_file(tmp_path):
    manual = tmp_path / "m"
    write_jpeg(manual / "images" / "x.jpg", (40, 30), RED)
    write_jpeg(manual / "images" / "y.jpg", (30, 40), RED)
    nfd_question = unicodedata.normalize("NFD", "Quán này tên gì?")
    write_json(manual / "old_train.json", {
        "images": [{"id": 1, "filename": "x.jpg"}, {"id": 2, "filename": "y.jpg"}],
        "annotations": [
            {"id": 7, "image_id": 1, "question": nfd_question, "answers": ["Quán Hoà", "quán\nhòa bình"], "QA-type": 1},
            {"id": 8, "image_id": 2, "question": "màu gì?", "answers": ["màu  xanh"], "QA-type": 0},
            {"id": 9, "image_id": 2, "question": "bao nhiêu tiền?", "answers": ["20.000đ"]},
        ],
    })
    write_json(manual / "ocr.json", {"1": [{"text": "QUÁN HOÀ", "box": [0.1, 0.2, 0.5, 0.4], "score": 0.75}]})
    builder = build(manual, tmp_path / "d", config="default")  # default: ocr.json present -> used, no tesseract
    ex = read(builder.as_data_source()["train"])
    assert ex["7"]["question"] == "quán này tên gì ?"
    assert ex["7"]["answers"] == ["quán hòa", "quán hòa bình"]  # hoà == hòa; newline -> space
    assert [ex[q]["qa_type"] for q in ("7", "8", "9")] == [1, 0, -1]
    assert ex["8"]["answers"] == ["màu xanh"] and ex["9"]["answers"] == ["20,000 đồng"]
    assert ex["7"]["ocr"]["text"] == ["quán", "hòa"]  # split into copyable words, width shared by characters
    x = 0.1 + 0.4 * 4 / 7  # "quán" 4 + "hòa" 3 characters over x 0.1..0.5
    np.testing.assert_allclose(ex["7"]["ocr"]["box"], [[0.1, 0.2, x, 0.4], [x, 0.2, 0.5, 0.4]], atol=1e-6)
    np.testing.assert_allclose(ex["7"]["ocr"]["score"], [0.75, 0.75])
    assert ex["8"]["ocr"]["text"] == []  # image 2 not in ocr.json: no tokens, counted
    assert builder.ocr_stats["images_missing_from_ocr_file"] == 1


def test_ocr_engine_runs_once_per_image(tmp_path, monkeypatch):
    calls = []

    def fake(image, *args, **kwargs):
        calls.append(image.size)
        return [{"text": "phở hòa", "box": (0.0, 0.0, 0.5, 0.5), "score": 0.9}]

    monkeypatch.setattr(ocr_engines, "run_ocr_passes", fake)  # the `tesseract` engine, in this process (1 worker)
    small_dataset(tmp_path / "m")
    for name, size in (("a.jpg", (40, 30)), ("b.jpg", (20, 50))):  # not one colour: such images skip OCR
        pixels = np.zeros((size[1], size[0], 3), np.uint8)
        pixels[:, : size[0] // 2] = 255
        Image.fromarray(pixels).save(tmp_path / "m" / "images" / name, format="JPEG")
    config = OpenVivqaConfig(name="tess", ocr_engine="tesseract", num_workers=1)
    builder = build(tmp_path / "m", tmp_path / "d", config=config)
    assert sorted(calls) == [(20, 50), (40, 30)]  # 3 questions, 2 images
    ex = read(builder.as_data_source()["train"])
    assert all(e["ocr"]["text"] == ["phở", "hòa"] for e in ex.values())  # engine tokens split into words


def test_test_split_may_lack_answers(tmp_path):
    manual = tmp_path / "m"
    small_dataset(manual)
    write_json(manual / "vlsp2023_test_data.json", public_form(
        {"200": {"image_id": 10, "question": "đây là đâu?"}, "201": {"image_id": 11, "question": "ai?", "answer": ""}},
        {"10": "a.jpg", "11": "b.jpg"}))
    builder = build(manual, tmp_path / "d")
    ex = read(builder.as_data_source()["test"])
    assert ex["200"]["answers"] == [] and ex["201"]["answers"] == []
    assert len(read(builder.as_data_source()["train"])) == 3


# ------------------------------------------------------------------------------------------ bad input

BAD_CASES = {
    "missing image": (lambda m: (m / "images" / "b.jpg").unlink(), r"question 102.*image file 'b\.jpg'.*not found"),
    "corrupt jpeg": (lambda m: (m / "images" / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0garbage"),
                     r"question 102: image .*b\.jpg: (not a recognised image|cannot)"),
    "truncated jpeg": (lambda m: (m / "images" / "b.jpg").write_bytes((m / "images" / "b.jpg").read_bytes()[:300]),
                       r"question 102: image .*b\.jpg: cannot (open|decode)"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_image_is_an_error_naming_question_and_file(tmp_path, case):
    mutate, pattern = BAD_CASES[case]
    path = small_dataset(tmp_path / "m")
    mutate(tmp_path / "m")
    with pytest.raises(readers.ImageFileError, match=pattern) as info:
        build(tmp_path / "m", tmp_path / "d")
    assert str(path) in str(info.value)


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_image_skipped_and_counted(tmp_path, case):
    mutate, _ = BAD_CASES[case]
    small_dataset(tmp_path / "m")
    mutate(tmp_path / "m")
    config = OpenVivqaConfig(name="skip_images", ocr_engine="none", skip_missing_images=True)
    builder = build(tmp_path / "m", tmp_path / "d", config=config)
    assert sorted(read(builder.as_data_source()["train"])) == ["100", "101"]
    assert builder.skip_counts["train"] == {"missing_or_corrupt_image": 1}


BAD_RECORDS = {
    "empty question": ({"image_id": 10, "question": " \n ", "answer": "x"}, r"question 101: empty question"),
    "missing question": ({"image_id": 10, "answer": "x"}, r"question 101: no question"),
    "empty answer": ({"image_id": 10, "question": "gì?", "answer": "  "}, r"question 101: empty answer list"),
    "empty answer list": ({"image_id": 10, "question": "gì?", "answers": []}, r"question 101: empty answer list"),
    "unknown image": ({"image_id": 99, "question": "gì?", "answer": "x"}, r"question 101: image_id '99' is not listed"),
    "bad qa type": ({"image_id": 10, "question": "gì?", "answer": "x", "QA-type": 3}, r"question 101: QA-type 3"),
    "not an object": ("gì?", r"question 101: expected an object"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_bad_record_is_an_error_naming_question_and_file(tmp_path, case):
    record, pattern = BAD_RECORDS[case]
    qas = {"100": {"image_id": 10, "question": "gì?", "answer": "a"}, "101": record}
    path = small_dataset(tmp_path / "m", qas=qas)
    with pytest.raises(readers.DatasetInputError, match=pattern) as info:
        build(tmp_path / "m", tmp_path / "d")
    assert str(path) in str(info.value)


def test_bad_records_skipped_and_counted(tmp_path):
    qas = {"100": {"image_id": 10, "question": "gì?", "answer": "a"}}
    qas.update({str(200 + i): rec for i, (rec, _) in enumerate(BAD_RECORDS.values())})
    small_dataset(tmp_path / "m", qas=qas)
    config = OpenVivqaConfig(name="skip_records", ocr_engine="none", skip_invalid_records=True)
    builder = build(tmp_path / "m", tmp_path / "d", config=config)
    assert sorted(read(builder.as_data_source()["train"])) == ["100"]
    assert builder.skip_counts["train"] == {"invalid_record": len(BAD_RECORDS)}


def test_invalid_json_names_line(tmp_path):
    small_dataset(tmp_path / "m")
    (tmp_path / "m" / "train_data.json").write_text('{"images": {"1": "a.jpg"},\n "annotations": {,}}', encoding="utf-8")
    with pytest.raises(readers.DatasetInputError, match=r"train_data\.json: invalid JSON at line 2"):
        build(tmp_path / "m", tmp_path / "d")


# ------------------------------------------------------------------------------------------ features

D = 8
FEATURES = OpenVivqaConfig(name="features_d8", features_dir="features", region_feature_dim=D, ocr_engine="features")


def _feature_files(manual: Path) -> dict[str, dict]:
    rng = np.random.default_rng(0)
    files = {
        "a": {  # a.jpg is 40x30: pixel boxes
            "region_features": rng.normal(size=(3, D)).astype(np.float32),
            "region_boxes": np.array([[0, 0, 20, 15], [10, 5, 40, 30], [4, 3, 8, 6]], np.float32),
            "texts": [unicodedata.normalize("NFD", "Phở Hoà"), "20.000đ", " "],
            "boxes": np.array([[4, 3, 20, 9], [20, 15, 40, 30], [0, 0, 1, 1]], np.float32),
            "scores": np.array([0.9, 0.8, 0.1], np.float32),
        },
        "b": {  # normalized boxes, quadrilateral scene-text box, no scores
            "region_features": rng.normal(size=(2, D)).astype(np.float32),
            "region_boxes": np.array([[0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 1.0, 1.0]], np.float32),
            "texts": ["BÚN"],
            "boxes": np.array([[[0.1, 0.1], [0.4, 0.12], [0.41, 0.3], [0.1, 0.28]]], np.float32),
        },
    }
    (manual / "features").mkdir(parents=True, exist_ok=True)
    for stem, d in files.items():
        np.save(manual / "features" / f"{stem}.npy", d, allow_pickle=True)
    return files


def test_features_config_reads_npy_dicts(tmp_path):
    manual = tmp_path / "m"
    small_dataset(manual)
    files = _feature_files(manual)
    builder = build(manual, tmp_path / "d", config=FEATURES)
    ex = read(builder.as_data_source()["train"])
    a, b = ex["100"], ex["102"]
    assert a["objects"]["features"].dtype == np.float16 and a["objects"]["features"].shape == (3, D)
    np.testing.assert_array_equal(a["objects"]["features"], files["a"]["region_features"].astype(np.float16))
    np.testing.assert_allclose(a["objects"]["boxes"], [[0, 0, 0.5, 0.5], [0.25, 1 / 6, 1, 1], [0.1, 0.1, 0.2, 0.2]], rtol=1e-6)
    # The blank text is dropped (counted); each text is split into copyable words, its width shared by
    # characters: "phở hòa" (3 + 3) over x 0.1..0.5, "20,000 đồng" (6 + 4) over 0.5..1.
    assert a["ocr"]["text"] == ["phở", "hòa", "20,000", "đồng"]
    np.testing.assert_allclose(a["ocr"]["box"], [[0.1, 0.1, 0.3, 0.3], [0.3, 0.1, 0.5, 0.3], [0.5, 0.5, 0.8, 1],
                                                 [0.8, 0.5, 1, 1]], rtol=1e-6)
    np.testing.assert_allclose(a["ocr"]["score"], [0.9, 0.9, 0.8, 0.8])
    np.testing.assert_allclose(b["objects"]["boxes"], files["b"]["region_boxes"])
    assert b["ocr"]["text"] == ["bún"]
    np.testing.assert_allclose(b["ocr"]["box"], [[0.1, 0.1, 0.41, 0.3]], rtol=1e-6)
    np.testing.assert_allclose(b["ocr"]["score"], [1.0])
    # once per question on image a: 1 blank text dropped, 2 texts split into words
    assert builder.ocr_stats == {"dropped_empty_after_normalization": 2, "split_tokens": 4}


def test_features_errors(tmp_path):
    manual = tmp_path / "m"
    small_dataset(manual)
    _feature_files(manual)
    (manual / "features" / "b.npy").unlink()
    with pytest.raises(readers.ImageFileError, match=r"question 102: no feature file b\.npy or 11\.npy"):
        build(manual, tmp_path / "d", config=FEATURES)
    skip = OpenVivqaConfig(name="features_d8_skip", features_dir="features", region_feature_dim=D,
                           ocr_engine="features", skip_missing_images=True)
    builder = build(manual, tmp_path / "d2", config=skip)
    assert sorted(read(builder.as_data_source()["train"])) == ["100", "101"]
    assert builder.skip_counts["train"] == {"missing_or_corrupt_image": 1}
    np.save(manual / "features" / "b.npy", {"region_features": np.zeros((2, D + 1)), "region_boxes": np.zeros((2, 4)),
                                           "texts": [], "boxes": np.zeros((0, 4))}, allow_pickle=True)
    with pytest.raises(readers.DatasetInputError, match=r"question 102 \(feature file .*b\.npy\).*shape \(2, 9\)"):
        build(manual, tmp_path / "d3", config=FEATURES)


def test_features_config_without_folder_is_a_clear_error(tmp_path):
    small_dataset(tmp_path / "m")
    with pytest.raises(readers.DatasetInputError, match=r"needs the per-image \.npy feature folder.*--config default"):
        build(tmp_path / "m", tmp_path / "d", config="features")


def test_split_from_filename_needs_one_whole_keyword():
    assert readers.split_from_filename(Path("train_test.json")) is None  # ambiguous
    assert readers.split_from_filename(Path("attestation.json")) is None  # keyword must be a whole token
    assert readers.split_from_filename(Path("dev_data.json")) == "dev"
