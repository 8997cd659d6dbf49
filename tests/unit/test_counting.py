"""The region counter (``openvivqa_jax/models/counting.py``), its training stream
(``openvivqa_jax/vqa/counting_stream.py``) and its optimizer (``openvivqa_jax/training/state.py``) against numpy
and hand-made inputs: the soft count (masked regions ignored), the stopped gradient of the memory token, the
stream loss, the statistics, the merged iterator's state, the constant learning rate and the frozen statistics."""

from __future__ import annotations

import contextlib
import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from conftest import assert_reads_only_object_features, random_batch, tiny_model_config
from openvivqa_jax.config_check import ConfigError, check_config
from openvivqa_jax.data.records import Record
from openvivqa_jax.models import build_model
from openvivqa_jax.models.counting import RegionCounter, region_counter
from openvivqa_jax.training.state import counter_optimizer, freeze_params, frozen_param_regex
from openvivqa_jax.vqa.counting_stream import WithCountingStream, counting_indices, input_statistics
from openvivqa_jax.vqa.train import forward_with_intermediates


@contextlib.contextmanager
def absltest_logs():
    """The WARNING lines absl logs inside the block."""
    got: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: got.append(record.getMessage())
    root = logging.getLogger("absl")
    root.addHandler(handler)
    try:
        yield got
    finally:
        root.removeHandler(handler)


def _np(x):
    return np.asarray(x, np.float64)


def _counter(f=5, vocab=12, hidden=8, seed=0):
    return RegionCounter(feature_dim=f, vocab_size=vocab, hidden_dim=hidden, d_model=16, max_count=4,
                         rngs=nnx.Rngs(seed))


def _inputs(rng, b=3, r=6, f=5, lq=4, vocab=12):
    feats = rng.standard_normal((b, r, f)).astype(np.float32)
    boxes = rng.random((b, r, 4)).astype(np.float32)
    mask = rng.random((b, r)) < 0.7
    q = rng.integers(0, vocab, (b, lq)).astype(np.int32)
    qm = np.arange(lq)[None] < rng.integers(1, lq + 1, (b, 1))
    return feats, boxes, mask, q, qm


def _numpy_counts(c: RegionCounter, feats, boxes, mask, q, qm):
    x = (np.concatenate([feats, boxes], -1) - _np(c.input_mean[...])) / _np(c.input_std[...])
    w = qm[..., None].astype(np.float64)
    q_add = (_np(c.q_add[...])[q] * w).sum(1) / w.sum(1)
    q_mul = (_np(c.q_mul[...])[q] * w).sum(1) / w.sum(1)
    h = np.maximum(x @ _np(c.w1.kernel[...]) + _np(c.w1.bias[...]) + q_add[:, None], 0)
    h = np.maximum((h @ _np(c.w2.kernel[...]) + _np(c.w2.bias[...])) * (1 + q_mul[:, None]), 0)
    e = (h @ _np(c.score.kernel[...]) + _np(c.score.bias[...]))[..., 0]
    return np.where(mask, 1 / (1 + np.exp(-e)), 0).sum(1)


def test_soft_count_is_the_filmed_mlp_summed_over_the_valid_regions():
    c = _counter()
    c.input_mean[...] = jnp.linspace(-0.5, 0.5, 9)
    c.input_std[...] = jnp.linspace(0.5, 2.0, 9)
    feats, boxes, mask, q, qm = _inputs(np.random.default_rng(1))
    got = np.asarray(c(feats, boxes, mask, q, qm))
    np.testing.assert_allclose(got, _numpy_counts(c, feats, boxes, mask, q, qm), rtol=1e-5, atol=1e-6)
    # A masked region's features do not matter; the question's padding does not either.
    feats2, q2 = feats.copy(), q.copy()
    feats2[~mask] = 1e3
    q2[~qm] = 0
    np.testing.assert_allclose(np.asarray(c(feats2, boxes, mask, q2, qm)), got, rtol=1e-6)


def test_the_memory_token_passes_no_gradient_to_the_count():
    c = _counter()
    feats, boxes, mask, q, qm = _inputs(np.random.default_rng(2))

    def f(model):
        tok, tok_mask = model.memory_token(model(feats, boxes, mask, q, qm))
        assert tok.shape == (3, 1, 16) and tok_mask.shape == (3, 1) and bool(tok_mask.all())
        return jnp.sum(tok ** 2 * jnp.arange(16))

    grads = nnx.grad(f)(c)
    for name in ("w1", "w2", "score"):
        assert float(jnp.abs(grads[name]["kernel"][...]).max()) == 0.0, name
    for name in ("q_add", "q_mul"):
        assert float(jnp.abs(grads[name][...]).max()) == 0.0, name
    assert float(jnp.abs(grads["token"]["kernel"][...]).max()) > 0


def test_stream_loss_is_huber_against_the_targets_and_exact_counts_rounded():
    c = _counter()
    # Every valid region scores sigmoid(20) ~ 1: the count is the number of valid regions.
    c.score.kernel[...] = jnp.zeros_like(c.score.kernel[...])
    c.score.bias[...] = jnp.full((1,), 20.0)
    rng = np.random.default_rng(3)
    feats, boxes, _, q, qm = _inputs(rng, b=4)
    mask = np.zeros((4, 6), bool)
    for i, n in enumerate([1, 3, 6, 2]):
        mask[i, :n] = True
    targets = np.array([1, 1, 6, 0], np.int32)  # errors 0, 2, 0; the last row has no target
    batch = {"counting_region_features": feats, "counting_region_boxes": boxes, "counting_region_mask": mask,
             "counting_question": q, "counting_question_mask": qm, "counting_count_target": targets}
    loss, exact = c.stream_loss(batch)
    assert float(loss) == pytest.approx((0 + (2 - 0.5) + 0) / 3, abs=1e-5)  # Huber, delta 1
    assert float(exact) == pytest.approx(2 / 3)


def test_region_counter_errors_and_off_by_default():
    cfg = tiny_model_config("mlpag").model
    assert region_counter(cfg, feature_dim=5, vocab_size=10, rngs=nnx.Rngs(0), dtype=jnp.float32) is None
    cfg.counter.weight = -1.0
    with pytest.raises(ValueError, match="model.counter.weight must be >= 0"):
        region_counter(cfg, feature_dim=5, vocab_size=10, rngs=nnx.Rngs(0), dtype=jnp.float32)
    cfg.counter.weight = 1.0
    cfg.vision.kind = "cnn"
    with pytest.raises(ValueError, match="model.vision.kind='cnn' has none"):
        region_counter(cfg, feature_dim=5, vocab_size=10, rngs=nnx.Rngs(0), dtype=jnp.float32)


def test_config_check_names_a_counter_without_regions():
    cfg = tiny_model_config("mlpag")
    cfg.model.counter.weight = 1.0
    cfg.model.vision.kind = "cnn"
    with pytest.raises(ConfigError, match="model.counter.weight=1.0 counts regions"):
        check_config(cfg)
    cfg.model.vision.kind = "proposals"
    cfg.model.counter.batch_size = 0
    with pytest.raises(ConfigError, match="model.counter.batch_size"):
        check_config(cfg)
    cfg = tiny_model_config("m4c")  # an M4C config: naming m4c on MLPAG's lacks M4C's fields (checked first)
    cfg.model.counter.weight = 1.0
    cfg.model.vision.kind = "proposals"
    with pytest.raises(ConfigError, match="model.name='m4c' has no such memory"):
        check_config(cfg)


def test_mlpag_memory_gains_the_count_token_and_sows_the_stream_loss():
    cfg = tiny_model_config("mlpag")
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 5
    batch = random_batch(cfg, 40, batch=2)
    off = build_model(cfg.model, 40, seed=0)
    cfg.model.counter.weight = 0.5
    on = build_model(cfg.model, 40, seed=0)
    m_off = off.encode(batch)["memory"]
    m_on = on.encode(batch)["memory"]
    assert m_on.shape[1] == m_off.shape[1] + 1
    np.testing.assert_allclose(np.asarray(m_on[:, :-1]), np.asarray(m_off), rtol=1e-5, atol=1e-6)
    counts = on.counter(batch["region_features"], batch["region_boxes"], batch["region_mask"], batch["question"],
                        batch["question_mask"])
    np.testing.assert_allclose(np.asarray(m_on[:, -1]), np.asarray(on.counter.memory_token(counts)[0][:, 0]),
                               rtol=1e-5, atol=1e-6)
    stream = {f"counting_{k}": batch[k] for k in ("region_features", "region_boxes", "region_mask", "question",
                                                  "question_mask")}
    stream["counting_count_target"] = np.array([2, 3], np.int32)
    full = dict(batch, **stream)
    _, sown = forward_with_intermediates(on, full, deterministic=False, rngs=nnx.Rngs(dropout=1))
    flat = {str(p[-1]): v for p, v in nnx.to_flat_state(sown)}
    want, _ = on.counter.stream_loss(full)
    got = flat["counting_loss"]
    got = got.get_value() if hasattr(got, "get_value") else got.value
    got = got[0] if isinstance(got, tuple) else got
    assert float(got) == pytest.approx(0.5 * float(want), rel=1e-5)
    assert "counting_exact" in flat


def test_with_objects_features_it_reads_the_segments_own_features_and_their_statistics():
    import types

    from openvivqa_jax.data.proposals import OBJECT_FEATURE_DIM
    from openvivqa_jax.vqa import train as train_mod

    cfg = tiny_model_config("mlpag")
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 5
    cfg.model.counter.weight = 1.0
    wide = build_model(cfg.model, 40, seed=0).counter
    cfg.model.counter.proposal_features = "objects"
    narrow = build_model(cfg.model, 40, seed=0).counter
    batch = random_batch(cfg, 40, batch=2)
    assert wide.input_mean[...].shape == (batch["region_features"].shape[-1] + 4,)
    assert narrow.input_mean[...].shape == (OBJECT_FEATURE_DIM + 4,)
    args = (batch["region_boxes"], batch["region_mask"], batch["question"], batch["question_mask"])
    assert_reads_only_object_features(lambda f: narrow(f, *args), batch["region_features"])
    # the statistics the training loop sets are those of the features it reads, then the box
    model = build_model(cfg.model, 40, seed=0)
    params = nnx.state(model, nnx.Param)
    state = types.SimpleNamespace(params=params, replace=lambda params: types.SimpleNamespace(params=params))
    rng = np.random.default_rng(1)
    batch["region_features"] = (rng.standard_normal(batch["region_features"].shape) * 2 + 3).astype(np.float32)
    batch["region_mask"] = rng.random(batch["region_mask"].shape) < 0.6
    out = train_mod._set_counter_statistics(state, lambda: batch).params["counter"]
    x = np.concatenate([batch["region_features"][..., :OBJECT_FEATURE_DIM], batch["region_boxes"]], -1)
    x = x[batch["region_mask"]]
    np.testing.assert_allclose(np.asarray(out["input_mean"][...]), x.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["input_std"][...]), np.maximum(x.std(0), 1e-3), rtol=1e-3, atol=1e-5)
    cfg.model.counter.proposal_features = "pixels"
    with pytest.raises(ValueError, match="proposal_features must be 'objects' or 'all'"):
        build_model(cfg.model, 40, seed=0)


def test_counter_trains_at_its_own_constant_rate_and_keeps_its_statistics():
    cfg = tiny_model_config("mlpag")
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 5
    cfg.model.counter.weight = 1.0
    cfg.model.counter.learning_rate = 0.25
    model = build_model(cfg.model, 40, seed=0)
    _, params = nnx.split(model, nnx.Param)
    main = optax.sgd(0.0)  # the model's own optimizer here moves nothing
    tx = freeze_params(counter_optimizer(main, params, cfg), params, frozen_param_regex(cfg))
    grads = jax.tree.map(lambda p: jnp.full_like(p, -3.0), params)
    updates, _ = tx.update(grads, tx.init(params), params)
    flat = {"/".join(str(k) for k in path): v for path, v in nnx.to_flat_state(updates)}
    for path, v in flat.items():
        v = np.asarray(v.get_value() if hasattr(v, "get_value") else v.value)
        if path.startswith("counter/input_"):
            assert np.all(v == 0), path  # frozen
        elif path.split("/")[:2] in (["counter", n] for n in ("w1", "w2", "score", "q_add", "q_mul")):
            np.testing.assert_allclose(v, 0.25, rtol=1e-4, err_msg=path)  # Adam's first step: lr * sign(-g)
        else:
            assert np.all(v == 0), path  # the model's own optimizer, the memory token's projection and norm too
    assert {p.split("/")[1] for p in flat if p.startswith("counter/")} == {
        "input_mean", "input_std", "w1", "w2", "score", "q_add", "q_mul", "token", "norm"}


def test_counting_indices_read_the_answers_count():
    def rec(i, q, a):
        return Record(index=i, question_id=f"q{i}", image_id="im", question=q, answers=[a] if a else [], qa_type=1,
                      ocr_texts=[], ocr_boxes=np.zeros((0, 4), np.float32))

    recs = [rec(0, "có bao nhiêu người ?", "có ba người"), rec(1, "người mặc áo màu gì ?", "áo màu đỏ"),
            rec(2, "có mấy chiếc xe máy ?", "có 2 chiếc xe máy"), rec(3, "có bao nhiêu cây dù ?", ""),
            rec(4, "có bao nhiêu người ?", "không có người nào")]
    assert counting_indices(recs, "set/train") == [0, 2]
    with absltest_logs() as logs:
        assert counting_indices(recs[3:], "set/train") == []
    assert any("set/train: no counting question" in m and "among its 2 questions" in m and "counter.weight=0" in m
               for m in logs)


def test_input_statistics_are_over_the_valid_regions_only():
    rng = np.random.default_rng(4)
    draws = []

    def batches():
        b = {"region_features": rng.standard_normal((2, 3, 2)).astype(np.float32),
             "region_boxes": rng.random((2, 3, 4)).astype(np.float32),
             "region_mask": np.array([[True, True, False], [True, False, False]])}
        b["region_features"][~b["region_mask"]] = 1e6
        draws.append(b)
        return b

    mean, std, n = input_statistics(batches, 2)
    rows = np.concatenate([np.concatenate([b["region_features"], b["region_boxes"]], -1)[b["region_mask"]]
                           for b in draws])
    assert n == 6 and rows.shape == (6, 6)
    np.testing.assert_allclose(mean, rows.mean(0), rtol=1e-5)
    np.testing.assert_allclose(std, np.maximum(rows.std(0), 1e-3), rtol=1e-5)


class _FakeIter:
    def __init__(self, start, fields):
        self.i, self.fields = start, fields

    def __next__(self):
        self.i += 1
        return {k: np.full((2,), self.i) for k in self.fields}

    def get_state(self):
        return {"i": self.i}

    def set_state(self, s):
        self.i = s["i"]


def test_with_counting_stream_merges_and_checkpoints_both_iterators():
    fields = ("region_features", "region_boxes", "region_mask", "question", "question_mask", "count_target")
    it = WithCountingStream(_FakeIter(0, ("question", "answer")), _FakeIter(100, fields + ("ocr_phoc",)))
    b = next(it)
    assert set(b) == {"question", "answer"} | {f"counting_{k}" for k in fields}
    assert b["question"][0] == 1 and b["counting_question"][0] == 101
    state = it.get_state()
    assert state == {"main": {"i": 1}, "counting": {"i": 101}}
    next(it)
    it.set_state(state)
    b = next(it)
    assert b["answer"][0] == 2 and b["counting_count_target"][0] == 102
    with pytest.raises(ValueError, match="saved by a run without model.counter"):
        it.set_state({"i": 3})
