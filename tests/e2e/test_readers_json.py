"""Annotation files that lose nothing: repeated JSON keys (duplicated question/image ids of the dict form),
fields the builders do not store, and the OpenViVQA builder's warning on non-Vietnamese questions."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import tensorflow_datasets as tfds
from PIL import Image

from openvivqa_jax.evaluation import formats
from tfds_builders import readers
from tfds_builders.openvivqa import Builder, OpenVivqaConfig

NO_OCR = OpenVivqaConfig(name="no_ocr", ocr_engine="none")
SKIP = OpenVivqaConfig(name="no_ocr_skip", ocr_engine="none", skip_invalid_records=True)


def _images(manual: Path, names=("a.jpg", "b.jpg")) -> None:
    (manual / "images").mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        Image.new("RGB", (32, 24), (40 * i, 90, 200)).save(manual / "images" / name, format="JPEG")


# Dict form written by hand: json.dumps cannot repeat a key. Question "7" appears twice with different
# content, as after a bad merge of two annotation files.
DUP_QUESTION = """{
 "images": {"1": "a.jpg", "2": "b.jpg"},
 "annotations": {
  "7": {"image_id": 1, "question": "cửa tiệm này tên gì?", "answer": "mộc"},
  "8": {"image_id": 2, "question": "đây là đâu?", "answer": "hà nội"},
  "7": {"image_id": 2, "question": "màu gì?", "answer": "đỏ"}
 }
}"""

DUP_IMAGE = """{
 "images": {"1": "a.jpg", "1": "b.jpg"},
 "annotations": {"7": {"image_id": 1, "question": "cửa tiệm này tên gì?", "answer": "mộc"}}
}"""


def _build(manual: Path, data_dir: Path, config=NO_OCR) -> Builder:
    b = Builder(config=config, data_dir=str(data_dir), file_format="array_record")
    b.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
    return b


def _read(b: Builder, split: str) -> dict[str, dict]:
    out = {}
    for ex in b.as_data_source()[split]:
        out[ex["question_id"].decode()] = {
            "question": ex["question"].decode(), "answers": [a.decode() for a in ex["answers"]],
            "image_id": ex["image_id"].decode(), "language": ex["language"].decode()}
    return out


def test_read_json_keeps_first_value_and_lists_repeats(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"a": {"1": "first", "2": "two", "1": "second", "1": "third"}, "b": [{"k": 1}]}', encoding="utf-8")
    data = readers.read_json(p)
    assert data["a"] == {"1": "first", "2": "two"}
    assert data["a"].duplicates == [("1", "second"), ("1", "third")]
    assert readers.duplicate_keys(data["a"]) == ["1", "1"]
    assert readers.duplicate_keys(data) == [] and readers.duplicate_keys(data["b"]) == []


def test_repeated_question_id_with_another_question_is_renamed_and_counted(tmp_path):
    manual = tmp_path / "manual"
    _images(manual)
    (manual / "train_data.json").write_text(DUP_QUESTION, encoding="utf-8")
    b = _build(manual, tmp_path / "data")
    # The repeat of "7" carries another question: kept as "7#2" (json.load would have kept only "màu gì?").
    assert _read(b, "train") == {
        "7": {"question": "cửa tiệm này tên gì ?", "answers": ["mộc"], "image_id": "1", "language": "vi"},
        "8": {"question": "đây là đâu ?", "answers": ["hà nội"], "image_id": "2", "language": "vi"},
        "7#2": {"question": "màu gì ?", "answers": ["đỏ"], "image_id": "2", "language": "vi"},
    }
    path = str(manual / "train_data.json")
    assert b.repairs["train"].entries == {"repeated_id_renamed": {path: {"count": 1, "questions": 1, "first": ["7 -> 7#2"]}}}
    notes = json.loads(Path(b.data_dir, "openvivqa_build_notes.json").read_text(encoding="utf-8"))
    assert notes["train"]["repairs"]["repeated_id_renamed"]["files"] == {path: {"count": 1, "questions": 1, "first": ["7 -> 7#2"]}}


def test_repeated_question_id_refused_by_strict_one_line_or_skipped(tmp_path):
    manual = tmp_path / "manual"
    _images(manual)
    (manual / "train_data.json").write_text(DUP_QUESTION, encoding="utf-8")
    with pytest.raises(readers.DatasetInputError) as e:
        _build(manual, tmp_path / "data", OpenVivqaConfig(name="strict", ocr_engine="none", strict=True))
    msg = str(e.value)
    assert msg.startswith(f"{manual / 'train_data.json'}: question 7: question id repeated with another question")
    assert "strict" in msg and "\n" not in msg
    b = _build(manual, tmp_path / "data2", OpenVivqaConfig(name="strict_skip", ocr_engine="none", strict=True,
                                                           skip_invalid_records=True))
    assert b.skip_counts["train"] == {"duplicate_question_id": 1}
    assert sorted(_read(b, "train")) == ["7", "8"]


def test_exact_duplicate_dropped_and_same_question_other_answer_refused(tmp_path):
    manual = tmp_path / "manual"
    _images(manual)
    exact = DUP_QUESTION.replace('"7": {"image_id": 2, "question": "màu gì?", "answer": "đỏ"}',
                                 '"7": {"image_id": 1, "question": "cửa tiệm này tên gì?", "answer": "mộc"}')
    (manual / "train_data.json").write_text(exact, encoding="utf-8")
    b = _build(manual, tmp_path / "data")
    assert sorted(_read(b, "train")) == ["7", "8"]
    assert b.repairs["train"].totals() == {"exact_duplicate_dropped": 1}
    other = DUP_QUESTION.replace('"7": {"image_id": 2, "question": "màu gì?", "answer": "đỏ"}',
                                 '"7": {"image_id": 1, "question": "cửa tiệm này tên gì?", "answer": "bầu"}')
    (manual / "train_data.json").write_text(other, encoding="utf-8")
    with pytest.raises(readers.DatasetInputError, match=r"train_data\.json: question 7: question id repeated \(also in "
                       r".*\) with the same question and other answers; which one holds cannot be told"):
        _build(manual, tmp_path / "data2")


def test_repeated_image_id_error_and_skip(tmp_path):
    manual = tmp_path / "manual"
    _images(manual)
    (manual / "train_data.json").write_text(DUP_IMAGE, encoding="utf-8")
    with pytest.raises(readers.DatasetInputError, match=r"train_data\.json: image '1': image id repeated in 'images' "
                       r"\(a repeated JSON key\) with another file name \('a\.jpg', 'b\.jpg'\)"):
        _build(manual, tmp_path / "data")
    b = _build(manual, tmp_path / "data2", SKIP)
    assert b.skip_counts["train"] == {"duplicate_image_id": 1}
    assert list(_read(b, "train")) == ["7"]


def test_unknown_fields_counted_and_logged_once(tmp_path, caplog):
    manual = tmp_path / "manual"
    _images(manual)
    data = {
        "info": {"version": 2},
        "images": [{"id": 1, "filename": "a.jpg", "width": 32}, {"id": 2, "filename": "b.jpg", "width": 32}],
        "annotations": [
            {"id": 1, "image_id": 1, "question": "q1", "answer": "a1", "explanation": "x"},
            {"id": 2, "image_id": 2, "question": "q2", "answer": "a2", "explanation": "y", "difficulty": 3},
            {"id": 3, "image_id": 2, "question": "q3", "answer": "a3"},
        ],
    }
    (manual / "train_data.json").write_text(json.dumps(data), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        b = _build(manual, tmp_path / "data")
    path = str(manual / "train_data.json")
    assert b.unknown_fields["train"] == {path: {"info": 1, "width": 2, "explanation": 2, "difficulty": 1}}
    lines = [r.getMessage() for r in caplog.records if "fields not stored" in r.getMessage()]
    assert len(lines) == 1 and "'explanation': 2" in lines[0] and path in lines[0]
    assert len(_read(b, "train")) == 3


def test_openvivqa_warns_once_on_other_languages(tmp_path, caplog):
    manual = tmp_path / "manual"
    _images(manual)
    anns = [
        {"id": 1, "image_id": 1, "question": "what is sold here?", "answer": "pho", "language": "en"},
        {"id": 2, "image_id": 1, "question": "ここで何を売っていますか？", "answer": "フォー", "language": "ja"},
        {"id": 3, "image_id": 2, "question": "ở đây bán gì?", "answer": "phở", "language": "vi"},
        {"id": 4, "image_id": 2, "question": "what colour?", "answer": "red", "language": "en"},
    ]
    (manual / "evjvqa_train.json").write_text(
        json.dumps({"images": [{"id": 1, "filename": "a.jpg"}, {"id": 2, "filename": "b.jpg"}], "annotations": anns},
                   ensure_ascii=False), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        b = _build(manual, tmp_path / "data")
    lines = [r.getMessage() for r in caplog.records if "other than 'vi'" in r.getMessage()]
    assert len(lines) == 1
    assert "3 of 4 questions" in lines[0] and "{'en': 2, 'ja': 1}" in lines[0] and "tfds_builders/evjvqa" in lines[0]
    assert {k: v["language"] for k, v in _read(b, "train").items()} == {"1": "en", "2": "ja", "3": "vi", "4": "en"}


def test_evaluate_reader_refuses_repeated_keys(tmp_path):
    p = tmp_path / "vlsp2023_dev_data.json"
    p.write_text(DUP_QUESTION, encoding="utf-8")
    with pytest.raises(formats.InputError, match=r"key '7' appears twice"):
        formats.load_references(p)
    preds = tmp_path / "preds.json"
    preds.write_text('{"7": "mộc", "8": "hà nội", "7": "đỏ"}', encoding="utf-8")
    with pytest.raises(formats.InputError, match=r"preds\.json.*key '7' appears twice"):
        formats.load_predictions(preds)


def test_evaluate_reader_keeps_language(tmp_path):
    p = tmp_path / "evjvqa_public_test.json"
    p.write_text(json.dumps({
        "images": [{"id": 1, "filename": "a.jpg"}],
        "annotations": [{"id": 10, "image_id": 1, "question": "q", "answer": "a", "language": "EN"},
                        {"id": 11, "image_id": 1, "question": "q", "answer": "ア", "language": "ja"}]}), encoding="utf-8")
    ref = formats.load_references(p)
    assert ref.fields == {"language": {"10": "en", "11": "ja"}}


@pytest.mark.slow
def test_tfds_build_command_line_prints_one_line(tmp_path):
    """The README's `tfds build` command, strict, on a file with a repeated question id: one `error:` line, exit 1,
    no traceback (about 25 s: the tfds script imports TensorFlow and Beam)."""
    import os
    import subprocess
    import sys

    manual = tmp_path / "manual"
    _images(manual)
    (manual / "train_data.json").write_text(DUP_QUESTION, encoding="utf-8")
    script = Path(sys.executable).parent / "tfds"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    res = subprocess.run(
        [str(script), "build", "tfds_builders/openvivqa", "--config", '{"name": "strict", "strict": true}',
         f"--manual_dir={manual}",
         f"--data_dir={tmp_path / 'data'}", "--file_format=array_record"],
        cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    errors = [line for line in res.stderr.replace("\r", "\n").splitlines() if "error: " in line]
    assert len(errors) == 1
    assert errors[0].strip().endswith(
        f"error: DatasetInputError: {manual / 'train_data.json'}: question 7: question id repeated with another "
        f"question (also in {manual / 'train_data.json'}) (refused by the builder option strict; without it: "
        "repeated question id carrying another question, renamed <id>#<n>)")


def test_tfds_cli_handler_one_line_for_input_errors_also_from_beam_workers(monkeypatch, capsys):
    """The absl exception handler the `tfds` command line gets: our input errors (also a Beam worker's, which
    reaches the driver as traceback text in a RuntimeError, or one chained as a cause) print one line and end
    the process with the error's exit code; other exceptions are not its business (absl re-raises them)."""
    import sys
    import types

    from absl import app

    from openvivqa_jax import cli

    monkeypatch.setitem(sys.modules, "tensorflow_datasets.scripts.cli.main", types.ModuleType("cli"))
    monkeypatch.setattr(app, "EXCEPTION_HANDLERS", [])
    exits = []
    monkeypatch.setattr(cli, "exit_now", exits.append)
    assert cli.install_tfds_cli_handler() and cli.install_tfds_cli_handler()
    assert len(app.EXCEPTION_HANDLERS) == 1  # registered once
    handler = app.EXCEPTION_HANDLERS[0]
    worker_text = ("Traceback (most recent call last):\n  File \"beam_build.py\", line 1, in image_examples\n"
                   "tfds_builders.readers.ImageFileError: a.json: question 3: image x.jpg: not a recognised image "
                   "file [while running 'test/PerImage']")
    chained = RuntimeError("pipeline failed")
    chained.__cause__ = readers.DatasetInputError("b.json: question 1: no answers")
    for exc in (readers.DatasetInputError("a.json: question 7: bad\nsecond line"), RuntimeError(worker_text),
                chained):
        assert handler.wants(exc)
        handler.handle(exc)
    assert not handler.wants(KeyError("x"))
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: DatasetInputError: a.json: question 7: bad second line",
                   "error: ImageFileError: a.json: question 3: image x.jpg: not a recognised image file",
                   "error: DatasetInputError: b.json: question 1: no answers"]
    assert exits == [1, 1, 1]


def test_tfds_cli_handler_not_outside_the_tfds_command_line(monkeypatch):
    import sys

    from absl import app

    from openvivqa_jax import cli

    monkeypatch.delitem(sys.modules, "tensorflow_datasets.scripts.cli.main", raising=False)
    monkeypatch.setattr(app, "EXCEPTION_HANDLERS", [])
    assert not cli.install_tfds_cli_handler() and app.EXCEPTION_HANDLERS == []


def test_textvqa_stvqa_viquad_count_unknown_fields(tmp_path):
    """Fields the builders do not store (TextVQA's image_classes and set_name, ST-VQA's set_name, a SQuAD 2.0
    question's plausible_answers) are counted per file."""
    import test_dataset_configs as files
    from tfds_builders import st_vqa, textvqa, viquad

    def build(module, cfg, manual):
        b = module.Builder(config=cfg, data_dir=str(tmp_path / cfg.name), file_format="array_record")
        b.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
        return b

    tv = build(textvqa, textvqa.TextVqaConfig(name="u"), files.make_textvqa(tmp_path / "tv"))
    path = str(tmp_path / "tv" / "TextVQA_0.5.1_train.json")
    assert tv.unknown_fields["train"] == {path: {"image_classes": 8, "set_name": 8}}
    st = build(st_vqa, st_vqa.StVqaConfig(name="u1", task=1), files.make_stvqa(tmp_path / "st"))
    assert st.unknown_fields["train"] == {str(tmp_path / "st" / "train_task_1.json"): {"set_name": 10}}
    manual = files.make_viquad(tmp_path / "vq")
    data = json.loads((manual / "dev_ViQuAD.json").read_text(encoding="utf-8"))
    data["data"][0]["paragraphs"][0]["qas"][0].update(is_impossible=False, plausible_answers=[])
    (manual / "dev_ViQuAD.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    vq = build(viquad, viquad.ViquadConfig(name="u"), manual)
    assert vq.unknown_fields["dev"] == {str(manual / "dev_ViQuAD.json"): {"plausible_answers": 1}}
    assert vq.unknown_fields["train"] == {}


def test_vivqa_logs_unstored_csv_columns_once(tmp_path, caplog):
    from tfds_builders.vivqa.vivqa_dataset_builder import parse_csv

    p = tmp_path / "train.csv"
    p.write_text(",question,answer,img_id,type,source\n0,màu gì,màu đỏ,1,2,web\n1,ở đâu,trên bàn,2,3,web\n",
                 encoding="utf-8")
    policy = readers.ErrorPolicy(readers.SkipCounter("t"), False, False)
    with caplog.at_level(logging.WARNING):
        rows = parse_csv(p, answers_required=True, policy=policy)
    assert [r.question for r in rows] == ["màu gì", "ở đâu"]
    lines = [r.getMessage() for r in caplog.records if "columns not stored" in r.getMessage()]
    assert lines == [f"{p}: columns not stored by this builder: ['source']"]
