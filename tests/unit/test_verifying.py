"""The region verifier (``openvivqa_jax/models/verifying.py``), its first-piece bias in MLPAG's training and cached
decoding (``openvivqa_jax/models/base.py``), its inputs (the ``question_polarity`` field of
``openvivqa_jax/data/pipeline.py``; the answer pieces' polarity; the statistics set by
``openvivqa_jax/vqa/verifier_start.py``) and its optimizer (``openvivqa_jax/training/state.py``), against numpy and
hand-made inputs."""

from __future__ import annotations

import logging
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from conftest import assert_reads_only_object_features, random_batch, tiny_model_config
from openvivqa_jax.config_check import ConfigError, check_config
from openvivqa_jax.models import build_model
from openvivqa_jax.models.verifying import (TEXT_REGION_SHARE, RegionVerifier, answer_piece_polarity, region_verifier,
                                            text_region_share)
from openvivqa_jax.training.state import counter_optimizer, freeze_params, frozen_param_regex, verifier_rate


def _np(x):
    return np.asarray(x, np.float64)


def _randomized(v: RegionVerifier, seed: int) -> RegionVerifier:
    """``v`` with every parameter drawn at random (the detectors start at 0, which would test nothing)."""
    rng = np.random.default_rng(seed)
    for name in ("detector", "detector_bias", "gate", "input_mean", "answer_polarity"):
        p = getattr(v, name)
        p[...] = jnp.asarray(rng.standard_normal(p[...].shape), jnp.float32)
    v.input_std[...] = jnp.asarray(rng.random(v.input_std[...].shape) + 0.5, jnp.float32)
    return v


def _numpy_bias(v: RegionVerifier, feats, boxes, mask, q, qm, polarity):
    """The module doc's formula in numpy."""
    x = (np.concatenate([feats, boxes], -1) - _np(v.input_mean[...])) / _np(v.input_std[...])
    h = np.maximum(x @ _np(v.w1.kernel[...]) + _np(v.w1.bias[...]), 0)
    w = qm.astype(np.float64) / qm.sum(1, keepdims=True)
    det = np.einsum("bl,blh->bh", w, _np(v.detector[...])[q])
    b = (w * _np(v.detector_bias[...])[q]).sum(1) - 3.0
    s = 1 / (1 + np.exp(-(np.einsum("brh,bh->br", h, det) + b[:, None])))
    e = 1 - np.prod(np.where(mask, 1 - s, 1.0), axis=1)
    g = 1 / (1 + np.exp(-(w * _np(v.gate[...])[q]).sum(1)))
    return (0.5 * g * polarity * np.log(e / (1 - e)))[:, None] * _np(v.answer_polarity[...])[None]


def test_bias_is_the_noisy_or_logit_times_polarity_gate_and_piece_polarity():
    rng = np.random.default_rng(0)
    v = _randomized(RegionVerifier(feature_dim=5, vocab_size=12, hidden_dim=8, rngs=nnx.Rngs(0)), 1)
    feats = rng.standard_normal((3, 6, 5)).astype(np.float32)
    boxes = rng.random((3, 6, 4)).astype(np.float32)
    mask = rng.random((3, 6)) < 0.7
    mask[:, 0] = True
    q = rng.integers(0, 12, (3, 4)).astype(np.int32)
    qm = np.arange(4)[None] < np.array([[2], [4], [3]])
    pol = np.array([1.0, -1.0, 1.0], np.float32)
    got = np.asarray(v(feats, boxes, mask, q, qm, pol))
    np.testing.assert_allclose(got, _numpy_bias(v, feats, boxes, mask, q, qm, pol), rtol=2e-4, atol=1e-5)
    # a negated question gets the opposite bias, and a masked region changes nothing
    np.testing.assert_allclose(np.asarray(v(feats, boxes, mask, q, qm, -pol)), -got, rtol=1e-6)
    moved = feats.copy()
    moved[~mask] += 5.0
    np.testing.assert_allclose(np.asarray(v(moved, boxes, mask, q, qm, pol)), got, rtol=1e-6)


def test_a_question_that_asks_about_the_written_words_mixes_in_whether_it_names_an_ocr_token():
    from openvivqa_jax.models.verifying import TEXT_GAIN

    rng = np.random.default_rng(3)
    v = _randomized(RegionVerifier(feature_dim=5, vocab_size=12, hidden_dim=8, rngs=nnx.Rngs(0), ocr_tokens=True), 4)
    v.text_weight[...] = jnp.asarray(rng.standard_normal(12), jnp.float32)
    feats = rng.standard_normal((4, 6, 5)).astype(np.float32)
    boxes = rng.random((4, 6, 4)).astype(np.float32)
    mask = rng.random((4, 6)) < 0.7
    mask[:, 0] = True
    q = rng.integers(0, 12, (4, 4)).astype(np.int32)
    qm = np.arange(4)[None] < np.array([[2], [4], [3], [4]])
    pol = np.array([1.0, -1.0, 1.0, -1.0], np.float32)
    # picture 0 writes a word the question names; 1 one it does not; 2 names one only in a padded slot; 3 none
    match = np.array([[0, 1, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0]], np.float32)
    tmask = np.array([[True, True, False], [True, True, True], [True, True, False], [False, False, False]])
    got = np.asarray(v(feats, boxes, mask, q, qm, pol, match, tmask))
    # numpy: the regions' existence, read back from the bias without OCR tokens, mixed with 1, 0, 0, 0
    regions_only = _numpy_bias(v, feats, boxes, mask, q, qm, pol)
    w = qm.astype(np.float64) / qm.sum(1, keepdims=True)
    pi = 1 / (1 + np.exp(-(TEXT_GAIN * (w * _np(v.text_weight[...])[q]).sum(1) - 4.0)))
    g = 1 / (1 + np.exp(-(w * _np(v.gate[...])[q]).sum(1)))
    pv = _np(v.answer_polarity[...])
    k = int(np.argmax(np.abs(pv)))
    e_regions = 1 / (1 + np.exp(-regions_only[:, k] / (0.5 * g * pol * pv[k])))
    e = np.clip(pi * np.array([1.0, 0.0, 0.0, 0.0]) + (1 - pi) * e_regions, 1e-6, 1 - 1e-6)
    want = (0.5 * g * pol * np.log(e / (1 - e)))[:, None] * pv[None]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-5)
    # a question worded as about the text (large text weights) follows the match, whatever the regions say
    v.text_weight[...] = jnp.full((12,), 2.0, jnp.float32)
    yes = np.ones(4, np.float32)
    one = np.zeros((4, 3), np.float32)
    one[:, 1] = 1.0
    named = np.asarray(v(feats, boxes, mask, q, qm, yes, one, np.ones((4, 3), bool)))
    unnamed = np.asarray(v(feats, boxes, mask, q, qm, yes, np.zeros((4, 3), np.float32), np.ones((4, 3), bool)))
    assert np.all(named[:, k] * pv[k] > 0) and np.all(unnamed[:, k] * pv[k] < 0)
    with pytest.raises(ValueError, match="ocr_tokens"):
        v(feats, boxes, mask, q, qm, pol)


def test_mlpag_gives_its_verifier_the_question_match_of_the_ocr_tokens():
    cfg = tiny_model_config("mlpag")
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 5
    cfg.model.verifier.enabled = True
    cfg.model.verifier.ocr_tokens = True
    model = build_model(cfg.model, 40, seed=0)
    _randomized(model.verifier, 2)
    model.verifier.text_weight[...] = jnp.full((40,), 0.5, jnp.float32)
    batch = random_batch(cfg, 40, batch=2)
    batch["question_polarity"] = np.array([1.0, 1.0], np.float32)
    # token 0 of each picture is the question's pieces 1-2, the others pieces that the question does not hold
    q = np.asarray(batch["question"]).copy()
    q[:, :4] = [[5, 6, 7, 8], [9, 10, 11, 12]]
    q[q == 30] = 31  # piece 30, the other tokens' only piece, is in no question
    batch["question"] = q
    batch["question_mask"] = np.ones_like(q, bool)
    pieces = np.zeros_like(np.asarray(batch["ocr_pieces"]))
    pm = np.zeros(pieces.shape, bool)
    pieces[:, :, 0] = 30
    pm[:, :, 0] = True
    pieces[:, 0, :2] = [[6, 7], [10, 11]]
    pm[:, 0, :2] = True
    batch["ocr_pieces"], batch["ocr_piece_mask"] = pieces, pm
    batch["ocr_mask"] = np.ones(pieces.shape[:2], bool)
    enc = model.encode(batch)
    match = np.zeros(pieces.shape[:2], np.float32)
    match[:, 0] = 1.0
    scored = np.asarray(batch["region_mask"], bool) & (_numpy_text_share(
        batch["region_boxes"], batch["ocr_boxes"], batch["ocr_mask"]) < TEXT_REGION_SHARE)
    want = np.asarray(model.verifier(batch["region_features"], batch["region_boxes"], scored,
                                     batch["question"], batch["question_mask"], batch["question_polarity"],
                                     match, np.asarray(batch["ocr_mask"]).astype(bool)))
    np.testing.assert_allclose(np.asarray(enc["first_logit_bias"]), want, rtol=1e-5, atol=1e-6)
    unmatched = np.asarray(model.verifier(batch["region_features"], batch["region_boxes"], scored,
                                          batch["question"], batch["question_mask"], batch["question_polarity"],
                                          np.zeros_like(match), batch["ocr_mask"]))
    assert np.abs(want - unmatched).max() > 1e-2
    # the checkpoint of a verifier without OCR tokens has no text parameters, so it still restores
    assert not hasattr(_mlpag(True)[1].verifier, "text_weight")


def _numpy_text_share(boxes, text_boxes, text_mask):
    """The reference of ``text_region_share``, one region and one token at a time."""
    boxes, text_boxes, text_mask = np.asarray(boxes), np.asarray(text_boxes), np.asarray(text_mask, bool)
    out = np.zeros(boxes.shape[:2], np.float64)
    for b in range(boxes.shape[0]):
        for r, (x0, y0, x1, y1) in enumerate(boxes[b].astype(np.float64)):
            area = max(x1 - x0, 0.0) * max(y1 - y0, 0.0)
            for t, (u0, v0, u1, v1) in enumerate(text_boxes[b].astype(np.float64)):
                if text_mask[b, t] and area > 0:
                    inter = max(min(x1, u1) - max(x0, u0), 0.0) * max(min(y1, v1) - max(y0, v0), 0.0)
                    out[b, r] = max(out[b, r], inter / area)
    return out


def test_text_region_share_is_the_largest_share_of_a_region_inside_one_ocr_token():
    text = np.array([[[0.2, 0.2, 0.6, 0.4], [0.6, 0.2, 1.0, 0.4], [0.0, 0.0, 1.0, 1.0]]], np.float32)
    text_mask = np.array([[True, True, False]])  # the third token, covering everything, is padding
    boxes = np.array([[[0.3, 0.25, 0.35, 0.35],  # a letter inside the first word: 1
                       [0.1, 0.1, 0.7, 0.5],  # a sign around the first word: 0.08 / 0.24
                       [0.5, 0.2, 0.7, 0.4],  # half in each word: the larger share, not their sum
                       [0.8, 0.8, 0.9, 0.9],  # outside every word: 0
                       [0.3, 0.3, 0.3, 0.35]]], np.float32)  # no area: 0
    got = np.asarray(text_region_share(jnp.asarray(boxes), jnp.asarray(text), jnp.asarray(text_mask)))
    np.testing.assert_allclose(got, [[1.0, 0.08 / 0.24, 0.5, 0.0, 0.0]], rtol=1e-5, atol=1e-6)
    rng = np.random.default_rng(3)
    lo = rng.uniform(0, 0.7, (3, 9, 2))
    boxes = np.concatenate([lo, lo + rng.uniform(0, 0.3, (3, 9, 2))], -1).astype(np.float32)
    lo = rng.uniform(0, 0.6, (3, 4, 2))
    text = np.concatenate([lo, lo + rng.uniform(0.1, 0.4, (3, 4, 2))], -1).astype(np.float32)
    text_mask = rng.random((3, 4)) < 0.7
    got = np.asarray(text_region_share(jnp.asarray(boxes), jnp.asarray(text), jnp.asarray(text_mask)))
    np.testing.assert_allclose(got, _numpy_text_share(boxes, text, text_mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ocr_tokens", [True, False])
def test_mlpag_verifier_scores_no_region_inside_an_ocr_token_when_it_reads_them(ocr_tokens):
    cfg = tiny_model_config("mlpag")
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 5
    cfg.model.verifier.enabled = True
    cfg.model.verifier.ocr_tokens = ocr_tokens
    model = build_model(cfg.model, 40, seed=0)
    _randomized(model.verifier, 4)
    batch = random_batch(cfg, 40, batch=2)
    batch["question_polarity"] = np.array([1.0, -1.0], np.float32)
    boxes = np.tile(np.array([[0.1, 0.1, 0.3, 0.3], [0.5, 0.5, 0.7, 0.9], [0.6, 0.1, 0.9, 0.3],
                              [0.0, 0.6, 0.2, 0.8], [0.3, 0.3, 0.5, 0.5]], np.float32), (2, 1, 1))
    batch["region_boxes"], batch["region_mask"] = boxes, np.ones(boxes.shape[:2], bool)
    text = np.zeros(np.asarray(batch["ocr_boxes"]).shape, np.float32)
    text[:, 0] = [0.55, 0.05, 0.95, 0.35]  # region 2 is a word's letters; region 4 only touches it
    batch["ocr_boxes"] = text
    batch["ocr_mask"] = np.zeros(text.shape[:2], bool)
    batch["ocr_mask"][:, 0] = True
    bias = np.asarray(model.encode(batch)["first_logit_bias"])
    args = [batch[k] for k in ("region_features", "region_boxes", "region_mask", "question", "question_mask",
                               "question_polarity")]
    text_args = ()
    if ocr_tokens:
        from openvivqa_jax.models.mlpag import question_match
        text_args = (question_match(batch["ocr_pieces"], batch["ocr_piece_mask"], batch["question"],
                                    batch["question_mask"]), batch["ocr_mask"])
    without_letters = args.copy()
    without_letters[2] = np.array([[True, True, False, True, True]] * 2)
    whole = np.asarray(model.verifier(*args, *text_args))
    skipped = np.asarray(model.verifier(*without_letters, *text_args))
    assert np.abs(whole - skipped).max() > 1e-3  # the letters' region moves the answer when it is scored
    np.testing.assert_allclose(bias, skipped if ocr_tokens else whole, rtol=1e-5, atol=1e-6)


def test_answer_pieces_polarity_is_read_from_whole_word_pieces():
    pieces = ["<pad>", "\u2581yes", "\u2581no", "\u2581có", "\u2581không", "\u2581đúng", "\u2581sai", "\u2581một",
              "yes", "\u2581Yes"]
    tok = types.SimpleNamespace(vocab_size=len(pieces), id_to_piece=lambda i: pieces[i])
    # "yes" without the word-start mark is the end of another word, not an answer
    np.testing.assert_array_equal(answer_piece_polarity(tok), [0, 1, -1, 1, -1, 1, -1, 0, 0, 1])


def _mlpag(verifier: bool, seed: int = 0):
    cfg = tiny_model_config("mlpag")
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 5
    cfg.model.verifier.enabled = verifier
    return cfg, build_model(cfg.model, 40, seed=seed)


def test_mlpag_adds_the_bias_to_the_first_piece_in_training_and_in_cached_decoding():
    cfg, model = _mlpag(True)
    _randomized(model.verifier, 2)
    batch = random_batch(cfg, 40, batch=2)
    batch["question_polarity"] = np.array([1.0, -1.0], np.float32)
    enc = model.encode(batch)
    bias = np.asarray(model.verifier(batch["region_features"], batch["region_boxes"], batch["region_mask"],
                                     batch["question"], batch["question_mask"].astype(bool),
                                     batch["question_polarity"]))
    np.testing.assert_allclose(np.asarray(enc["first_logit_bias"]), bias, rtol=1e-6)
    assert np.abs(bias).max() > 1e-3
    with_bias = np.asarray(model.decode_train(enc, batch["decoder_in"]))
    without = np.asarray(model.decode_train(dict(enc, first_logit_bias=None), batch["decoder_in"]))
    V = bias.shape[1]
    np.testing.assert_allclose(with_bias[:, 0, :V] - without[:, 0, :V], bias, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(with_bias[:, 0, V:], without[:, 0, V:])  # the OCR slots
    np.testing.assert_array_equal(with_bias[:, 1:], without[:, 1:])  # later pieces
    # cached decoding: step 0 as the first position of teacher forcing, step 1 without the bias
    dec = model.prepare_decode(enc)
    cache = model.init_cache(2, batch["decoder_in"].shape[1])
    first, cache = model.decode_step(dec, jnp.asarray(batch["decoder_in"][:, 0]), jnp.int32(0), cache)
    np.testing.assert_allclose(np.asarray(first), with_bias[:, 0], rtol=1e-4, atol=1e-4)
    second, _ = model.decode_step(dec, jnp.asarray(batch["decoder_in"][:, 1]), jnp.int32(1), cache)
    np.testing.assert_allclose(np.asarray(second), with_bias[:, 1], rtol=1e-4, atol=1e-4)


def test_verifier_is_made_last_and_off_by_default():
    cfg, off = _mlpag(False)
    _, on = _mlpag(True)
    assert off.verifier is None
    p_off = {"/".join(map(str, k)): np.asarray(v.get_value() if hasattr(v, "get_value") else v.value)
             for k, v in nnx.to_flat_state(nnx.state(off, nnx.Param))}
    p_on = {"/".join(map(str, k)): np.asarray(v.get_value() if hasattr(v, "get_value") else v.value)
            for k, v in nnx.to_flat_state(nnx.state(on, nnx.Param))}
    assert {k for k in p_on if not k.startswith("verifier/")} == set(p_off)
    for k, v in p_off.items():  # the other parameters are those of the model without it, for a seed
        np.testing.assert_array_equal(p_on[k], v, err_msg=k)


def test_verifier_trains_at_its_own_constant_rate_and_keeps_what_is_set():
    cfg, model = _mlpag(True)
    cfg.model.verifier.learning_rate = 0.25
    _, params = nnx.split(model, nnx.Param)
    tx = freeze_params(counter_optimizer(optax.sgd(0.0), params, cfg), params, frozen_param_regex(cfg))
    grads = jax.tree.map(lambda p: jnp.full_like(p, -3.0), params)
    updates, _ = tx.update(grads, tx.init(params), params)
    flat = {"/".join(str(k) for k in path): v for path, v in nnx.to_flat_state(updates)}
    seen = set()
    for path, v in flat.items():
        v = np.asarray(v.get_value() if hasattr(v, "get_value") else v.value)
        parts = path.split("/")
        if parts[0] == "verifier":
            seen.add(parts[1])
        if parts[0] == "verifier" and parts[1] in ("w1", "detector", "detector_bias", "gate"):
            np.testing.assert_allclose(v, 0.25, rtol=1e-4, err_msg=path)  # Adam's first step: lr * sign(-g)
        else:
            assert np.all(v == 0), path  # frozen, or the model's own optimizer that moves nothing here
    assert seen == {"input_mean", "input_std", "answer_polarity", "w1", "detector", "detector_bias", "gate"}


def test_verifier_rate_is_constant_then_falls_by_a_half_cosine_to_zero_at_the_last_step():
    cfg, _ = _mlpag(True)
    cfg.model.verifier.learning_rate = 0.2
    cfg.train.num_train_steps = 1000
    assert verifier_rate(cfg) == 0.2  # decay_start 1 (the default): a plain constant, as before
    cfg.model.verifier.decay_start = 0.6
    rate = verifier_rate(cfg)
    for step in (0, 300, 599, 600, 700, 800, 900, 1000):
        want = 0.2 if step <= 600 else 0.1 * (1 + math.cos(math.pi * (step - 600) / 400))
        np.testing.assert_allclose(float(rate(step)), want, rtol=1e-5, atol=1e-7, err_msg=str(step))
    assert float(rate(800)) == pytest.approx(0.1)  # half way down the fall, half the rate
    # with the steps not yet known, a schedule all the same (the optimizer state has one structure either way)
    cfg.train.num_train_steps = 0
    assert callable(verifier_rate(cfg)) and float(verifier_rate(cfg)(5000)) == pytest.approx(0.2)
    cfg.model.verifier.decay_start = 1.5
    with pytest.raises(ValueError, match="decay_start"):
        verifier_rate(cfg)
    with pytest.raises(ConfigError, match="model.verifier.decay_start"):
        check_config(cfg)


def test_verifier_with_a_falling_rate_moves_its_detectors_by_the_scheduled_rate():
    cfg, model = _mlpag(True)
    cfg.model.verifier.learning_rate = 0.25
    cfg.model.verifier.decay_start = 0.5
    cfg.train.num_train_steps = 10
    _, params = nnx.split(model, nnx.Param)
    tx = freeze_params(counter_optimizer(optax.sgd(0.0), params, cfg), params, frozen_param_regex(cfg))
    grads = jax.tree.map(lambda p: jnp.full_like(p, -3.0), params)
    opt_state = tx.init(params)
    moved = []
    for _ in range(10):
        updates, opt_state = tx.update(grads, opt_state, params)
        moved.append(float(np.asarray(updates["verifier"]["gate"][...])[0]))
    # Adam with a constant gradient moves each step by the rate; the rate at steps 0..9
    want = [0.25 if k <= 5 else 0.125 * (1 + math.cos(math.pi * (k - 5) / 5)) for k in range(10)]
    np.testing.assert_allclose(moved, want, rtol=1e-4, atol=1e-6)


def test_config_check_and_constructor_name_a_verifier_without_regions():
    cfg = tiny_model_config("mlpag")
    cfg.model.verifier.enabled = True
    cfg.model.vision.kind = "cnn"
    with pytest.raises(ConfigError, match="model.verifier.enabled"):
        check_config(cfg)
    with pytest.raises(ValueError, match="model.verifier"):
        region_verifier(cfg.model, feature_dim=4, vocab_size=10, rngs=nnx.Rngs(0))
    cfg = tiny_model_config("m4c")  # a model whose answer decoder the verifier does not reach
    cfg.model.verifier.enabled = True
    with pytest.raises(ConfigError, match="model.verifier.enabled"):
        check_config(cfg)


def test_the_input_pipeline_gives_each_question_its_polarity(tmp_path):
    from openvivqa_jax.data import pipeline
    from openvivqa_jax.text.tokenizer import train_sentencepiece

    tok = train_sentencepiece(["có hình màu đỏ nào không", "is there a red shape"] * 20,
                              str(tmp_path / "spm.model"), 300)
    cfg = tiny_model_config("mlpag")
    cfg.model.vision.kind = "proposals"
    pre = pipeline.Preprocessor(cfg, tok)
    rec = types.SimpleNamespace(question="is there no red shape ?", answers=["no"])
    out = {}
    pre._question_extras(rec, out)
    assert "question_polarity" not in out  # off by default
    cfg.model.verifier.enabled = True
    pre = pipeline.Preprocessor(cfg, tok)
    for question, want in (("is there no red shape ?", -1.0), ("có hình màu đỏ nào không ?", 1.0),
                           ("không có hình màu đỏ nào , đúng không ?", -1.0)):
        out = {}
        pre._question_extras(types.SimpleNamespace(question=question, answers=["có"]), out)
        assert out["question_polarity"] == want and out["question_polarity"].dtype == np.float32, question
    # an English question that names a Vietnamese word: the record's language field, else the detection
    for extra in ({"language": "en"}, {}):
        out = {}
        pre._question_extras(types.SimpleNamespace(question="is the word phở not written in the picture ?",
                                                   answers=["no"], extra=extra), out)
        assert out["question_polarity"] == -1.0, extra
    out = {}  # the field decides: the same words read as Vietnamese have no English cue
    pre._question_extras(types.SimpleNamespace(question="is the word phở not written in the picture ?",
                                               answers=["no"], extra={"language": "vi"}), out)
    assert out["question_polarity"] == 1.0


def test_with_proposals_it_reads_the_objects_own_features_unless_told_all():
    from openvivqa_jax.data.proposals import OBJECT_FEATURE_DIM

    cfg, model = _mlpag(True)
    v = _randomized(model.verifier, 3)
    batch = random_batch(cfg, 40, batch=2)
    args = (batch["region_boxes"], batch["region_mask"], batch["question"], batch["question_mask"].astype(bool),
            np.ones(2, np.float32))
    assert_reads_only_object_features(lambda f: v(f, *args), batch["region_features"])
    cfg.model.verifier.proposal_features = "all"
    wide = build_model(cfg.model, 40, seed=0).verifier
    assert wide.input_mean[...].shape == (batch["region_features"].shape[-1] + 4,)
    assert v.input_mean[...].shape == (OBJECT_FEATURE_DIM + 4,)


def test_the_training_loop_sets_the_read_features_statistics_and_the_pieces_polarity():
    from openvivqa_jax.data.proposals import OBJECT_FEATURE_DIM
    from openvivqa_jax.vqa.verifier_start import set_verifier_inputs

    cfg, model = _mlpag(True)
    params = nnx.state(model, nnx.Param)
    state = types.SimpleNamespace(params=params, replace=lambda params: types.SimpleNamespace(params=params))
    rng = np.random.default_rng(0)
    batch = random_batch(cfg, 40, batch=3)
    batch["region_features"] = (rng.standard_normal(batch["region_features"].shape) * 3 + 1).astype(np.float32)
    batch["region_boxes"] = rng.random(batch["region_boxes"].shape).astype(np.float32)
    batch["region_mask"] = rng.random(batch["region_mask"].shape) < 0.6
    pieces = ["<pad>", "\u2581có", "\u2581sai"] + [f"\u2581w{i}" for i in range(37)]
    tok = types.SimpleNamespace(vocab_size=40, id_to_piece=lambda i: pieces[i])
    out = set_verifier_inputs(state, lambda: batch, tok).params["verifier"]
    m = batch["region_mask"]
    x = np.concatenate([batch["region_features"][..., :OBJECT_FEATURE_DIM], batch["region_boxes"]], -1)[m]
    np.testing.assert_allclose(np.asarray(out["input_mean"][...]), x.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["input_std"][...]), np.maximum(x.std(0), 1e-3), rtol=1e-3, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(out["answer_polarity"][...]), [0, 1, -1] + [0] * 37)


@pytest.mark.parametrize("words, expected", [
    (["có", "sai"], None),
    (["sai"], "no whole piece for an affirming (yes, có, đúng, ...) answer word, so the verifier moves only the "
              "pieces listed above"),
    ([], "no whole piece for an affirming (yes, có, đúng, ...) nor a denying (no, không, sai, ...) answer word, so "
         "the verifier moves no answer"),
])
def test_the_start_line_says_which_answer_words_the_tokenizer_lacks(words, expected, caplog, absl_info):
    from openvivqa_jax.vqa.verifier_start import set_verifier_inputs

    cfg, model = _mlpag(True)
    params = nnx.state(model, nnx.Param)
    state = types.SimpleNamespace(params=params, replace=lambda params: types.SimpleNamespace(params=params))
    batch = random_batch(cfg, 40, batch=3)
    batch["region_mask"][:] = True
    pieces = ["<pad>"] + [f"\u2581{w}" for w in words] + [f"\u2581w{i}" for i in range(39 - len(words))]
    tok = types.SimpleNamespace(vocab_size=40, id_to_piece=lambda i: pieces[i])
    with caplog.at_level(logging.INFO, logger="absl"):
        set_verifier_inputs(state, lambda: batch, tok)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    info = [r.getMessage() for r in caplog.records if "affirming answer pieces" in r.getMessage()]
    assert len(info) == 1 and f"denying {['sai'] if 'sai' in words else 'none'}" in info[0], info
    assert (warnings == []) if expected is None else (len(warnings) == 1 and expected in warnings[0]), warnings


def _start_state(ocr_tokens: bool):
    """A verifier's train state (parameters only) and a batch of 3 questions with 5 proposals each."""
    cfg = tiny_model_config("mlpag")
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 5
    cfg.model.verifier.enabled = True
    cfg.model.verifier.ocr_tokens = ocr_tokens
    params = nnx.state(build_model(cfg.model, 40), nnx.Param)
    state = types.SimpleNamespace(params=params, replace=lambda params: types.SimpleNamespace(params=params))
    return state, random_batch(cfg, 40, batch=3)


def _start(state, batch, caplog) -> None:
    """``set_verifier_inputs`` on ``batch`` with a 40-piece tokenizer, its log lines caught by ``caplog``."""
    from openvivqa_jax.vqa.verifier_start import set_verifier_inputs

    pieces = ["<pad>", "\u2581có", "\u2581sai"] + [f"\u2581w{i}" for i in range(37)]
    tok = types.SimpleNamespace(vocab_size=40, id_to_piece=lambda i: pieces[i])
    with caplog.at_level(logging.INFO, logger="absl"):
        set_verifier_inputs(state, lambda: batch, tok)


@pytest.mark.parametrize("ocr_tokens, has_ocr, warned", [(True, False, True), (True, True, False),
                                                         (False, False, False)])
def test_the_start_warns_when_a_verifier_that_reads_ocr_tokens_is_given_none(ocr_tokens, has_ocr, warned, caplog,
                                                                             absl_info):
    state, batch = _start_state(ocr_tokens)
    batch["region_mask"][:] = True
    batch["ocr_mask"][:] = False
    batch["ocr_mask"][1, 0] = has_ocr  # one token in 3 questions is enough
    _start(state, batch, caplog)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    expected = ["Region verifier: it reads OCR tokens (model.verifier.ocr_tokens), but the 8 training batches "
                "sampled hold none, so questions about written words are answered from the pixels alone; give the "
                "folder an ocr.json, or build it with --config.data.builder_config=detector_tesseract"]
    assert warnings == (expected if warned else []), warnings


def test_the_start_counts_the_regions_it_does_not_score_for_lying_inside_an_ocr_token(caplog, absl_info):
    state, batch = _start_state(True)
    batch["region_mask"][:] = True
    batch["region_mask"][2, 4] = False  # a padded region inside the word counts for nothing
    # regions 0 and 4 of each question lie wholly inside OCR token 0, region 1 half inside, the others outside
    batch["region_boxes"][:] = np.array([[0.1, 0.1, 0.2, 0.2], [0.35, 0.1, 0.45, 0.2], [0.6, 0.6, 0.8, 0.8],
                                         [0.0, 0.5, 0.3, 0.9], [0.25, 0.12, 0.3, 0.18]], np.float32)
    batch["ocr_boxes"][:] = 0.0
    batch["ocr_boxes"][:, 0] = [0.05, 0.05, 0.4, 0.25]
    batch["ocr_mask"][:] = False
    batch["ocr_mask"][:, 0] = True
    _start(state, batch, caplog)
    # 8 batches of 14 valid regions, of which 8 are not scored: regions 0, 1 and 4 of each question but region 4
    # of the last, padded; region 1 has half its box inside, which is the threshold
    assert TEXT_REGION_SHARE == 0.5
    lines = [r.getMessage() for r in caplog.records if "inside an OCR token's box" in r.getMessage()]
    assert lines == ["Region verifier: 64 of the 112 regions of 8 training batches lie at least 50% inside an OCR "
                     "token's box (letters, the labels they are printed on) and are not scored as things"], lines
