"""Training-curve plot (CLI and metrics reader), heat-map rasterization and the prediction picture."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import ROOT, subprocess_env

PY = sys.executable


def _write_metrics(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def _records():
    recs = [{"step": s, "kind": "train", "time": 0.0, "loss": 5.0 / s, "token_accuracy": 1 - 1.0 / s,
             "learning_rate": 1e-3} for s in (10, 20, 30)]
    recs.append({"step": 20, "kind": "eval", "time": 0.0, "dev/BLEU-4": 0.2, "dev/CIDEr": 1.5})
    # A resumed run logs steps 20 and 30 again: the last value of a step wins.
    recs.append({"step": 20, "kind": "train", "time": 1.0, "loss": 0.7, "token_accuracy": 0.5, "learning_rate": 1e-3})
    recs.append({"step": 30, "kind": "eval", "time": 1.0, "dev/BLEU-4": 0.3, "dev/CIDEr": 2.5})
    recs.append({"step": 30, "kind": "final", "time": 1.0, "test/CIDEr": 2.0})
    return recs


def test_read_metrics_keeps_last_value_per_step(tmp_path):
    from openvivqa_jax.plot import read_metrics

    p = tmp_path / "metrics.jsonl"
    _write_metrics(p, _records())
    m = read_metrics(str(p))
    steps, loss = m["train"]["loss"]
    assert steps.tolist() == [10, 20, 30]
    np.testing.assert_allclose(loss, [0.5, 0.7, 5.0 / 30])
    assert m["eval"]["dev/CIDEr"][0].tolist() == [20, 30] and m["eval"]["dev/CIDEr"][1].tolist() == [1.5, 2.5]
    assert "time" not in m["train"]


def test_read_metrics_errors_name_the_line(tmp_path):
    from openvivqa_jax.plot import MetricsFileError, read_metrics

    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1, "kind": "train", "loss": 1.0}\n{"step": 2, "kind": "train", "loss": \n')
    with pytest.raises(MetricsFileError, match=r"metrics\.jsonl: line 2 is not valid JSON"):
        read_metrics(str(p))
    p.write_text('{"step": "x", "kind": "train"}\n')
    with pytest.raises(MetricsFileError, match="line 1 is not an object with an integer 'step'"):
        read_metrics(str(p))
    p.write_text("\n")
    with pytest.raises(MetricsFileError, match="nothing to plot"):
        read_metrics(str(p))


def test_plot_cli_writes_png(tmp_path):
    wd = tmp_path / "run"
    wd.mkdir()
    _write_metrics(wd / "metrics.jsonl", _records())
    res = subprocess.run([PY, "-m", "openvivqa_jax.plot", "--workdir", str(wd)], cwd=ROOT, env=subprocess_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    out = wd / "training_curves.png"
    assert f"wrote {out}" in res.stdout and "dev/CIDEr" in res.stdout and "train/loss" in res.stdout
    with Image.open(out) as im:
        assert im.format == "PNG" and 1100 < im.size[0] < 1300 and 400 < im.size[1] < 600  # (11, 4.2) in at 110 dpi


@pytest.mark.parametrize("setup,needle", [
    ("missing_dir", "folder not found"),
    ("no_metrics", "no metrics.jsonl"),
    ("bad_json", "line 1 is not valid JSON"),
])
def test_plot_cli_bad_input_one_line_error(tmp_path, setup, needle):
    wd = tmp_path / "run"
    if setup != "missing_dir":
        wd.mkdir()
    if setup == "bad_json":
        (wd / "metrics.jsonl").write_text("{oops\n")
    res = subprocess.run([PY, "-m", "openvivqa_jax.plot", "--workdir", str(wd)], cwd=ROOT, env=subprocess_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0] and str(wd) in lines[0], res.stderr


def test_heat_from_boxes_on_a_grid_is_the_cell_weights():
    from openvivqa_jax.vqa.inference import heat_from_boxes

    gh, gw = 3, 4
    ys, xs = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    boxes = np.stack([xs / gw, ys / gh, (xs + 1) / gw, (ys + 1) / gh], -1).reshape(-1, 4)
    w = np.arange(12, dtype=np.float64) / 66.0
    np.testing.assert_allclose(heat_from_boxes(boxes, w, gh, gw), w.reshape(gh, gw))
    # At twice the resolution every cell covers 2x2 raster cells.
    np.testing.assert_allclose(heat_from_boxes(boxes, w, 2 * gh, 2 * gw), np.kron(w.reshape(gh, gw), np.ones((2, 2))))
    # Overlapping regions add up.
    heat = heat_from_boxes(np.array([[0, 0, 1, 1], [0, 0, 0.5, 0.5]]), np.array([0.25, 0.75]), 2, 2)
    np.testing.assert_allclose(heat, [[1.0, 0.25], [0.25, 0.25]])


def test_plot_prediction_marks_the_copied_box(tmp_path):
    """The copied token's box is drawn in red: the pixels along its outline are red in the saved picture."""
    from openvivqa_jax.plot import plot_prediction

    img = np.full((96, 128, 3), 235, np.uint8)
    ocr = [{"text": "phở", "box": (0.1, 0.1, 0.3, 0.2), "score": 0.9},
           {"text": "hùng", "box": (0.4, 0.5, 0.9, 0.8), "score": 0.95}]
    words = [{"word": "tên", "source": "vocab"}, {"word": "hùng", "source": "ocr", "ocr_index": 1}]
    out = plot_prediction(img, str(tmp_path / "p.png"), question="cửa hàng này tên gì ?", answer="tên hùng",
                          words=words, ocr_tokens=ocr, heat=np.eye(3), heat_note="test")
    with Image.open(out) as im:
        arr = np.asarray(im.convert("RGB")).astype(int)
    red = (arr[..., 0] > 200) & (arr[..., 1] < 60) & (arr[..., 2] < 60)
    assert red.sum() > 200  # the copied box outline and its label
    cyan = (arr[..., 0] < 60) & (arr[..., 1] > 200) & (arr[..., 2] > 200)
    assert cyan.sum() > 20  # the other OCR box
