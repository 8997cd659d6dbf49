"""benchmarks/vision_probe.py: the cell lookup and the ridge classifier on hand-made inputs."""

from __future__ import annotations

import os
import sys

import numpy as np

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


def test_ridge_accuracy_on_separable_and_swapped_labels():
    f_train = np.array([[-1.0], [-1.2], [1.0], [1.2]])
    y_train = np.array([0, 0, 1, 1])
    f_test = np.array([[-2.0], [2.0], [-0.5]])
    assert vision_probe.ridge_accuracy(f_train, y_train, f_test, np.array([0, 1, 0]), 2) == 1.0
    assert vision_probe.ridge_accuracy(f_train, y_train, f_test, np.array([1, 0, 0]), 2) == 1 / 3
