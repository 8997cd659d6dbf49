"""Class-free region proposals (openvivqa_jax.data.proposals): segments, boxes and features of pictures whose
answer is known by construction, the pooled features against a per-pixel loop, padding, ordering and errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from openvivqa_jax.data import images
from openvivqa_jax.data.proposals import (POOL, PROPOSAL_FEATURE_DIM, box_pixels, padded_proposals,
                                          region_proposals)

BG, RED, BLUE = (200, 200, 200), (220, 30, 30), (20, 40, 210)


def _scene():
    """A 64x48 grey picture with a red 20x10 rectangle at (x 4-24, y 6-16) and a blue 6x8 one at (40-46, 30-38)."""
    a = np.zeros((48, 64, 3), np.uint8)
    a[:] = BG
    a[6:16, 4:24] = RED
    a[30:38, 40:46] = BLUE
    return a


def _loop_pool(pixels: np.ndarray) -> np.ndarray:
    """Per-bin means by plain loops, bins ``floor(k * n / POOL)`` to ``ceil((k + 1) * n / POOL)``."""
    h, w = pixels.shape[:2]
    out = []
    for r in range(POOL):
        for c in range(POOL):
            y0, y1 = (r * h) // POOL, -(-((r + 1) * h) // POOL)
            x0, x1 = (c * w) // POOL, -(-((c + 1) * w) // POOL)
            out.append(pixels[y0:y1, x0:x1].reshape(-1, pixels.shape[2]).mean(0))
    return np.concatenate(out)


def test_segments_of_flat_shapes_have_their_boxes_colours_areas_and_shapes():
    a = _scene()
    feats, boxes, n = region_proposals(a, 8)
    assert n == 3 and feats.shape == (3, PROPOSAL_FEATURE_DIM) and boxes.shape == (3, 4)
    # Largest first: the background (3072 - 200 - 48 pixels), the red, the blue.
    np.testing.assert_allclose(boxes[0], [0, 0, 1, 1])
    np.testing.assert_allclose(boxes[1], [4 / 64, 6 / 48, 24 / 64, 16 / 48], atol=1e-7)
    np.testing.assert_allclose(boxes[2], [40 / 64, 30 / 48, 46 / 64, 38 / 48], atol=1e-7)
    for i, (colour, area) in enumerate([(BG, 3072 - 248), (RED, 200), (BLUE, 48)]):
        np.testing.assert_allclose(feats[i, :3], np.array(colour) / 255.0, atol=1e-6)  # the segment's own mean
        np.testing.assert_allclose(feats[i, 3:6], 0.0, atol=1e-3)  # flat: no spread
        np.testing.assert_allclose(feats[i, 6], np.sqrt(area / 3072), atol=1e-6)
    # The rectangles fill their boxes; the background's box has two holes.
    np.testing.assert_allclose(feats[1:, 7:7 + POOL * POOL], 1.0)
    assert feats[0, 7:7 + POOL * POOL].min() < 1.0
    np.testing.assert_allclose(feats[1, 23:71], np.tile(np.array(RED) / 255.0, POOL * POOL), atol=1e-6)


def test_pooled_box_and_context_equal_a_per_pixel_loop():
    rng = np.random.default_rng(0)
    a = _scene()
    a[20:27, 10:31] = rng.integers(0, 255, (7, 21, 3))  # a noisy patch: many segments, odd sizes
    feats, boxes, n = region_proposals(a, 200, min_size=1, scale=1.0)
    h, w = a.shape[:2]
    px = a.astype(np.float64) / 255.0
    for f, b in zip(feats, boxes):
        x0, y0, x1, y1 = np.rint(b * [w, h, w, h]).astype(int)
        bh, bw = y1 - y0, x1 - x0
        np.testing.assert_allclose(f[23:71], _loop_pool(px[y0:y1, x0:x1]), atol=1e-5)
        cy0, cy1 = max(0, y0 - bh // 2), min(h, y1 + (bh + 1) // 2)
        cx0, cx1 = max(0, x0 - bw // 2), min(w, x1 + (bw + 1) // 2)
        np.testing.assert_allclose(f[71:], _loop_pool(px[cy0:cy1, cx0:cx1]), atol=1e-5)


def test_only_the_largest_segments_are_kept_and_counted():
    a = _scene()
    feats, boxes, n = region_proposals(a, 2)
    assert n == 3 and len(feats) == 2
    np.testing.assert_allclose(feats[1, :3], np.array(RED) / 255.0, atol=1e-6)


def _png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return buf.getvalue()


def test_padded_proposals_resize_pad_and_mask():
    a = np.repeat(np.repeat(_scene(), 2, 0), 2, 1)  # 128x96: halved back to the scene by area averaging
    feats, boxes, mask, n = padded_proposals(_png(a), "'x'", width=64, height=48, max_pixels=10 ** 7,
                                             num_regions=5, min_size=8, scale=400.0)
    ref_f, ref_b, ref_n = region_proposals(_scene(), 5)
    assert n == ref_n == 3 and mask.tolist() == [True, True, True, False, False]
    np.testing.assert_array_equal(feats[:3], ref_f)
    np.testing.assert_array_equal(boxes[:3], ref_b)
    assert not feats[3:].any() and not boxes[3:].any()


def test_bad_pictures_and_arguments_are_one_line_errors():
    with pytest.raises(images.ImageDecodeError, match="'pic-7'"):
        padded_proposals(b"not an image", "'pic-7'", width=64, height=48, max_pixels=10 ** 7, num_regions=4,
                         min_size=8, scale=400.0)
    with pytest.raises(ValueError, match=r"\(48, 64\) float"):
        region_proposals(np.zeros((48, 64), np.float32), 4)
    with pytest.raises(ValueError, match="max_regions"):
        region_proposals(_scene(), 0)


def test_recall_benchmark_finds_objects_only_in_the_segments_it_keeps(capsys):
    """benchmarks/proposals.py: with every segment kept nearly every object has one inside its box; with the
    two largest (road, buildings, sky: never inside an object's box) none has."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    import proposals as bench

    many = bench.main(["--images", "4", "--num_regions", "400"])
    two = bench.main(["--images", "4", "--num_regions", "2"])
    assert many["objects"] == two["objects"] > 0
    assert many["objects_found"] >= 0.9 and two["objects_found"] == 0.0
    assert many["kept_area_mean"] == pytest.approx(1.0) and two["kept_area_mean"] < 1.0


def test_box_pixels_pool_each_box_like_a_per_pixel_loop():
    a = _scene()
    rng = np.random.default_rng(1)
    a[20:28, 8:30] = rng.integers(0, 255, (8, 22, 3))
    boxes = np.array([[4 / 64, 6 / 48, 24 / 64, 16 / 48],  # exactly the red rectangle
                      [0.13, 0.41, 0.47, 0.59],  # the noisy patch, on fractional edges
                      [0.99, 0.99, 1.0, 1.0]], np.float32)  # under one pixel: widened to the last pixel
    got = box_pixels(a, boxes)
    assert got.shape == (3, 48)
    np.testing.assert_allclose(got[0], np.tile(np.array(RED) / 255.0, POOL * POOL), atol=1e-6)
    px = a.astype(np.float64) / 255.0
    x0, y0, x1, y1 = int(0.13 * 64), int(0.41 * 48), int(np.ceil(0.47 * 64)), int(np.ceil(0.59 * 48))
    np.testing.assert_allclose(got[1], _loop_pool(px[y0:y1, x0:x1]), atol=1e-5)
    np.testing.assert_allclose(got[2], np.tile(px[47, 63], POOL * POOL), atol=1e-6)
    assert box_pixels(a, np.zeros((0, 4))).shape == (0, 48)
