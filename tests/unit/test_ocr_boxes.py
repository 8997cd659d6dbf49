"""OCR file boxes: a coordinate a hair outside [0, 1] (within ocr.BOX_TOLERANCE) is clipped and counted; beyond it
the token is an error naming the file, the image and the token, or, under the skip option (a builder's
skip_invalid_records, predict's --skip_bad), skipped and counted."""

from __future__ import annotations

import json

import numpy as np
import pytest

from openvivqa_jax.data import ocr as ocr_lib
from openvivqa_jax.data.ocr import engines as ocr_engines

from test_openvivqa_builder import build, read, small_dataset

TOKENS = [{"text": "phở", "box": [-0.004, 0.1, 0.5, 1.012], "score": 0.9},  # within the tolerance: clipped
          {"text": "hòa", "box": [1.16, 0.1, 1.3, 0.2], "score": 0.8}]  # past the right edge by 16%


def test_tolerance_is_two_percent():
    assert ocr_lib.BOX_TOLERANCE == 0.02


def test_validate_tokens_clips_within_the_tolerance_and_skips_beyond():
    with pytest.raises(ocr_lib.OcrFileError) as e:
        ocr_lib.validate_tokens(TOKENS, source="ocr.json", image_id="10")
    assert str(e.value).startswith("ocr.json: image '10': token 1 ('hòa') 'box' (1.16, 0.1, 1.3, 0.2)")
    stats: dict[str, int] = {}
    out = ocr_lib.validate_tokens(TOKENS, source="ocr.json", image_id="10", stats=stats, skip_invalid=True)
    assert [t["text"] for t in out] == ["phở"]
    np.testing.assert_allclose(out[0]["box"], [0.0, 0.1, 0.5, 1.0])
    assert stats == {"clipped_boxes": 1, "skipped_invalid_tokens": 1}


def test_builder_ocr_file_box_error_or_counted_skip(tmp_path):
    from tfds_builders.openvivqa import OpenVivqaConfig

    small_dataset(tmp_path / "m")
    (tmp_path / "m" / "ocr.json").write_text(json.dumps({"10": TOKENS}, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ocr_lib.OcrFileError, match=r"ocr\.json: image '10': token 1 \('hòa'\) 'box'"):
        build(tmp_path / "m", tmp_path / "d", config=OpenVivqaConfig(name="file_ocr", ocr_engine="file"))
    b = build(tmp_path / "m", tmp_path / "d2", config=OpenVivqaConfig(name="file_ocr_skip", ocr_engine="file",
                                                                       skip_invalid_records=True))
    ex = read(b.as_data_source()["train"])
    assert ex["100"]["ocr"]["text"] == ["phở"] and ex["102"]["ocr"]["text"] == []
    np.testing.assert_allclose(ex["100"]["ocr"]["box"], [[0.0, 0.1, 0.5, 1.0]])
    assert b.ocr_stats["skipped_invalid_tokens"] == 1 and b.ocr_stats["clipped_boxes"] == 1


def test_predict_ocr_file_box_skipped_with_skip_bad(tmp_path):
    p = tmp_path / "ocr.json"
    p.write_text(json.dumps({"a.png": TOKENS}, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ocr_lib.OcrFileError, match="token 1"):
        ocr_lib.read_ocr_table(str(p))
    assert [t["text"] for t in ocr_lib.read_ocr_table(str(p), skip_invalid=True)["a.png"]] == ["phở"]


def test_fragment_tokens_inside_larger_tokens_are_dropped_and_counted():
    toks = [{"text": "hà", "box": (0.10, 0.10, 0.30, 0.20), "score": 0.9},
            {"text": "nội", "box": (0.32, 0.10, 0.50, 0.20), "score": 0.9},
            {"text": "à", "box": (0.20, 0.11, 0.30, 0.19), "score": 0.6},  # inside "hà", part of its text
            {"text": "i", "box": (0.45, 0.10, 0.50, 0.20), "score": 0.5},  # inside "nội"
            {"text": "5", "box": (0.12, 0.12, 0.15, 0.18), "score": 0.7},  # inside "hà" but not part of it: kept
            {"text": "à", "box": (0.70, 0.70, 0.80, 0.80), "score": 0.9}]  # elsewhere: kept
    kept, n = ocr_lib.drop_fragments(toks)
    assert n == 2 and [t["text"] for t in kept] == ["hà", "nội", "5", "à"]


def test_default_engine_counts_dropped_fragments(monkeypatch):
    """The default engine (detector + tesseract) drops them after merging, counted as dropped_fragments (the
    detector and Tesseract stood in for: one detected line read as "hà" and, inside it, "à")."""
    import sys
    import types

    from PIL import Image

    monkeypatch.setattr(ocr_engines, "check_tesseract", lambda lang="vie": None)
    monkeypatch.setattr(ocr_engines, "detect_text_boxes", lambda image, threads=1: np.asarray(
        [[[10, 10], [30, 10], [30, 20], [10, 20]]], np.float32))
    fake = types.SimpleNamespace(Output=types.SimpleNamespace(DICT="dict"),
                                 image_to_data=lambda crop, **kw: {"size": crop.size})
    monkeypatch.setitem(sys.modules, "pytesseract", fake)

    def rows(data, min_confidence, counts):
        w, h = data["size"]
        yield "hà", 90.0, 0, 0, w, h
        yield "à", 60.0, w // 2, h // 4, w // 2 - 1, h // 2

    monkeypatch.setattr(ocr_engines, "_word_rows", rows)
    stats: dict[str, int] = {}
    out = ocr_lib.run_detector_tesseract(Image.new("RGB", (100, 100)), filter_tokens=False, stats=stats)
    assert [t["text"] for t in out] == ["hà"] and stats["dropped_fragments"] == 1
