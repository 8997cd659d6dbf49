"""Counting and comparing with the region verifier's scores (openvivqa_jax/models/comparing.py), checked against
brute-force enumeration and a numpy transcription of the module doc's formulas."""

from __future__ import annotations

import itertools
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from conftest import random_batch, tiny_model_config
from openvivqa_jax.config_check import ConfigError, check_config
from openvivqa_jax.models import build_model, comparing
from openvivqa_jax.models.verifying import ROUTE_GAIN, ROUTE_START, SAME_GAIN, RegionVerifier


def _np(x):
    return np.asarray(x, np.float64)


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _verifier_config(**verifier):
    """The tiny MLPAG config over 5 proposals with its verifier on and ``verifier`` set."""
    cfg = tiny_model_config("mlpag")
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 5
    cfg.model.verifier.enabled = True
    for key, value in verifier.items():
        cfg.model.verifier[key] = value
    return cfg


def _start_inputs(cfg):
    """``(state, batch)`` for ``set_verifier_inputs``: the model's parameters and a batch of all-valid regions."""
    params = nnx.state(build_model(cfg.model, 40), nnx.Param)
    state = types.SimpleNamespace(params=params, replace=lambda params: types.SimpleNamespace(params=params))
    batch = random_batch(cfg, 40, batch=3)
    batch["region_mask"][:] = True
    return state, batch


def _enumerated_counts(s, m, k):
    """P(count = n), n < k, and P(count >= k) by summing over every on/off assignment of the valid regions."""
    out = np.zeros(k + 1)
    valid = np.nonzero(m)[0]
    for bits in itertools.product([0, 1], repeat=len(valid)):
        p = np.prod([s[i] if b else 1 - s[i] for i, b in zip(valid, bits)])
        out[min(sum(bits), k)] += p
    return out


def test_count_distribution_equals_enumeration_over_the_valid_regions():
    rng = np.random.default_rng(0)
    s = rng.random((4, 7)).astype(np.float32)
    m = rng.random((4, 7)) < 0.7
    m[3] = False  # no valid region: the count is 0
    got = np.asarray(comparing.count_distribution(jnp.asarray(s), jnp.asarray(m), 3))
    for b in range(4):
        np.testing.assert_allclose(got[b], _enumerated_counts(s[b].astype(np.float64), m[b], 3), atol=1e-6)
    np.testing.assert_allclose(got[3], [1, 0, 0, 0])
    with pytest.raises(ValueError, match="max_count must be >= 1"):
        comparing.count_distribution(jnp.asarray(s), jnp.asarray(m), 0)


def test_greater_probability_is_the_sum_over_pairs_of_counts():
    rng = np.random.default_rng(1)
    p_a = rng.dirichlet(np.ones(5), 3)
    p_b = rng.dirichlet(np.ones(5), 3)
    want = [sum(p_a[b, i] * p_b[b, j] for i in range(5) for j in range(5) if i > j) for b in range(3)]
    np.testing.assert_allclose(np.asarray(comparing.greater_probability(jnp.asarray(p_a), jnp.asarray(p_b))), want,
                               rtol=1e-6)
    # certain counts: 2 > 1, not 1 > 2
    two, one = np.eye(5)[[2]], np.eye(5)[[1]]
    assert float(comparing.greater_probability(jnp.asarray(two), jnp.asarray(one))[0]) == 1.0
    assert float(comparing.greater_probability(jnp.asarray(one), jnp.asarray(two))[0]) == 0.0


def test_question_segments_cut_at_the_first_split_piece():
    split = np.zeros(10, np.float32)
    split[7] = 1.0  # "than"
    q = np.array([[1, 2, 7, 3, 4, 0], [1, 2, 3, 4, 0, 0], [7, 5, 7, 6, 0, 0]], np.int32)
    qm = q > 0
    first, second = (np.asarray(a) for a in comparing.question_segments(jnp.asarray(q), jnp.asarray(qm),
                                                                        jnp.asarray(split)))
    np.testing.assert_array_equal(first, [[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(second, [[0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0], [0, 1, 0, 1, 0, 0]])


def test_the_second_thing_ends_at_an_end_piece_after_the_split():
    # "are the circle and the square the same colour ?": 7 "and" splits, 8 "same" ends the second thing
    roles = np.zeros(12, np.float32)
    roles[7], roles[8] = 1.0, 2.0
    q = np.array([[1, 2, 7, 3, 4, 3, 8, 9, 10], [1, 8, 2, 7, 3, 4, 0, 0, 0], [1, 8, 2, 3, 0, 0, 0, 0, 0]], np.int32)
    qm = q > 0
    first, second = (np.asarray(a) for a in comparing.question_segments(jnp.asarray(q), jnp.asarray(qm),
                                                                        jnp.asarray(roles)))
    np.testing.assert_array_equal(first, [[1, 1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0, 0],
                                          [1, 1, 1, 1, 0, 0, 0, 0, 0]])
    # an end piece before the split, or in a question without one, ends nothing
    np.testing.assert_array_equal(second, [[0, 0, 0, 1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0, 0],
                                           [0, 0, 0, 0, 0, 0, 0, 0, 0]])


def test_soft_pointer_and_same_logit():
    rng = np.random.default_rng(2)
    s = rng.random((2, 4))
    m = np.array([[1, 1, 0, 1], [1, 0, 0, 0]], bool)
    x = rng.standard_normal((2, 4, 3))
    w = np.where(m, s / (1 - s), 0)
    want = np.einsum("br,brd->bd", w / w.sum(1, keepdims=True), x)
    got = np.asarray(comparing.soft_pointer(jnp.asarray(s, jnp.float32), jnp.asarray(m), jnp.asarray(x, jnp.float32)))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    a, b, f = rng.standard_normal((3, 2, 3))
    f = np.abs(f)
    np.testing.assert_allclose(
        np.asarray(comparing.same_logit(*(jnp.asarray(v, jnp.float32) for v in (a, b, f)), jnp.float32(0.5))),
        0.5 - (f * (a - b) ** 2).mean(-1), rtol=1e-5)


def test_piece_tables_are_read_from_whole_word_pieces():
    pieces = ["<pad>", "\u2581than", "\u2581hơn", "\u2581và", "\u2581fewer", "\u2581khác", "than", "\u2581three",
              "\u2581ba", "\u25817", "\u2581twenty", "\u2581mươi", "\u2581Một"]
    tok = types.SimpleNamespace(vocab_size=len(pieces), id_to_piece=lambda i: pieces[i])
    split, reverse = comparing.question_piece_roles(tok)
    np.testing.assert_array_equal(split, [0, 1, 1, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0])  # khác also ends the second
    np.testing.assert_array_equal(reverse, [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    # "mươi" (tens) is not a count by itself; twenty is above max_count 10
    np.testing.assert_array_equal(comparing.answer_piece_numbers(tok, 10), [0] * 7 + [3, 3, 7, 0, 0, 1])


def _randomized(seed: int, vocab: int = 12, feature_dim: int = 5) -> RegionVerifier:
    v = RegionVerifier(feature_dim=feature_dim, vocab_size=vocab, hidden_dim=8, rngs=nnx.Rngs(0), compare=True,
                       max_count=3)
    rng = np.random.default_rng(seed)
    for name in ("detector", "detector_bias", "gate", "input_mean", "count_gate", "route", "attribute_weight"):
        p = getattr(v, name)
        p[...] = jnp.asarray(rng.standard_normal(p[...].shape), jnp.float32)
    v.input_std[...] = jnp.asarray(rng.random(v.input_std[...].shape) + 0.5, jnp.float32)
    v.answer_polarity[...] = jnp.asarray(rng.integers(-1, 2, vocab), jnp.float32)
    v.same_bias[...] = jnp.float32(0.3)
    v.split_piece[...] = jnp.zeros((vocab,), jnp.float32).at[1].set(1.0).at[8].set(2.0)  # 8 ends the second
    v.reverse_piece[...] = jnp.zeros((vocab,), jnp.float32).at[2].set(1.0)
    v.answer_number[...] = jnp.asarray([0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0][:vocab], jnp.float32)
    return v


def _numpy_compare_bias(v, feats, boxes, mask, q, qm, pol):
    """The module docs' formulas (verifying.py and comparing.py) in numpy, with the counts enumerated."""
    x = (np.concatenate([feats, boxes], -1) - _np(v.input_mean[...])) / _np(v.input_std[...])
    h = np.maximum(x @ _np(v.w1.kernel[...]) + _np(v.w1.bias[...]), 0)

    def scores(weights):
        w = weights / np.maximum(weights.sum(1, keepdims=True), 1)
        det = np.einsum("bl,blh->bh", w, _np(v.detector[...])[q])
        b = (w * _np(v.detector_bias[...])[q]).sum(1) - 3.0
        return np.where(mask, _sigmoid(np.einsum("brh,bh->br", h, det) + b[:, None]), 0.0)

    qmf = qm.astype(np.float64)
    mean = qmf / qmf.sum(1, keepdims=True)
    s = scores(qmf)
    e = 1 - np.prod(1 - s, axis=1)
    out = np.zeros((len(q), v.answer_polarity[...].shape[0]))
    for b in range(len(q)):
        words = [int(t) for t, m in zip(q[b], qm[b]) if m]
        cut = words.index(1) if 1 in words else len(words)
        first = np.array([[m and i < cut and t != 1 for i, (t, m) in enumerate(zip(q[b], qm[b]))]], np.float64)
        end = next((i for i, t in enumerate(words) if i > cut and t == 8), len(words))
        second = np.array([[m and cut < i < end for i, (t, m) in enumerate(zip(q[b], qm[b]))]], np.float64)
        s_a = scores(np.repeat(first, len(q), 0))[b]
        sb = scores(np.repeat(second, len(q), 0))[b] if second.sum() else np.zeros_like(s_a)
        p_a, p_b = _enumerated_counts(s_a, mask[b], 3), _enumerated_counts(sb, mask[b], 3)
        rev = words.count(2) % 2 == 1
        gt = sum(p_a[i] * p_b[j] for i in range(4) for j in range(4) if i > j)
        lt = sum(p_a[i] * p_b[j] for i in range(4) for j in range(4) if i < j)
        more = lt if rev else gt
        wts = np.log1p(np.exp((mean[b][:, None] * _np(v.attribute_weight[...])[q[b]]).sum(0)))
        odds_a, odds_b = np.where(mask[b], s_a / (1 - s_a), 0), np.where(mask[b], sb / (1 - sb), 0)
        xa = (odds_a[:, None] * x[b]).sum(0) / (odds_a.sum() + 1e-6)
        xb = (odds_b[:, None] * x[b]).sum(0) / (odds_b.sum() + 1e-6)
        same = SAME_GAIN * (0.3 - (wts * (xa - xb) ** 2).mean())
        same = -same if rev else same
        r = ROUTE_GAIN * (mean[b][:, None] * _np(v.route[...])[q[b]]).sum(0) + np.array(ROUTE_START)
        r = np.exp(r - r.max()) / np.exp(r - r.max()).sum() if second.sum() else np.array([1.0, 0.0, 0.0])
        p = r[0] * e[b] + r[1] * more + r[2] * _sigmoid(same)
        logit = np.log(p / (1 - p))
        g = _sigmoid((mean[b] * _np(v.gate[...])[q[b]]).sum())
        out[b] = 0.5 * g * pol[b] * logit * _np(v.answer_polarity[...])
        c = _sigmoid((mean[b] * _np(v.count_gate[...])[q[b]]).sum())
        for piece, n in enumerate(_np(v.answer_number[...]).astype(int)):
            if 1 <= n <= 3:
                out[b, piece] += c * max(np.log(p_a[n]), -20.0)
    return out


def test_compare_bias_matches_the_formulas():
    rng = np.random.default_rng(3)
    v = _randomized(4)
    v.answer_polarity[...] = v.answer_polarity[...].at[3:7].set(0.0)  # the number pieces: no yes/no bias
    feats = rng.standard_normal((4, 5, 5)).astype(np.float32)
    boxes = rng.random((4, 5, 4)).astype(np.float32)
    mask = rng.random((4, 5)) < 0.8
    mask[:, 0] = True
    # piece 1 splits, piece 2 reverses; one plain question, one comparison, one reversed, one with two reversals
    q = np.array([[5, 6, 7, 8, 0], [5, 6, 1, 7, 8], [2, 6, 1, 7, 0], [2, 2, 1, 9, 0]], np.int32)
    qm = q > 0
    pol = np.array([1.0, -1.0, 1.0, 1.0], np.float32)
    got = np.asarray(v(feats, boxes, mask, q, qm, pol))
    np.testing.assert_allclose(got, _numpy_compare_bias(v, feats, boxes, mask, q, qm, pol), rtol=1e-3, atol=1e-4)
    # a piece numbering 4 (above max_count 3) gets no bias; those numbering 1-3 get their count's log-probability
    np.testing.assert_array_equal(got[:, 6], 0.0)
    assert np.all(got[:, 3:6] < 0)
    # a question naming one thing (no split piece) is answered by its existence alone, as without compare
    logit, gate = v.existence(feats, boxes, mask, q, qm)
    alone = 0.5 * np.asarray(gate) * pol * np.asarray(logit)
    yes_no = _np(v.answer_polarity[...]) != 0
    np.testing.assert_allclose(got[0, yes_no], alone[0] * _np(v.answer_polarity[...])[yes_no], rtol=1e-4)


def test_without_compare_the_verifier_has_none_of_its_parameters():
    cfg = _verifier_config()
    assert not hasattr(build_model(cfg.model, 40).verifier, "route")
    cfg.model.verifier.compare = True
    cfg.model.verifier.max_count = 4
    v = build_model(cfg.model, 40).verifier
    assert v.route[...].shape == (40, 3) and v.max_count == 4


@pytest.mark.parametrize("key, value, message", [
    ("compare", 1, "True or False"),
    ("max_count", 0, ">= 1"),
])
def test_config_check_names_bad_compare_settings(key, value, message):
    cfg = _verifier_config()
    cfg.model.verifier = ml_collections.ConfigDict({**cfg.model.verifier.to_dict(), key: value})
    with pytest.raises(ConfigError, match=f"model.verifier.{key}.*{message}"):
        check_config(cfg)


def test_the_training_loop_sets_the_comparison_and_number_pieces():
    from openvivqa_jax.vqa.verifier_start import set_verifier_inputs

    state, batch = _start_inputs(_verifier_config(compare=True))
    pieces = ["<pad>", "\u2581than", "\u2581ít", "\u2581two", "\u2581sáu"] + [f"\u2581w{i}" for i in range(35)]
    tok = types.SimpleNamespace(vocab_size=40, id_to_piece=lambda i: pieces[i])
    out = set_verifier_inputs(state, lambda: batch, tok).params["verifier"]
    np.testing.assert_array_equal(np.asarray(out["split_piece"][...])[:5], [0, 1, 0, 0, 0])
    np.testing.assert_array_equal(np.asarray(out["reverse_piece"][...])[:5], [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(np.asarray(out["answer_number"][...])[:5], [0, 0, 0, 2, 6])



def test_the_start_warns_when_the_tokenizer_splits_the_comparison_and_number_words(caplog, absl_info):
    import logging

    from openvivqa_jax.vqa.verifier_start import set_verifier_inputs

    state, batch = _start_inputs(_verifier_config(compare=True))
    for whole, expected in ((["than", "two"], []), (["th", "two"], ["compares no two things"]),
                            (["t", "w"], ["compares no two things", "counts nothing"])):
        pieces = ["<pad>"] + [f"\u2581{w}" for w in whole] + [f"\u2581w{i}" for i in range(39 - len(whole))]
        tok = types.SimpleNamespace(vocab_size=40, id_to_piece=lambda i, pieces=pieces: pieces[i])
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="absl"):
            set_verifier_inputs(state, lambda: batch, tok)
        warned = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
        for text in expected:
            assert text in warned, (whole, warned)
        assert ("counts nothing" in warned) == ("counts nothing" in expected)
        assert ("compares no two things" in warned) == ("compares no two things" in expected)


def test_relation_terms_point_at_the_most_object_like_other_region_and_its_side():
    # region 0 is named; region 1 lies to its left, region 2 to its right, region 3 is padding
    boxes = np.array([[[0.5, 0.4, 0.7, 0.6], [0.1, 0.4, 0.3, 0.6], [0.8, 0.4, 0.9, 0.6], [0.0, 0.0, 0.1, 0.1]]],
                     np.float32)
    s = np.array([[0.9, 0.1, 0.2, 0.9]], np.float32)
    mask = np.array([[True, True, True, False]])
    x = np.arange(12, dtype=np.float32).reshape(1, 4, 3)
    obj = np.array([[0.5, 2.0, -1.0, 9.0]], np.float32)
    left = np.array([[-1.0, 0.0]], np.float32)
    pointed, some = (np.asarray(a, np.float64) for a in comparing.relation_terms(
        *(jnp.asarray(a) for a in (s, mask, boxes, x, obj, left))))
    centre = 0.5 * (boxes[0, :, :2] + boxes[0, :, 2:])
    odds = s[0, :3] / (1 - s[0, :3])
    anchor = (centre[:3] * odds[:, None]).sum(0) / odds.sum()
    w = (1 - s[0, :3]) / (1 + np.exp(-obj[0, :3]))
    w /= w.sum()
    np.testing.assert_allclose(pointed, [(w[:, None] * x[0, :3]).sum(0)], rtol=1e-4)
    d = w @ centre[:3] - anchor
    cone = d @ left[0] - abs(left[0, 0] * d[1] - left[0, 1] * d[0])
    np.testing.assert_allclose(some, [comparing.RELATION_GAIN * cone], rtol=1e-4)
    # the left region is the most object-like other one, and it lies to the left: something is there
    assert w[1] > 0.7 and some[0] > 0
    right = -left
    assert float(comparing.relation_terms(*(jnp.asarray(a) for a in (s, mask, boxes, x, obj, right)))[1][0]) < 0


@pytest.mark.parametrize("offset, side, something", [
    ((-0.05, 0.45), (-1.0, 0.0), False),  # mostly below and a little left: not left of it
    ((-0.05, 0.45), (0.0, 1.0), True),  # ... but below it
    ((0.40, -0.06), (0.0, -1.0), False),  # right and a little higher: not above it
    ((0.40, -0.06), (1.0, 0.0), True),
    ((-0.30, 0.29), (-2.0, 0.0), True),  # just inside the 45-degree cone, whatever the direction's length
    ((-0.29, 0.30), (-2.0, 0.0), False),  # just outside it
])
def test_relation_side_is_a_45_degree_cone_around_the_direction(offset, side, something):
    # one named region at the centre, one other region offset from it; the direction u is the side word's
    boxes = np.array([[[0.45, 0.45, 0.55, 0.55],
                       [0.45 + offset[0], 0.45 + offset[1], 0.55 + offset[0], 0.55 + offset[1]]]], np.float32)
    s = np.array([[0.999, 0.001]], np.float32)
    mask = np.ones((1, 2), bool)
    x = np.eye(2, dtype=np.float32)[None]
    obj = np.zeros((1, 2), np.float32)
    u = np.asarray([side], np.float32)
    _, some = comparing.relation_terms(*(jnp.asarray(a) for a in (s, mask, boxes, x, obj, u)))
    # the pointers put almost all weight on their own region, so the offset is nearly the drawn one
    dx, dy = offset
    along, across = dx * side[0] + dy * side[1], side[0] * dy - side[1] * dx
    want = comparing.RELATION_GAIN * (along - abs(across))
    assert (float(some[0]) > 0) == something
    np.testing.assert_allclose(float(some[0]), want, rtol=0.05, atol=0.05)


def test_relation_pointer_does_not_return_to_the_named_thing_however_large_its_objectness():
    # the named region (0, s = 0.99) has grown a huge objectness; the other region a plain one. A plain softmax of
    # a_r + log(1 - s_r) would put 0.99 of the weight back on the named thing; sigmoid(a_r) caps it at 1.
    boxes = np.array([[[0.5, 0.4, 0.7, 0.6], [0.1, 0.4, 0.3, 0.6]]], np.float32)
    s = np.array([[0.99, 0.05]], np.float32)
    mask = np.array([[True, True]])
    x = np.array([[[1.0, 0.0], [0.0, 1.0]]], np.float32)
    obj = np.array([[40.0, 0.0]], np.float32)
    u = np.zeros((1, 2), np.float32)
    pointed, _ = comparing.relation_terms(*(jnp.asarray(a) for a in (s, mask, boxes, x, obj, u)))
    w_named = 0.01 / (0.01 + 0.95 * 0.5)
    np.testing.assert_allclose(np.asarray(pointed)[0], [w_named, 1 - w_named], rtol=1e-3)
    assert float(pointed[0, 1]) > 0.97


def test_mlpag_with_relate_appends_one_memory_token_and_biases_the_nothing_pieces():
    cfg = _verifier_config()
    batch = random_batch(cfg, 40, batch=2)
    batch["question_polarity"] = np.array([1.0, -1.0], np.float32)
    # question 0 has the side word (piece 3) followed by other words, question 1 none
    q = np.where(np.asarray(batch["question"]) == 3, 4, np.asarray(batch["question"]))
    q[0, :3] = [5, 3, 6]
    batch["question"], batch["question_mask"] = q, np.ones_like(q, bool)
    plain = build_model(cfg.model, 40).encode(batch)
    cfg.model.verifier.relate = True
    model = build_model(cfg.model, 40)
    model.verifier.nothing_piece[...] = jnp.zeros((40,), jnp.float32).at[7].set(1.0)
    model.verifier.relation_piece[...] = jnp.zeros((40,), jnp.float32).at[3].set(1.0)
    model.verifier.direction[...] = jnp.asarray(np.random.default_rng(0).standard_normal((40, 2)), jnp.float32)
    out = model.encode(batch)
    assert out["memory"].shape[1] == plain["memory"].shape[1] + 1 and bool(out["memory_mask"][:, -1].all())
    regions = (batch["region_features"], batch["region_boxes"], batch["region_mask"], batch["question"],
               batch["question_mask"].astype(bool))
    tok, nothing = model.verifier.related(*regions)
    np.testing.assert_allclose(np.asarray(out["memory"][:, -1]), np.asarray(tok[:, 0]), rtol=1e-5)
    yes_no = np.asarray(model.verifier(*regions, batch["question_polarity"]))
    np.testing.assert_allclose(np.asarray(out["first_logit_bias"]), yes_no + np.asarray(nothing), rtol=1e-5,
                               atol=1e-6)
    assert np.all(np.asarray(nothing)[:, [i for i in range(40) if i != 7]] == 0)
    # a question without a side word asks about no side: its "nothing" piece is not moved
    assert float(nothing[0, 7]) != 0 and float(nothing[1, 7]) == 0


def test_relation_names_its_thing_by_the_words_after_the_side_word():
    cfg = _verifier_config(relate=True)
    model = build_model(cfg.model, 40)
    v = model.verifier
    rng = np.random.default_rng(1)
    v.detector[...] = jnp.asarray(rng.standard_normal(v.detector[...].shape), jnp.float32)
    v.relation_piece[...] = jnp.zeros((40,), jnp.float32).at[3].set(1.0)
    batch = random_batch(cfg, 40, batch=2)
    feats, boxes, mask = batch["region_features"], batch["region_boxes"], batch["region_mask"]
    # "what is LEFT of the red circle": piece 3 is the side word; the thing is pieces 7, 8, 9 after it
    q = np.array([[5, 6, 3, 7, 8, 9], [5, 6, 7, 8, 9, 0]], np.int32)
    qm = q > 0
    x = v._inputs(jnp.asarray(feats), jnp.asarray(boxes))
    h = jax.nn.relu(v.w1(x))
    after = np.array([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 0]], np.float32)  # no side word: the whole question
    want = comparing.relation_terms(v._scores(h, mask, q, after), mask, boxes, x,
                                    h @ v.object_weight[...], jnp.zeros((2, 2)))[0]
    tok, _ = v.related(feats, boxes, mask, q, qm)
    np.testing.assert_allclose(np.asarray(tok[:, 0]), np.asarray(
        v.relation_norm(v.relation_proj(want))), rtol=1e-5, atol=1e-6)
    # scored by the whole first question instead, the token would differ
    whole = comparing.relation_terms(v._scores(h, mask, q, qm.astype(np.float32)), mask, boxes, x,
                                     h @ v.object_weight[...], jnp.zeros((2, 2)))[0]
    assert not np.allclose(np.asarray(want[0]), np.asarray(whole[0]), rtol=1e-3)
