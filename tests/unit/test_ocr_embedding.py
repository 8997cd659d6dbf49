"""OCR token features (``openvivqa_jax/models/embeddings.py`` ``OcrEmbedding``) against numpy: the ``box_grid``
group is a learned embedding per cell of a fixed 12 x 16 grid, averaged under the token's box by area; the
``order`` group is the slot's sinusoidal code (Vaswani et al. 2017) through a learned projection."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from openvivqa_jax.models.embeddings import (OCR_BOX_GRID, OcrEmbedding, longest_run_match, question_match,
                                             reading_order_code)


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


def _match_by_hand(ocr, pmask, question, qmask):
    """The question-match flag of each OCR token by brute force: its pieces, in order, at some offset of the
    question's valid pieces."""
    out = np.zeros(ocr.shape[:2])
    for b in range(ocr.shape[0]):
        q = [int(t) for t, m in zip(question[b], qmask[b]) if m]
        for n in range(ocr.shape[1]):
            p = [int(t) for t, m in zip(ocr[b, n], pmask[b, n]) if m]
            out[b, n] = bool(p) and any(q[t:t + len(p)] == p for t in range(len(q) - len(p) + 1))
    return out


def test_question_match_flags_tokens_whose_pieces_the_question_holds_in_order():
    """question_match (DrQA's exact-match feature over pieces) against a brute-force search, on hand cases (a
    two-piece word in order and reversed, a word at the question's last piece, a piece only in the padding, an
    empty token) and on random pieces over a small vocabulary."""
    question = np.array([[5, 7, 8, 3, 0, 0], [9, 9, 4, 6, 2, 1]])
    qmask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    ocr = np.array([[[7, 8, 0], [8, 7, 0], [3, 0, 0], [0, 0, 0]], [[1, 0, 0], [4, 6, 2], [6, 4, 0], [0, 0, 0]]])
    pmask = ocr > 0
    got = np.asarray(question_match(jnp.asarray(ocr), jnp.asarray(pmask), jnp.asarray(question), jnp.asarray(qmask)))
    np.testing.assert_array_equal(got, [[1, 0, 1, 0], [1, 1, 0, 0]])
    rng = np.random.default_rng(0)
    question, qmask = rng.integers(1, 5, (8, 10)), np.arange(10)[None] < rng.integers(3, 11, (8, 1))
    ocr = rng.integers(1, 5, (8, 6, 3))
    pmask = np.arange(3)[None, None] < rng.integers(0, 4, (8, 6, 1))
    got = np.asarray(question_match(jnp.asarray(ocr), jnp.asarray(pmask), jnp.asarray(question), jnp.asarray(qmask)))
    want = _match_by_hand(ocr, pmask, question, qmask)
    np.testing.assert_array_equal(got, want)
    assert 0 < want.mean() < 1


def _longest_run_by_hand(ocr, pmask, omask, question, qmask):
    """Every run of OCR tokens consecutive in the list whose pieces lie side by side in the question, enumerated;
    the tokens of the runs covering the most question pieces."""
    out = np.zeros(ocr.shape[:2])
    for b in range(ocr.shape[0]):
        q = [int(x) for x, m in zip(question[b], qmask[b]) if m]
        toks = [[int(x) for x, m in zip(ocr[b, n], pmask[b, n]) if m] if omask[b, n] else []
                for n in range(ocr.shape[1])]
        best, keep = 0, set()
        for i in range(len(toks)):
            for j in range(i, len(toks)):
                if not all(toks[i:j + 1]):
                    break
                joined = sum(toks[i:j + 1], [])
                if any(q[t:t + len(joined)] == joined for t in range(len(q) - len(joined) + 1)):
                    if len(joined) > best:
                        best, keep = len(joined), set(range(i, j + 1))
                    elif len(joined) == best:
                        keep |= set(range(i, j + 1))
        for n in keep:
            out[b, n] = 1
    return out


def test_longest_run_match_keeps_the_whole_name_not_a_word_it_shares():
    """A question naming "uyên linh" in a picture that also writes "uyên" alone on another sign: question_match
    marks both signs, longest_run_match only the two-word name; a tie keeps both; padded OCR slots never count.
    Then random cases against an enumeration of every run (``_longest_run_by_hand``)."""
    # pieces: 1 "cửa", 2 "hàng", 3 "uyên", 4 "linh", 5 "màu", 6 "gì", 7 "bún", 8 "bò"
    question = np.array([[1, 2, 3, 4, 5, 6], [1, 2, 4, 5, 6, 0]])
    qmask = question > 0
    ocr = np.array([[[7], [8], [3], [3], [4], [4]], [[4], [7], [4], [3], [4], [4]]])
    pmask = ocr > 0
    omask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]], bool)
    args = [jnp.asarray(x) for x in (ocr, pmask, omask, question, qmask)]
    np.testing.assert_array_equal(np.asarray(question_match(args[0], args[1], args[3], args[4])),
                                  [[0, 0, 1, 1, 1, 1], [1, 0, 1, 0, 1, 1]])
    got = np.asarray(longest_run_match(*args))
    np.testing.assert_array_equal(got, [[0, 0, 0, 1, 1, 0], [1, 0, 1, 0, 1, 0]])
    rng = np.random.default_rng(1)
    question = rng.integers(1, 4, (64, 9))
    qmask = np.arange(9)[None] < rng.integers(2, 10, (64, 1))
    ocr = rng.integers(1, 4, (64, 7, 2))
    pmask = np.arange(2)[None, None] < rng.integers(0, 3, (64, 7, 1))
    omask = np.arange(7)[None] < rng.integers(0, 8, (64, 1))
    got = np.asarray(longest_run_match(*[jnp.asarray(x) for x in (ocr, pmask, omask, question, qmask)]))
    want = _longest_run_by_hand(ocr, pmask, omask, question, qmask)
    np.testing.assert_array_equal(got, want)
    assert 0 < want.mean() < 1 and (want.sum(1) >= 2).any()


def test_question_match_group_adds_a_learned_vector_to_matched_tokens():
    d = 8
    batch = {"ocr_boxes": jnp.full((1, 2, 4), 0.5, jnp.float32), "ocr_phoc": jnp.ones((1, 2, 4), jnp.float32),
             "ocr_pieces": jnp.asarray([[[3, 0], [4, 0]]]), "ocr_piece_mask": jnp.asarray([[[1, 0], [1, 0]]], bool),
             "question": jnp.asarray([[2, 3, 1]]), "question_mask": jnp.ones((1, 3), bool)}
    emb = OcrEmbedding(vocab_size=10, d_model=d, phoc_dim=4, appearance_dim=3, features=("phoc", "question_match"),
                       dropout=0.0, rngs=nnx.Rngs(0))
    got = np.asarray(emb(batch, None), np.float64)[0]
    w_p, b_p = np.asarray(emb.phoc_proj.kernel[...], np.float64), np.asarray(emb.phoc_proj.bias[...], np.float64)
    w_m = np.asarray(emb.match_proj.kernel[...], np.float64)[0]
    w_b, b_b = np.asarray(emb.box_proj.kernel[...], np.float64), np.asarray(emb.box_proj.bias[...], np.float64)
    box = _ln(np.full(4, 0.5) @ w_b + b_b, emb.box_norm)
    np.testing.assert_allclose(got[0], _ln(np.ones(4) @ w_p + b_p + w_m, emb.feat_norm) + box, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], _ln(np.ones(4) @ w_p + b_p, emb.feat_norm) + box, rtol=1e-4, atol=1e-5)
