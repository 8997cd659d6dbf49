"""benchmarks/make_release_standin.py: the release's dict form, photo sizes, determinism for any number of
workers, and that the openvivqa builder (default and features configs) reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import ROOT, subprocess_env

SCRIPT = os.path.join(ROOT, "benchmarks", "make_release_standin.py")


def _make(out, n, *extra):
    res = subprocess.run([sys.executable, SCRIPT, "--images", str(n), "--out", str(out), *extra], cwd=ROOT,
                         env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _tree(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.relpath(os.path.join(d, n), root)] = f.read()
    return out


@pytest.mark.slow  # 5-10 s on 2 cores: left to the full suite
def test_standin_form_sizes_and_determinism(tmp_path):
    a = _make(tmp_path / "a", 18, "--features", "--workers", "1")
    _make(tmp_path / "b", 18, "--features", "--workers", "2")
    ta, tb = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert ta == tb
    # The first images of a bigger stand-in are the same images.
    _make(tmp_path / "c", 20, "--workers", "2")
    tc = _tree(tmp_path / "c")
    assert all(tc[k] == v for k, v in ta.items() if k.startswith("images/"))
    total_q, total_i = 0, 0
    assert info_has_all_splits(a)
    for split in ("train", "dev", "test"):
        d = json.loads(ta[f"vlsp2023_{split}_data.json"])
        assert set(d) == {"images", "annotations"}
        for qid, ann in d["annotations"].items():
            assert set(ann) == {"image_id", "question", "answer"}
            assert str(ann["image_id"]) in d["images"]
            assert 5 <= len(ann["question"].split()) <= 20 and 2 <= len(ann["answer"].split()) <= 30
        total_q += len(d["annotations"])
        total_i += len(d["images"])
    assert total_i == 18 and total_q == sum(a["questions"].values())
    assert 2 * 18 <= total_q <= 5 * 18
    ocr = json.loads(ta["ocr.json"])
    assert len(ocr) == 18
    for image_id, toks in ocr.items():
        im = Image.open(tmp_path / "a" / "images" / f"{int(image_id):011d}.jpg")
        assert 640 <= im.width <= 1600 and 480 <= im.height <= 1200 and im.format == "JPEG"
        for t in toks:
            x0, y0, x1, y1 = t["box"]
            assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1 and t["text"]
    f = np.load(tmp_path / "a" / "features" / "00000000000.npy", allow_pickle=True).item()
    assert f["region_features"].shape == (50, 2048) and f["region_boxes"].shape == (50, 4)
    assert len(f["texts"]) == len(f["boxes"]) == len(ocr["0"])
    res = subprocess.run([sys.executable, SCRIPT, "--images", "11200", "--out", str(tmp_path / "x")], cwd=ROOT,
                         env=subprocess_env(), capture_output=True, text=True)
    assert res.returncode != 0 and "--images must be 1..11199" in res.stderr


def info_has_all_splits(info) -> bool:
    return all(info["images_per_split"][k] for k in ("train", "dev", "test"))


@pytest.mark.slow
def test_openvivqa_builder_reads_the_standin(tmp_path):
    import ml_collections

    from openvivqa_jax.data import datasets, pipeline

    info = _make(tmp_path / "m", 6, "--features")  # train only: the first dev image is image 9
    assert not (tmp_path / "m" / "vlsp2023_dev_data.json").exists()
    for config in ("default", "features"):
        c = ml_collections.ConfigDict(dict(builder="openvivqa", builder_config=config, data_dir=str(tmp_path / "d"),
                                           manual_dir=str(tmp_path / "m"), builder_kwargs={}))
        b = datasets.load_builder(c)
        assert {k: v.num_examples for k, v in b.info.splits.items()} == {"train": info["questions"]["train"]}
        ex = pipeline.load_source(b, "train")[0]
        assert len(ex["ocr"]["text"]) >= 1
        if config == "features":
            assert np.asarray(ex["objects"]["features"]).shape == (50, 2048)
