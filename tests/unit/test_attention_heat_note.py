"""openvivqa_jax.vqa.inference.attention_heat: the heat map's note names grid cells or regions by the boxes."""

from __future__ import annotations

import numpy as np

from openvivqa_jax.models.cnn import grid_boxes
from openvivqa_jax.vqa.inference import attention_heat


def test_a_grid_is_cells_and_other_boxes_are_regions():
    cells = np.asarray(grid_boxes(2, 3))  # 6 cells tiling the picture
    w = np.array([[0.5, 0.1, 0.1, 0.1, 0.1, 0.1]])
    heat, note = attention_heat(w, cells, np.ones(6, bool), (0, 6), num_ocr=6)
    assert heat.shape == (2, 3) and heat.argmax() == 0
    assert "over 6 image cells" in note and "memory slot j = image cell j + OCR token j" in note
    regions = np.array([[0.0, 0.0, 1.0, 1.0], [0.1, 0.5, 0.3, 0.9], [0.6, 0.2, 0.7, 0.4], [0, 0, 0, 0]], np.float32)
    w = np.array([[0.2, 0.5, 0.3, 0.0]])
    heat, note = attention_heat(w, regions, np.array([True, True, True, False]), (0, 4), num_ocr=4)
    assert heat.shape == (96, 128)
    assert "over 3 image regions" in note and "memory slot j = image region j + OCR token j" in note
