"""benchmarks/vision_probe.py: the cell lookup and the ridge classifier on hand-made inputs, and the backbone
of a trained run (--workdir)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import vision_probe  # noqa: E402


def test_cell_features_takes_the_cell_under_the_box_centre():
    grid = np.array([[[[1.0], [2.0]], [[3.0], [4.0]]]])  # (1, gh=2, gw=2, C=1): row 0 = 1, 2; row 1 = 3, 4
    objects = [[{"box": (0.1, 0.6, 0.3, 0.9), "color": "đỏ", "kind": "car"},          # centre (0.2, 0.75)
                {"box": (0.5, 0.0, 0.9, 0.4), "color": "xám", "kind": "stool"}]]      # centre (0.7, 0.2)
    feats, colours, kinds = vision_probe.cell_features(grid, objects)
    assert feats.tolist() == [[3.0], [2.0]]
    assert colours.tolist() == [2, 11]  # đỏ is the 3rd guideline colour, xám the 12th
    assert kinds.tolist() == [0, 4]     # car first, stool last in OBJECT_KINDS


def test_cell_features_prefers_the_paint_point():
    grid = np.array([[[[1.0], [2.0]], [[3.0], [4.0]]]])
    objects = [[{"box": (0.1, 0.1, 0.4, 0.9), "point": (0.3, 0.2), "color": "đỏ", "kind": "umbrella"}]]
    feats, _, kinds = vision_probe.cell_features(grid, objects)
    assert feats.tolist() == [[1.0]] and kinds.tolist() == [3]  # top-left cell, not the centre's bottom-left


def test_paint_point_is_the_centre_of_the_pixels_in_the_colour():
    image = np.zeros((10, 20, 3), np.uint8)
    image[1:3, 4:8] = (215, 25, 30)   # canopy: rows 1-2, columns 4-7
    image[3:10, 5:7] = (60, 60, 60)   # pole
    image[0, 15] = (215, 25, 30)      # same colour outside the box: ignored
    x, y = vision_probe.paint_point(image, (0.2, 0.1, 0.4, 1.0), (215, 25, 30))
    assert (x, y) == pytest.approx(((5.5 + 0.5) / 20, (1.5 + 0.5) / 10))
    assert vision_probe.paint_point(image, (0.2, 0.1, 0.4, 1.0), (1, 2, 3)) == pytest.approx((0.3, 0.55))


def test_ridge_accuracy_on_separable_and_swapped_labels():
    f_train = np.array([[-1.0], [-1.2], [1.0], [1.2]])
    y_train = np.array([0, 0, 1, 1])
    f_test = np.array([[-2.0], [2.0], [-0.5]])
    assert vision_probe.ridge_accuracy(f_train, y_train, f_test, np.array([0, 1, 0]), 2) == 1.0
    assert vision_probe.ridge_accuracy(f_train, y_train, f_test, np.array([1, 0, 0]), 2) == 1 / 3


@pytest.mark.slow
def test_workdir_probe_reads_the_trained_backbone_and_its_settings(tmp_path_factory, tmp_path):
    """``--workdir``: the probed backbone is the run's trained CNN (its kernels equal the best checkpoint's,
    not a fresh initialization), with the run's channels and image size in place of the flags'."""
    import argparse

    from conftest import build_tiny_tfds, load_config, run_main_cli

    data = build_tiny_tfds(tmp_path_factory)
    wd = tmp_path / "run"
    done = run_main_cli("--config=configs/tiny.py", f"--workdir={wd}", f"--config.data.data_dir={data}",
                        "--config.train.num_train_steps=10", "--config.evals.test_no_ocr.enabled=False")
    assert done.returncode == 0, done.stderr[-2000:]
    args = argparse.Namespace(channels=(32, 64), image_size=(64, 48), seed=0, pixel_features=0, space_to_depth=1,
                              workdir=str(wd))
    cnn, info = vision_probe._backbone(args)
    cfg = load_config("configs/tiny.py")
    assert info["channels"] == list(cfg.model.vision.cnn_channels) and info["image_size"] == list(cfg.data.image_size)
    assert info["trained_step"] == 10
    from openvivqa_jax.vqa.inference import load_for_inference

    run = load_for_inference(str(wd))
    from flax import nnx

    trained = nnx.merge(run.graphdef, run.params).vision.backbone.convs[0].kernel.value
    np.testing.assert_array_equal(np.asarray(cnn.convs[0].kernel.value), np.asarray(trained))
    fresh, _ = vision_probe._backbone(argparse.Namespace(**{**vars(args), "workdir": None,
                                                            "channels": tuple(cfg.model.vision.cnn_channels)}))
    assert not np.allclose(np.asarray(fresh.convs[0].kernel.value), np.asarray(trained))
