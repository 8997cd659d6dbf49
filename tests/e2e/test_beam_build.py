"""Builds on Apache Beam (tfds_builders/beam_build.py): a Beam-built and a plain-built EVJVQA dataset of 20
stand-in photos are equal example by example, in the same order; bad images under both paths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image, ImageDraw

from tfds_builders import beam_build, image_work, readers
from tfds_builders.evjvqa import Builder, EvjvqaConfig

LANGS = (("vi", "biển hiệu ghi gì?", "phở bò"), ("en", "what is written on the sign?", "pho"),
         ("ja", "看板には何と書いてありますか？", "フォー"))


def make_photos(root: Path, n: int = 20) -> Path:
    """``n`` stand-in photos (every 4th a PNG with alpha, every 5th a CMYK JPEG: both re-encoded at build
    time), three questions each (vi, en, ja), and OCR tokens for the even images in ocr.json."""
    img_dir = root / "public-test-images"
    img_dir.mkdir(parents=True)
    images, anns, ocr = [], [], {}
    for i in range(n):
        im = Image.new("RGB", (64 + i, 48), (200 - 7 * i, 120, 30 + 9 * i))
        ImageDraw.Draw(im).rectangle((5, 5, 20 + i, 30), fill=(10, 10, 10))
        if i % 4 == 3:
            name = f"{i:05d}.png"
            im.convert("RGBA").save(img_dir / name)
        elif i % 5 == 4:
            name = f"{i:05d}.jpg"
            im.convert("CMYK").save(img_dir / name, format="JPEG")
        else:
            name = f"{i:05d}.jpg"
            im.save(img_dir / name, format="JPEG", quality=90)
        images.append({"id": i, "filename": name})
        for j, (lang, q, a) in enumerate(LANGS):
            anns.append({"id": 100 * i + j, "image_id": i, "question": q, "answer": a, "language": lang})
        if i % 2 == 0:
            ocr[str(i)] = [{"text": f"số {i}", "box": [0.1, 0.1, 0.5, 0.3], "score": 0.9}]
    (root / "evjvqa_public_test.json").write_text(json.dumps({"images": images, "annotations": anns},
                                                              ensure_ascii=False), encoding="utf-8")
    (root / "ocr.json").write_text(json.dumps(ocr, ensure_ascii=False), encoding="utf-8")
    return root


def _examples(builder: Builder) -> list[dict]:
    out = []
    for ex in builder.as_data_source()["test"]:
        out.append({
            "question_id": ex["question_id"].decode(), "image_id": ex["image_id"].decode(),
            "question": ex["question"].decode(), "answers": [a.decode() for a in ex["answers"]],
            "language": ex["language"].decode(), "qa_type": int(ex["qa_type"]), "image": np.asarray(ex["image"]),
            "ocr_text": [t.decode() for t in ex["ocr"]["text"]],
            "ocr_box": np.asarray(ex["ocr"]["box"]).reshape(-1, 4), "ocr_score": np.asarray(ex["ocr"]["score"])})
    return out


@pytest.mark.slow
def test_beam_build_equals_plain_build(tmp_path):
    """20 photos, 60 questions: plain (one process) and Beam (DirectRunner, multi_processing, 2 workers) give
    the same examples in the same order (about 40 s: Beam starts two worker processes)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    manual = make_photos(tmp_path / "manual")
    cfg = EvjvqaConfig(name="file_ocr", ocr_engine="auto", num_workers=1)
    plain = Builder(config=cfg, data_dir=str(tmp_path / "plain"), file_format="array_record")
    plain.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
    assert not plain.use_beam
    options = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                               "--direct_num_workers=2"])
    beam = Builder(config=cfg, data_dir=str(tmp_path / "beam"), file_format="array_record")
    beam.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual),
                                                                           beam_options=options))
    assert beam.use_beam
    a, b = _examples(plain), _examples(beam)
    assert len(a) == len(b) == 60
    assert [x["question_id"] for x in a] == [x["question_id"] for x in b]
    assert sorted(int(x["question_id"]) for x in a) == sorted(100 * i + j for i in range(20) for j in range(3))
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], np.ndarray):
                np.testing.assert_array_equal(x[k], y[k], err_msg=f"{x['question_id']} {k}")
            else:
                assert x[k] == y[k], (x["question_id"], k)
    by_id = {x["question_id"]: x for x in a}
    # ocr.json tokens (even images), split into copyable words as the OCR file reader does.
    assert by_id["400"]["ocr_text"] == ["số", "4"] and by_id["500"]["ocr_text"] == []
    assert by_id["300"]["image"].shape == (48, 67, 3)  # the RGBA PNG, composited and stored
    assert {x["language"] for x in a} == {"vi", "en", "ja"}


def test_image_examples_fill_image_and_ocr(tmp_path):
    Image.new("RGB", (30, 20), (1, 2, 3)).save(tmp_path / "a.png")
    group = beam_build.ImageGroup(
        path=str(tmp_path / "a.png"), source="f.json",
        records=(("1", "question 1", {"question_id": "1", "language": "ja"}),
                 ("2", "question 2", {"question_id": "2", "language": "en"})),
        tokens=({"text": "phở", "box": (0.1, 0.2, 0.3, 0.4), "score": 0.5},))
    out = beam_build.image_examples(group, image_work.ImageSettings())
    assert [k for k, _ in out] == ["1", "2"]
    for _, ex in out:
        assert ex["ocr"]["text"] == ["phở"]
        np.testing.assert_allclose(ex["ocr"]["box"], [[0.1, 0.2, 0.3, 0.4]])
        decoded = np.asarray(Image.open(__import__("io").BytesIO(ex["image"])).convert("RGB"))
        assert decoded.shape == (20, 30, 3) and (decoded == (1, 2, 3)).all()


def test_bad_image_error_or_counted_skip(tmp_path):
    (tmp_path / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    group = beam_build.ImageGroup(path=str(tmp_path / "bad.jpg"), source="evjvqa_public_test.json",
                                  records=(("7", "question 7", {}), ("8", "question 8", {})))
    with pytest.raises(readers.ImageFileError, match=r"^evjvqa_public_test\.json: question 7: .*bad\.jpg"):
        beam_build.image_examples(group, image_work.ImageSettings())
    assert beam_build.image_examples(group, image_work.ImageSettings(), skip_missing_images=True) == []
    # In-process path: one counted skip per question of the bad image.
    counter = readers.SkipCounter("t")
    policy = readers.ErrorPolicy(counter, True, False)
    out = list(beam_build.generate([group], image_work.ImageSettings(), use_beam=False, skip_missing_images=True,
                                   name="t", num_workers=1, policy=policy))
    assert out == [] and counter.counts == {"missing_or_corrupt_image": 2}


def test_beam_requested():
    assert not beam_build.beam_requested(None)
    assert not beam_build.beam_requested(tfds.download.DownloadConfig())
    assert beam_build.beam_requested(tfds.download.DownloadConfig(beam_runner="DirectRunner"))


def _generic_examples(builder, split: str) -> list[dict]:
    """Every feature of every example of ``split``, in stored order, as plain values."""
    out = []
    for ex in builder.as_data_source()[split]:
        row = {}
        for k, v in ex.items():
            if isinstance(v, dict):
                row.update({f"{k}.{kk}": np.asarray(vv) for kk, vv in v.items()})
            else:
                row[k] = np.asarray(v)
        out.append(row)
    return out


def _assert_same_builds(plain, beam) -> None:
    assert sorted(plain.info.splits) == sorted(beam.info.splits)
    for split in plain.info.splits:
        a, b = _generic_examples(plain, split), _generic_examples(beam, split)
        assert len(a) == len(b) > 0, split
        assert [x["question_id"].item() for x in a] == [y["question_id"].item() for y in b], split
        for x, y in zip(a, b):
            assert x.keys() == y.keys()
            for k in x:
                np.testing.assert_array_equal(x[k], y[k], err_msg=f"{split} {x['question_id']} {k}")


def _make(name: str, root: Path):
    """(builder module, config, manual dir) of each image builder on test-made files in the published format."""
    import test_dataset_configs as files
    from tfds_builders import openvivqa, st_vqa, textvqa, vivqa

    if name == "openvivqa":  # the real sample folder (7 photos), OCR run by tesseract at build time
        from test_openvivqa_builder import SAMPLE

        if not SAMPLE.is_dir():
            pytest.skip(f"OpenViVQA sample folder {SAMPLE} not present")
        return openvivqa, openvivqa.OpenVivqaConfig(name="tess", ocr_engine="tesseract", num_workers=1), SAMPLE
    if name == "vivqa":
        return vivqa, vivqa.VivqaConfig(name="none", ocr_engine="none", num_workers=1), files.make_vivqa(root)
    if name == "st_vqa":
        return st_vqa, st_vqa.StVqaConfig(name="t1", task=1, num_workers=1), files.make_stvqa(root)
    return textvqa, textvqa.TextVqaConfig(name="one_worker", num_workers=1), files.make_textvqa(root)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["openvivqa", "vivqa", "st_vqa", "textvqa"])
def test_every_image_builder_on_beam_equals_plain(tmp_path, name):
    """Each builder with per-image work, built plainly and on Beam (DirectRunner, multi_processing, 2 workers):
    the same examples, every feature, in the same order (30-90 s each: Beam worker start-up, and tesseract on
    the 7 OpenViVQA photos)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    module, cfg, manual = _make(name, tmp_path / "manual")
    plain = module.Builder(config=cfg, data_dir=str(tmp_path / "plain"), file_format="array_record")
    plain.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
    options = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                               "--direct_num_workers=2"])
    beam = module.Builder(config=cfg, data_dir=str(tmp_path / "beam"), file_format="array_record")
    beam.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual),
                                                                           beam_options=options))
    assert beam.use_beam and not plain.use_beam
    _assert_same_builds(plain, beam)
    if name == "openvivqa":  # the engine's tokens came from the Beam workers
        ocr = [t for ex in _generic_examples(beam, "train") for t in ex["ocr.text"]]
        assert len(ocr) > 0


@pytest.mark.slow
def test_tfds_command_line_with_beam_pipeline_options(tmp_path):
    """The README's command with `--beam_pipeline_options` (DirectRunner, 2 processes) builds the evjvqa photos
    exactly as the plain builder does (1-3 min on 2 busy cores: the tfds script imports TensorFlow, Beam starts
    workers)."""
    from test_tfds_cli import tfds_build

    manual = make_photos(tmp_path / "manual", n=6)
    tfds_build("evjvqa", manual, tmp_path / "cli", "--config", "default",
               "--beam_pipeline_options=runner=DirectRunner,direct_running_mode=multi_processing,direct_num_workers=2")
    cli = tfds.builder_from_directory(str(tmp_path / "cli" / "evjvqa" / "default" / "1.0.0"))
    plain = Builder(config=EvjvqaConfig(name="plain", num_workers=1), data_dir=str(tmp_path / "plain"),
                    file_format="array_record")
    plain.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
    _assert_same_builds(plain, cli)
    assert len(_generic_examples(cli, "test")) == 18
