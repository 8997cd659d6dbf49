"""OCR token features (``openvivqa_jax/models/embeddings.py`` ``OcrEmbedding``) against numpy: the ``box_grid``
group is a learned embedding per cell of a fixed 12 x 16 grid, averaged under the token's box by area; the
``order`` group is the slot's sinusoidal code (Vaswani et al. 2017) through a learned projection."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from openvivqa_jax.models.embeddings import OCR_BOX_GRID, OcrEmbedding, reading_order_code


def _ln(x, ln, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    scale, bias = np.asarray(ln.scale[...], np.float64), np.asarray(ln.bias[...], np.float64)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * scale + bias


def _cell_weights(box):
    """Area of the box inside each cell of the 12 x 16 grid, by pixel counting on a 1/960 lattice."""
    rows, cols = OCR_BOX_GRID
    n = 960  # divisible by 12 and 16: every cell is a whole number of lattice points
    ys, xs = (np.arange(n) + 0.5) / n, (np.arange(n) + 0.5) / n
    inside = ((xs[None, :] >= box[0]) & (xs[None, :] < box[2]) & (ys[:, None] >= box[1]) & (ys[:, None] < box[3]))
    w = inside.reshape(rows, n // rows, cols, n // cols).sum((1, 3)).reshape(-1).astype(np.float64)
    return w / w.sum()


def test_box_grid_is_the_area_mean_of_cell_embeddings():
    d = 8
    emb = OcrEmbedding(vocab_size=10, d_model=d, phoc_dim=4, appearance_dim=3, features=("box_grid",),
                       dropout=0.0, rngs=nnx.Rngs(0))
    # one cell; two cells of a row equally; a box over 2 x 2 cells, a quarter of each; a wide line of text
    boxes = np.array([[[0, 0, 1 / 16, 1 / 12], [0, 0, 2 / 16, 1 / 12], [1.5 / 16, 2.5 / 12, 3.5 / 16, 4.5 / 12],
                       [0.25, 0.5, 0.75, 0.5 + 1 / 24]]], np.float64)
    batch = {"ocr_boxes": jnp.asarray(boxes, jnp.float32)}
    got = np.asarray(emb(batch, None), np.float64)[0]
    table = np.asarray(emb.grid_proj.kernel[...], np.float64)  # (cells, d): one learned vector per cell
    box_w, box_b = np.asarray(emb.box_proj.kernel[...], np.float64), np.asarray(emb.box_proj.bias[...], np.float64)
    for i, box in enumerate(boxes[0]):
        want = _ln(_cell_weights(box) @ table, emb.feat_norm) + _ln(box @ box_w + box_b, emb.box_norm)
        np.testing.assert_allclose(got[i], want, rtol=1e-4, atol=1e-5)
    # the first two boxes: the second's grid part is the mean of cells 0 and 1
    np.testing.assert_allclose(_cell_weights(boxes[0, 1])[:2], [0.5, 0.5])


def test_unknown_ocr_feature_group_is_named():
    with pytest.raises(ValueError, match=r"unknown OCR feature groups \['boxgrid'\]; known: .*box_grid"):
        OcrEmbedding(vocab_size=10, d_model=8, phoc_dim=4, appearance_dim=3, features=("phoc", "boxgrid"),
                     rngs=nnx.Rngs(0))


def test_reading_order_code_is_the_transformer_sinusoid():
    n, d = 6, 8
    got = np.asarray(reading_order_code(n, d), np.float64)
    for k in range(n):
        for i in range(d // 2):
            angle = k / 10000 ** (2 * i / d)
            np.testing.assert_allclose(got[k, 2 * i:2 * i + 2], [np.sin(angle), np.cos(angle)], atol=1e-6)
    # slot k + 1's code is one fixed linear map (a rotation per frequency) of slot k's, for every k
    rot = np.zeros((d, d))
    for i in range(d // 2):
        w = 1 / 10000 ** (2 * i / d)
        rot[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[np.cos(w), -np.sin(w)], [np.sin(w), np.cos(w)]]
    np.testing.assert_allclose(got[:-1] @ rot, got[1:], atol=1e-6)
    with pytest.raises(ValueError, match="even width, got 7"):
        reading_order_code(3, 7)


def test_order_group_tells_equal_tokens_apart_by_slot():
    d = 8
    boxes = jnp.asarray(np.tile([[0.1, 0.2, 0.3, 0.25]], (1, 3, 1)), jnp.float32)  # three tokens, one box
    phoc = jnp.ones((1, 3, 4), jnp.float32)
    batch = {"ocr_boxes": boxes, "ocr_phoc": phoc}
    plain = OcrEmbedding(vocab_size=10, d_model=d, phoc_dim=4, appearance_dim=3, features=("phoc",), dropout=0.0,
                         rngs=nnx.Rngs(0))
    ordered = OcrEmbedding(vocab_size=10, d_model=d, phoc_dim=4, appearance_dim=3, features=("phoc", "order"),
                           dropout=0.0, rngs=nnx.Rngs(0))
    same = np.asarray(plain(batch, None))[0]
    np.testing.assert_allclose(same[0], same[1], atol=1e-6)
    got = np.asarray(ordered(batch, None), np.float64)[0]
    w_p, b_p = np.asarray(ordered.phoc_proj.kernel[...], np.float64), np.asarray(ordered.phoc_proj.bias[...], np.float64)
    w_o = np.asarray(ordered.order_proj.kernel[...], np.float64)
    w_b, b_b = np.asarray(ordered.box_proj.kernel[...], np.float64), np.asarray(ordered.box_proj.bias[...], np.float64)
    box = np.asarray(boxes[0, 0], np.float64)
    for k in range(3):
        angle = k / 10000 ** (np.arange(0, d, 2) / d)
        code = np.stack([np.sin(angle), np.cos(angle)], 1).reshape(-1)
        want = _ln(np.ones(4) @ w_p + b_p + code @ w_o, ordered.feat_norm) + _ln(box @ w_b + b_b, ordered.box_norm)
        np.testing.assert_allclose(got[k], want, rtol=1e-4, atol=1e-5)
    assert np.abs(got[0] - got[1]).max() > 1e-3


def test_order_group_with_an_odd_width_is_named():
    with pytest.raises(ValueError, match=r"'order' \(a sinusoidal code\) needs an even model.d_model, got 7"):
        OcrEmbedding(vocab_size=10, d_model=7, phoc_dim=4, appearance_dim=3, features=("phoc", "order"),
                     rngs=nnx.Rngs(0))
