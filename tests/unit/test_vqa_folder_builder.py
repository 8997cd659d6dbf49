"""The folder builder (tfds_builders/vqa_folder) on photos and annotation files this test writes: PNG and JPEG of
different sizes in subfolders, CSV and JSON rows in Vietnamese and English; every kind of bad input is one line
naming the file and the row, or a counted skip; the held-out splits; the config that trains on it."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import build_tfds as build
from conftest import load_config, read_examples, write_json
from tfds_builders import readers
from tfds_builders.vqa_folder import Builder, VqaFolderConfig
from tfds_builders.vqa_folder import annotation_rows, vqa_folder_dataset_builder as folder

NO_OCR = VqaFolderConfig(name="no_ocr", ocr_engine="none")

#: (path under the manual folder, (width, height), colour) of the photos the tests write.
PHOTOS = [
    ("photos/red.png", (64, 48), (200, 20, 20)),
    ("photos/kitchen/cup.jpg", (40, 90), (20, 200, 20)),
    ("blue.jpeg", (120, 80), (20, 20, 200)),
    ("images/cat.png", (50, 50), (128, 128, 128)),  # named "cat.png" in the CSV: found in images/
    ("photos/phở.jpg", (33, 21), (250, 200, 10)),
]
TRAIN_CSV = """image,question,answer,language
photos/red.png,What colour is the square?,red,
photos/kitchen/cup.jpg,Cái cốc màu gì?,màu xanh lá|xanh,
blue.jpeg,"Which colour, blue or red?",Blue,en
cat.png,Con mèo màu gì?,màu xám,vi
photos/phở.jpg,Đây là món gì?,phở,
"""
VALIDATION = [
    {"image": "photos/red.png", "question": "Is it red?", "answers": ["yes", "yes it is"], "question_id": "v1"},
    {"image": "blue.jpeg", "question": "Màu gì?", "answer": "xanh dương", "question_id": 7, "qa_type": 0},
]


def make_folder(m: Path, train: str = TRAIN_CSV, validation=None, test=None, nfd_names: bool = True) -> Path:
    """The photos of :data:`PHOTOS` (the Vietnamese file name decomposed on disk, as macOS writes it, while the CSV
    has it composed), ``train.csv`` with a byte-order mark (Excel's "CSV UTF-8"), and ``validation.json`` /
    ``test.json`` when given."""
    for rel, size, colour in PHOTOS:
        p = m / (unicodedata.normalize("NFD", rel) if nfd_names else rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, colour).save(p, format="PNG" if rel.endswith(".png") else "JPEG", quality=95)
    (m / "train.csv").write_text(train, encoding="utf-8-sig")
    if validation is not None:
        write_json(m / "validation.json", validation)
    if test is not None:
        write_json(m / "test.json", test)
    return m


def read(builder, split: str) -> dict[str, dict]:
    examples = read_examples(builder.as_data_source(split=split))
    for ex in examples.values():
        ex["language"] = ex["language"].decode() if isinstance(ex["language"], bytes) else ex["language"]
    return examples


def test_builds_png_and_jpeg_in_subfolders_with_csv_and_json_rows(tmp_path):
    m = make_folder(tmp_path / "m", validation=VALIDATION, test=[
        {"image": "photos/kitchen/cup.jpg", "question": "What is it?", "answer": "a cup", "language": "English"}])
    builder = build(Builder, m, tmp_path / "d", NO_OCR)
    assert set(builder.info.splits) == {"train", "validation", "test"} and builder.held_out == {}
    train = read(builder, "train")
    assert sorted(train) == [f"train.csv:{n}" for n in range(2, 7)]  # ids: the file name and the line
    by_image = {ex["image_id"]: ex for ex in train.values()}
    assert sorted(by_image) == sorted(["photos/red.png", "photos/kitchen/cup.jpg", "blue.jpeg", "cat.png",
                                       "photos/phở.jpg"])
    for rel, (w, h), colour in PHOTOS:
        ex = by_image[rel[len("images/"):] if rel.startswith("images/") else rel]
        assert ex["image"].shape == (h, w, 3)
        assert np.abs(ex["image"].astype(int) - colour).max() <= 3  # JPEG quality 95 of one colour
    cup = by_image["photos/kitchen/cup.jpg"]
    assert cup["question"] == "cái cốc màu gì ?" and cup["answers"] == ["màu xanh lá", "xanh"]
    assert [by_image[i]["language"] for i in ("photos/red.png", "photos/kitchen/cup.jpg", "blue.jpeg", "cat.png",
                                              "photos/phở.jpg")] == ["en", "vi", "en", "vi", "vi"]
    assert by_image["blue.jpeg"]["question"] == "which colour , blue or red ?"
    assert by_image["blue.jpeg"]["answers"] == ["blue"]
    assert all(ex["qa_type"] == -1 and ex["ocr"]["text"] == [] for ex in train.values())
    val = read(builder, "validation")
    assert sorted(val) == ["7", "v1"]
    assert val["v1"]["answers"] == ["yes", "yes it is"] and val["v1"]["language"] == "en"
    assert val["7"]["qa_type"] == 0 and val["7"]["language"] == "vi" and val["7"]["answers"] == ["xanh dương"]
    test = read(builder, "test")
    assert list(test) == ["test.json:0"] and test["test.json:0"]["language"] == "en"
    assert builder.language_counts["train"] == {"en": 2, "vi": 3}
    assert all(not c for c in builder.skip_counts.values())


def test_missing_splits_are_held_out_by_image_deterministically(tmp_path):
    rows = "".join(f"p{i}.png,question {i} a?,answer {i}\np{i}.png,question {i} b?,other {i}\n" for i in range(20))
    m = tmp_path / "m"
    m.mkdir()
    for i in range(20):
        Image.new("RGB", (16, 16), (i * 10, 0, 0)).save(m / f"p{i}.png")
    (m / "questions.csv").write_text("image,question,answer\n" + rows, encoding="utf-8")  # names no split: train
    builder = build(Builder, m, tmp_path / "d", NO_OCR)
    images = {s: {ex["image_id"] for ex in read(builder, s).values()} for s in ("train", "validation", "test")}
    assert builder.held_out == {"validation": (2, 4), "test": (2, 4)}  # 10% of 20 images, with both questions
    assert [len(images[s]) for s in ("train", "validation", "test")] == [16, 2, 2]
    assert not (images["train"] & images["validation"]) and not (images["train"] & images["test"])
    again = build(Builder, m, tmp_path / "d2", NO_OCR)
    assert {s: {ex["image_id"] for ex in read(again, s).values()} for s in images} == images
    order = sorted((f"p{i}.png" for i in range(20)), key=folder._image_order)
    assert images["validation"] == set(order[:2]) and images["test"] == set(order[2:4])


def test_too_few_train_images_to_hold_out_is_an_error(tmp_path):
    m = make_folder(tmp_path / "m", train="image,question,answer\nblue.jpeg,what?,blue\ncat.png,what?,cat\n")
    with pytest.raises(readers.DatasetInputError, match=r"train\.csv: the train split has 2 image\(s\) \(2 "
                       r"questions\), too few to hold out validation and test"):
        build(Builder, m, tmp_path / "d", NO_OCR)
    no_hold = VqaFolderConfig(name="no_hold", ocr_engine="none", held_out_fraction=0.0)
    assert set(build(Builder, m, tmp_path / "d2", no_hold).info.splits) == {"train"}


def test_excel_semicolon_csv_with_bom_and_extra_columns(tmp_path):
    train = "\ufeffImage;Question;Answer;Question_ID;Note\r\n" + "".join(  # Excel: CRLF line ends
        f"{p};Màu gì {i}?;màu {i};q{i};ghi chú\r\n" for i, p in enumerate(["blue.jpeg", "cat.png", "photos/red.png"]))
    m = make_folder(tmp_path / "m", train=train, validation=VALIDATION, test=VALIDATION[:1])
    (m / "train.csv").write_bytes(train.encode("utf-8"))  # the BOM written by hand
    builder = build(Builder, m, tmp_path / "d", NO_OCR)
    assert sorted(read(builder, "train")) == ["q0", "q1", "q2"]
    assert dict(builder.unknown_fields["train"][str(m / "train.csv")]) == {"note": 3}  # each of its 3 rows


def _bad_csv(row: str) -> str:
    return "image,question,answer,question_id\nblue.jpeg,what colour?,blue,\n" + row + "\n"


#: name -> (train.csv, error class, the message after "<manual>/train.csv: ").
BAD_CSV = {
    "missing image": (_bad_csv("nope.jpg,what?,x,"), readers.ImageFileError,
                      r"line 3: image file 'nope\.jpg' not found in .*m \(nor in its images/ folder\)$"),
    "case differs": (_bad_csv("Blue.JPEG,what?,x,"), readers.ImageFileError,
                     r"line 3: image file 'Blue\.JPEG' not found .*; did you mean 'blue\.jpeg'\? \(file names are "
                     r"case-sensitive\)"),
    "bare file name": (_bad_csv("cup.jpg,what?,x,"), readers.ImageFileError,
                       r"line 3: image file 'cup\.jpg' not found .*; a file of that name is at 'photos/kitchen/cup\.jpg': "
                       r"write the path from the folder, e\.g\. 'photos/kitchen/cup\.jpg'$"),
    "empty question": (_bad_csv("cat.png,  ,x,q9"), readers.DatasetInputError, r"line 3 \(question q9\): empty question"),
    "empty answer": (_bad_csv("cat.png,what?, ,"), readers.DatasetInputError, r"line 3: empty answer$"),
    "empty answer among several": (_bad_csv("cat.png,what?,cat| ,"), readers.DatasetInputError,
                                   r"line 3: answer 1 is empty"),
    "missing columns": (_bad_csv("cat.png,what?"), readers.DatasetInputError,
                        r"line 3: expected 4 fields \(image,question,answer,question_id\), got 2"),
    "unquoted comma": (_bad_csv("cat.png,what, or who?,cat,"), readers.DatasetInputError,
                       r"line 3: expected 4 fields .* got 5: .*; a field holding ',' must be in double quotes"),
    "no image name": (_bad_csv(",what?,cat,"), readers.DatasetInputError, r"line 3: no image file name"),
    "outside the folder": (_bad_csv("../cat.png,what?,cat,"), readers.DatasetInputError,
                           r"line 3: image '\.\./cat\.png': give the path relative to the manual folder"),
    "repeated question id": ("image,question,answer,question_id\nblue.jpeg,a?,b,q1\ncat.png,c?,d,q1\n",
                             readers.DatasetInputError,
                             r"line 3 \(question q1\): question id repeated \(first at train\.csv line 2 "
                             r"\(question q1\)\)"),
    "no answer column": ("image,question\nblue.jpeg,what?\n", readers.DatasetInputError,
                         r"line 1: header \['image', 'question'\] lacks the column 'answer'"),
    "no header": ("blue.jpeg,what?,blue\n", readers.DatasetInputError,
                  r"line 1: header 'blue\.jpeg,what\?,blue' lacks the columns image and question"),
    "empty file": ("", readers.DatasetInputError, r"empty file"),
    "misspelt question column": ("image,qestion,answer\nblue.jpeg,what?,blue\n", readers.DatasetInputError,
                                 r"line 1: header 'image,qestion,answer' lacks the column question \("),
    "no image column": ("picture;question;answer\nblue.jpeg;what?;blue\n", readers.DatasetInputError,
                        r"lacks the column image \(.*image_file"),
}


@pytest.mark.parametrize("case", sorted(BAD_CSV))
def test_bad_csv_rows_are_one_line_errors_naming_file_and_line(tmp_path, case):
    text, cls, pattern = BAD_CSV[case]
    m = make_folder(tmp_path / "m", train=text, validation=VALIDATION, test=VALIDATION)
    with pytest.raises(cls) as info:
        build(Builder, m, tmp_path / "d", NO_OCR)
    message = str(info.value)
    assert "\n" not in message and type(info.value) is cls
    assert message.startswith(f"{m / 'train.csv'}: "), message
    assert __import__("re").search(pattern, message[len(f"{m / 'train.csv'}: "):]), message


def test_kind_column_is_stored_and_scored_per_kind(tmp_path):
    """The optional ``kind`` column (CSV and JSON) is stored per question (empty where a row has none), so the
    evaluation gives scores per kind; it is not logged as an unknown column."""
    train = ("image,question,answer,kind\nblue.jpeg,is it blue?,yes, verify_colour \ncat.png,how many?,one,count\n"
             "photos/red.png,what is it?,a square,\n")
    m = make_folder(tmp_path / "m", train=train, validation=[
        {"image": "blue.jpeg", "question": "is it red?", "answer": "no", "kind": "verify_colour"}], test=VALIDATION)
    builder = build(Builder, m, tmp_path / "d", NO_OCR)
    kinds = {ex["question"]: ex["kind"].decode() for ex in read(builder, "train").values()}
    assert kinds == {"is it blue ?": "verify_colour", "how many ?": "count", "what is it ?": ""}
    assert [ex["kind"] for ex in read(builder, "validation").values()] == [b"verify_colour"]
    assert not any(builder.unknown_fields["train"].values())


def test_not_utf8_csv_names_the_line(tmp_path):
    m = make_folder(tmp_path / "m", validation=VALIDATION, test=VALIDATION)
    text = "image,question,answer\nblue.jpeg,what?,blue\ncat.png,màu gì?,xám\n"
    # Excel's plain "CSV" on a Vietnamese Windows: code page 1258, tones as combining marks
    (m / "train.csv").write_bytes(unicodedata.normalize("NFD", text).encode("cp1258"))
    with pytest.raises(readers.DatasetInputError, match=r"train\.csv: line 3: not UTF-8 text .*'CSV UTF-8"):
        build(Builder, m, tmp_path / "d", NO_OCR)


def test_image_that_does_not_decode_names_file_and_row(tmp_path):
    m = make_folder(tmp_path / "m", train=_bad_csv("broken.jpg,what?,x,q5"), validation=VALIDATION, test=VALIDATION)
    (m / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg at all")
    with pytest.raises(readers.ImageFileError) as info:
        build(Builder, m, tmp_path / "d", NO_OCR)
    message = str(info.value)
    assert message.startswith(f"{m / 'train.csv'}: line 3 (question q5): ") and "broken.jpg" in message
    assert "\n" not in message


#: name -> (JSON value of train.json, the message after "<manual>/train.json: ").
BAD_JSON = {
    "not an object": ([{"image": "blue.jpeg", "question": "a?", "answer": "b"}, "blue.jpeg"],
                      r"\[1\]: expected an object, got 'blue\.jpeg'"),
    "empty answer list": ([{"image": "blue.jpeg", "question": "a?", "answers": [], "question_id": "q1"}],
                          r"\[0\] \(question q1\): empty answer list"),
    "empty answer": ([{"image": "blue.jpeg", "question": "a?", "answer": ""}], r"\[0\]: empty answer$"),
    "answer not a string": ([{"image": "blue.jpeg", "question": "a?", "answers": ["b", 3]}],
                            r"\[0\]: answer 1 is a number \(3\), expected a string"),
    "missing image": ([{"image": "gone.png", "question": "a?", "answer": "b", "question_id": 4}],
                      r"\[0\] \(question 4\): image file 'gone\.png' not found"),
    "unknown language": ([{"image": "blue.jpeg", "question": "a?", "answer": "b", "language": "fr"}],
                         r"\[0\]: language 'fr' is not one of vi, en, ja"),
    "bad qa_type": ([{"image": "blue.jpeg", "question": "a?", "answer": "b", "qa_type": 2}],
                    r"\[0\]: qa_type 2 is not 0 \(non-text QA\), 1 \(text QA\) or empty"),
    "release format": ({"images": {}, "annotations": {}}, r"expected a JSON list of objects .* this is the "
                       r"OpenViVQA release format: build it with tfds_builders/openvivqa"),
    "kind not a string": ([{"image": "blue.jpeg", "question": "a?", "answer": "b", "kind": 3}],
                          r"\[0\]: kind 3 is not a string \(a label such as 'colour'\)"),
    "kind too long": ([{"image": "blue.jpeg", "question": "a?", "answer": "b", "kind": "k" * 65}],
                      r"\[0\]: kind 'k{65}' is not a short label: at most 64 characters on one line"),
}


@pytest.mark.parametrize("case", sorted(BAD_JSON))
def test_bad_json_records_are_one_line_errors_naming_file_and_index(tmp_path, case):
    value, pattern = BAD_JSON[case]
    m = make_folder(tmp_path / "m", validation=VALIDATION, test=VALIDATION)
    (m / "train.csv").unlink()
    write_json(m / "train.json", value)
    with pytest.raises(readers.DatasetInputError) as info:
        build(Builder, m, tmp_path / "d", NO_OCR)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{m / 'train.json'}: "), message
    assert __import__("re").search(pattern, message[len(f"{m / 'train.json'}: "):]), message


def test_invalid_json_names_line_and_column(tmp_path):
    m = make_folder(tmp_path / "m", validation=VALIDATION, test=VALIDATION)
    (m / "train.csv").unlink()
    (m / "train.json").write_text('\ufeff[{"image": "blue.jpeg", "question": "a?", "answer": "b"},\n {"image": }]',
                                  encoding="utf-8")
    with pytest.raises(readers.DatasetInputError, match=r"train\.json: invalid JSON at line 2 column \d+"):
        build(Builder, m, tmp_path / "d", NO_OCR)


def test_bad_rows_and_images_skipped_and_counted(tmp_path):
    rows = ["nope.jpg,what?,x,", "cat.png,  ,x,", "cat.png,what?", "broken.png,what?,x,", "cat.png,what?,cat,"]
    m = make_folder(tmp_path / "m", train="image,question,answer,question_id\n" + "\n".join(rows) + "\n",
                    validation=VALIDATION, test=VALIDATION + [{"image": "blue.jpeg", "question": "x?", "answer": ""}])
    (m / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    config = VqaFolderConfig(name="skip_all", ocr_engine="none", skip_invalid_records=True, skip_missing_images=True)
    builder = build(Builder, m, tmp_path / "d", config)
    assert list(read(builder, "train")) == ["train.csv:6"]
    assert builder.skip_counts["train"] == {"invalid_record": 2, "missing_or_corrupt_image": 2}
    assert builder.skip_counts["test"] == {"invalid_record": 1}
    assert sorted(read(builder, "test")) == ["7", "v1"]


def test_missing_images_are_counted_in_their_file_split_and_never_held_out(tmp_path):
    rows = "".join(f"p{i}.png,question {i}?,answer {i}\n" for i in range(10))
    m = tmp_path / "m"
    m.mkdir()
    for i in range(3, 10):
        Image.new("RGB", (16, 16), (i * 10, 0, 0)).save(m / f"p{i}.png")
    (m / "train.csv").write_text("image,question,answer\n" + rows, encoding="utf-8")
    config = VqaFolderConfig(name="skip_images", ocr_engine="none", skip_missing_images=True)
    builder = build(Builder, m, tmp_path / "d", config)
    assert builder.skip_counts["train"] == {"missing_or_corrupt_image": 3}
    assert builder.held_out == {"validation": (1, 1), "test": (1, 1)}  # drawn from the 7 photos that exist
    assert sum(builder.info.splits[s].num_examples for s in ("train", "validation", "test")) == 7


def test_a_split_left_without_examples_is_a_one_line_error(tmp_path):
    m = make_folder(tmp_path / "m", validation=VALIDATION)
    (m / "test.csv").write_text("image,question,answer\n", encoding="utf-8")
    with pytest.raises(readers.DatasetInputError, match=r"^vqa_folder/no_ocr split 'test' has no examples: its "
                       r"annotation file holds no question; fix or drop its file$"):
        build(Builder, m, tmp_path / "d", NO_OCR)
    (m / "test.csv").write_text("image,question,answer\ngone.png,what?,x\n", encoding="utf-8")
    config = VqaFolderConfig(name="skip_images", ocr_engine="none", skip_missing_images=True)
    with pytest.raises(readers.DatasetInputError, match=r"split 'test' has no examples: every question was skipped "
                       r"\(\{'missing_or_corrupt_image': 1\}\)"):
        build(Builder, m, tmp_path / "d2", config)


def test_annotation_files_and_their_errors(tmp_path):
    m = make_folder(tmp_path / "m")
    (m / "train.csv").unlink()
    with pytest.raises(readers.DatasetInputError, match=r"m: no annotation file: expected train\.csv or train\.json"):
        build(Builder, m, tmp_path / "d", NO_OCR)
    for name in ("my_train.csv", "dev_questions.json", "extra.csv", "ocr.json", "._train.csv"):
        (m / name).write_text("[]" if name.endswith("json") else "image,question,answer\n", encoding="utf-8")
    with pytest.raises(readers.DatasetInputError, match=r"cannot tell the split of \['extra\.csv'\]"):
        folder.annotation_files(m, NO_OCR)
    (m / "extra.csv").unlink()
    assert {k: [p.name for p in v] for k, v in folder.annotation_files(m, NO_OCR).items()} == {
        "train": ["my_train.csv"], "validation": ["dev_questions.json"]}


def test_ocr_file_is_keyed_by_the_image_path_of_the_rows(tmp_path):
    m = make_folder(tmp_path / "m", validation=VALIDATION, test=VALIDATION)
    write_json(m / "ocr.json", {"photos/kitchen/cup.jpg": [{"text": "CAFÉ Sữa", "box": [0.1, 0.2, 0.5, 0.4],
                                                            "score": 0.9}]})
    builder = build(Builder, m, tmp_path / "d", "default")  # ocr_engine auto: the file when present
    train = {ex["image_id"]: ex for ex in read(builder, "train").values()}
    assert train["photos/kitchen/cup.jpg"]["ocr"]["text"] == ["café", "sữa"]  # one copyable token per word
    assert train["blue.jpeg"]["ocr"]["text"] == []
    assert builder.ocr_stats.get("images_missing_from_ocr_file", 0) >= 1  # counted, not silent


def test_config_language_for_rows_without_one(tmp_path):
    m = make_folder(tmp_path / "m", train="image,question,answer\nblue.jpeg,ban di dau?,ha noi\ncat.png,what?,cat\n"
                    "photos/red.png,mau gi?,do\n", validation=VALIDATION, test=VALIDATION)
    builder = build(Builder, m, tmp_path / "d", VqaFolderConfig(name="vi", ocr_engine="none", language="Vietnamese"))
    assert {ex["language"] for ex in read(builder, "train").values()} == {"vi"}
    assert {ex["language"] for ex in read(builder, "validation").values()} == {"vi"}  # v1 is English, not said
    with pytest.raises(readers.DatasetInputError, match=r"config fr: language: language 'fr' is not one of vi, en"):
        build(Builder, m, tmp_path / "d2", VqaFolderConfig(name="fr", ocr_engine="none", language="fr"))


def test_detect_language():
    detect = annotation_rows.detect_language
    assert detect(["what colour is it ?", "red"]) == "en"
    assert detect(["con mèo màu gì ?", "màu xám"]) == "vi"
    assert detect(["đi đâu", "nha trang"]) == "vi"
    assert detect(["これは何ですか", "猫"]) == "ja"
    assert detect(["ban di dau", "ha noi"]) == "en"  # Vietnamese without diacritics: a guess, documented
    # an English question that names a Vietnamese word is English, whatever its answer; the reverse stays Vietnamese
    assert detect(["is the word phở not written in the picture ?", "yes"]) == "en"
    assert detect(["what is sold at the shop ?", "phở bò"]) == "en"
    assert detect(["trong ảnh có chữ milk không ?", "có"]) == "vi"


def test_folder_config_points_at_the_builder_and_drops_the_synthetic_probes():
    from openvivqa_jax.vqa import config as evals

    c = load_config("configs/folder/mlpag.py")
    assert (c.data.builder, c.data.builder_config, c.data.train_split, c.data.eval_split, c.data.test_split) == (
        "vqa_folder", "default", "train", "validation", "test")
    assert c.data.manual_dir is None and c.data.rebuild and c.model.name == "mlpag"
    # A user's folder of unknown size and questions: steps from its size, yes/no questions through the verifier.
    assert c.train.num_train_steps == 0 and c.model.verifier.enabled and c.model.vision.kind == "proposals"
    assert {"EM", "F1", "CIDEr"} <= set(c.eval.metrics) and c.train.best_metric == "F1"
    assert [s.name for s in evals.plan(c)] == ["dev", "test"]
    c.eval.ocr_ablation = True  # an OCR builder config: the ablation and its ratio come back
    assert [s.name for s in evals.plan(c)] == ["dev", "test", "test_no_ocr", "ocr_ratio"]
    assert json.loads(json.dumps(c.to_dict(), default=str))  # the workdir's config.json
