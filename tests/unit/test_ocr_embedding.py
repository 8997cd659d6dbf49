"""OCR token features (``openvivqa_jax/models/embeddings.py`` ``OcrEmbedding``) against numpy: the ``box_grid``
group is a learned embedding per cell of a fixed 12 x 16 grid, averaged under the token's box by area."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from openvivqa_jax.models.embeddings import OCR_BOX_GRID, OcrEmbedding


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
