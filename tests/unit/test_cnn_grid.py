"""SmallCNN's grid options: space-to-depth of the last feature map and the cells' own pooled pixels."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from openvivqa_jax.models.layers import SmallCNN


def _image(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((2, h, w, 3)).astype(np.float32)


def test_space_to_depth_stacks_each_block_of_cells():
    x = _image(32, 48)
    plain = np.asarray(SmallCNN((8, 16), rngs=nnx.Rngs(0))(x))  # (2, 8, 12, 16)
    s2d = SmallCNN((8, 16), rngs=nnx.Rngs(0), space_to_depth=2)
    y = np.asarray(s2d(x))
    assert y.shape == (2, 4, 6, 64) and s2d.out_dim == 64 and s2d.stride == 8
    # Cell (1, 2) holds the plain map's cells (2..3, 4..5), channel block (dy * 2 + dx).
    for dy in range(2):
        for dx in range(2):
            k = dy * 2 + dx
            np.testing.assert_array_equal(y[:, 1, 2, k * 16:(k + 1) * 16], plain[:, 2 + dy, 4 + dx])


def test_pixel_features_are_the_cells_pooled_pixels():
    x = _image(32, 48, seed=1)
    cnn = SmallCNN((8, 16), rngs=nnx.Rngs(0), pixel_features=2)  # stride 4: each cell 2x2 blocks of 2x2 pixels
    y = np.asarray(cnn(x))
    assert y.shape == (2, 8, 12, 16 + 12) and cnn.out_dim == 28
    plain = np.asarray(SmallCNN((8, 16), rngs=nnx.Rngs(0))(x))
    np.testing.assert_array_equal(y[..., :16], plain)
    # Independent: cell (3, 5) covers pixels rows 12..15, cols 20..23; block (dy, dx) is rows 12+2dy..,
    # cols 20+2dx..; its mean in [0, 1] mapped to [-1, 1], channel (dy * 2 + dx) * 3 + rgb.
    for dy in range(2):
        for dx in range(2):
            block = x[:, 12 + 2 * dy:14 + 2 * dy, 20 + 2 * dx:22 + 2 * dx, :]
            want = block.mean((1, 2)) * 2 - 1
            k = (dy * 2 + dx) * 3
            np.testing.assert_allclose(y[:, 3, 5, 16 + k:16 + k + 3], want, rtol=0, atol=1e-6)


def test_pixel_features_must_divide_the_stride():
    with pytest.raises(ValueError, match="divisor of the grid stride 4"):
        SmallCNN((8, 16), rngs=nnx.Rngs(0), pixel_features=3)
    with pytest.raises(ValueError, match="space_to_depth must be >= 1"):
        SmallCNN((8, 16), rngs=nnx.Rngs(0), space_to_depth=0)


def test_space_to_depth_needs_a_divisible_map():
    cnn = SmallCNN((8,), rngs=nnx.Rngs(0), space_to_depth=2)
    with pytest.raises(ValueError, match="not divisible by space_to_depth=2"):
        cnn(_image(6, 10))  # feature map 3x5
