"""Question-guided visual glimpses (``openvivqa_jax/models/grounding.py``) against numpy: the two-hot count
embedding, the glimpse tokens, weights and soft counts (masked cells ignored), and MLPAG's memory with them."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import random_batch, tiny_model_config
from openvivqa_jax.models import build_model
from openvivqa_jax.models.grounding import VisualGlimpses, soft_count_embedding, visual_glimpses


def _np(x):
    return np.asarray(x, np.float64)


def _lin(x, lin):
    return x @ _np(lin.kernel[...]) + (_np(lin.bias[...]) if lin.bias is not None else 0.0)


def _softmax(z, axis):
    e = np.exp(z - z.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _ln(x, ln, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * _np(ln.scale[...]) + _np(ln.bias[...])


def test_soft_count_embedding_is_two_hot():
    got = np.asarray(soft_count_embedding(jnp.array([0.0, 2.25, 3.0, 7.5, -1.0]), max_count=4))
    want = np.array([[1, 0, 0, 0, 0],
                     [0, 0, 0.75, 0.25, 0],
                     [0, 0, 0, 1, 0],
                     [0, 0, 0, 0, 1],  # clipped to max_count
                     [1, 0, 0, 0, 0]])  # clipped to 0
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_glimpses_match_numpy_and_ignore_masked_cells():
    d, s, l, g = 8, 5, 3, 2
    m = VisualGlimpses(d_model=d, num_glimpses=g, hidden_dim=6, max_count=4, dropout=0.0, rngs=nnx.Rngs(3))
    rng = np.random.default_rng(0)
    x_i, x_q = rng.normal(size=(2, s, d)), rng.normal(size=(2, l, d))
    boxes = rng.uniform(size=(2, s, 4))
    i_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    q_mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    out = m(jnp.asarray(x_i, jnp.float32), jnp.asarray(i_mask), jnp.asarray(x_q, jnp.float32), jnp.asarray(q_mask),
            jnp.asarray(boxes, jnp.float32))
    for b in range(2):
        # the question pooled by attentional reduction over its valid tokens
        qp = m.question_pool
        xq = x_q[b][q_mask[b]]
        alpha = _softmax(_lin(np.maximum(_lin(xq, qp.mlp_in), 0), qp.mlp_out), 0)
        q = _lin((alpha * 1.0).T @ xq, qp.merge)[0]
        xi = x_i[b][i_mask[b]]
        e = _lin(np.maximum(_lin(xi, m.w_image) + _lin(q, m.w_question), 0), m.w_score)  # (valid, G)
        w = _softmax(e, 0)
        count = (1 / (1 + np.exp(-e))).sum(0)
        two_hot = np.maximum(1 - np.abs(np.clip(count, 0, 4)[:, None] - np.arange(5)), 0)
        tokens = _ln(_lin(w.T @ xi, m.value) + _lin(two_hot, m.count) + _lin(w.T @ boxes[b][i_mask[b]], m.where)
                     + _np(m.slot[...]), m.norm)
        np.testing.assert_allclose(np.asarray(out["counts"][b]), count, rtol=1e-4)
        np.testing.assert_allclose(np.asarray(out["weights"][b])[i_mask[b]], w, rtol=1e-4, atol=1e-6)
        assert np.all(np.asarray(out["weights"][b])[~i_mask[b]] == 0)
        np.testing.assert_allclose(np.asarray(out["tokens"][b]), tokens, rtol=1e-3, atol=1e-4)
    assert out["mask"].shape == (2, g) and bool(out["mask"].all())


@pytest.mark.parametrize("score_bias", [-4.0, 0.0])
def test_soft_count_of_64_regions_starts_where_it_can_learn(score_bias):
    # A glimpse whose soft count is above max_count passes no gradient to the scores' bias through the clipped
    # count embedding (the softmax weights are invariant to it), so its count is never learned. With a zero bias
    # 64 regions start near a count of 32; the default bias starts it near 64 sigmoid(-4) = 1.15.
    d, g, k = 32, 4, 10
    m = VisualGlimpses(d_model=d, num_glimpses=g, hidden_dim=d, max_count=k, dropout=0.0, rngs=nnx.Rngs(1),
                       score_bias=score_bias)
    rng = np.random.default_rng(1)
    x_i = jnp.asarray(rng.normal(size=(1, 64, d)), jnp.float32)  # layer-normed regions: unit scale
    x_q = jnp.asarray(rng.normal(size=(1, 3, d)), jnp.float32)
    rest = (jnp.ones((1, 3), bool), jnp.asarray(rng.uniform(size=(1, 64, 4)), jnp.float32))
    counts = np.asarray(m(x_i, jnp.ones((1, 64), bool), x_q, *rest)["counts"])[0]
    probe = jnp.asarray(rng.normal(size=(1, g, d)), jnp.float32)
    grads = nnx.grad(lambda mod: jnp.sum(mod(x_i, jnp.ones((1, 64), bool), x_q, *rest)["tokens"] * probe))(m)
    grad = np.asarray(grads["w_score"]["bias"][...])
    if score_bias < 0:
        assert np.all((counts > 0.1) & (counts < k)), counts
        assert np.all(np.abs(grad) > 1e-3), grad
    else:
        clipped = counts > k
        assert clipped.sum() >= g // 2, counts
        np.testing.assert_allclose(grad[clipped], 0.0, atol=1e-5)  # softmax round-off only


def test_visual_glimpses_factory():
    cfg = tiny_model_config("mlpag").model
    assert visual_glimpses(cfg, rngs=nnx.Rngs(0), dtype=jnp.float32) is None  # num 0: the paper's model
    cfg.visual_glimpses.num = 3
    assert visual_glimpses(cfg, rngs=nnx.Rngs(0), dtype=jnp.float32).num_glimpses == 3
    cfg.visual_glimpses.max_count = 0
    with pytest.raises(ValueError, match="max_count"):
        visual_glimpses(cfg, rngs=nnx.Rngs(0), dtype=jnp.float32)


def test_mlpag_memory_gains_the_glimpse_tokens():
    cfg = tiny_model_config("mlpag")
    batch = random_batch(cfg, 40)
    base = build_model(cfg.model, 40, seed=0)
    cfg.model.visual_glimpses.num = 2
    model = build_model(cfg.model, 40, seed=0)
    enc0, enc = base.encode(batch), model.encode(batch)
    n0 = enc0["memory"].shape[1]
    assert enc["memory"].shape[1] == n0 + 2 and enc["memory_mask"].shape[1] == n0 + 2
    # the glimpse module is built last, so every other parameter (and the memory before it) is the base model's
    np.testing.assert_allclose(np.asarray(enc["memory"][:, :n0]), np.asarray(enc0["memory"]), rtol=1e-5, atol=1e-6)
    logits = model(batch)
    assert np.isfinite(np.asarray(logits)).all()


def test_count_loss_is_huber_over_rows_with_a_count():
    from openvivqa_jax.models.grounding import count_loss
    counts = np.array([2.5, 0.2, 7.0, 3.0], np.float32)
    targets = np.array([3, 0, 4, -1], np.int32)  # rows 1 and 3 have no count
    want = (0.5 * 0.5 ** 2 + (3.0 - 0.5)) / 2  # |2.5-3| = 0.5 quadratic; |7-4| = 3 linear (delta 1)
    assert float(count_loss(jnp.asarray(counts), jnp.asarray(targets))) == pytest.approx(want)
    assert float(count_loss(jnp.asarray(counts), jnp.zeros(4, jnp.int32))) == 0.0


def test_mlpag_count_loss_fits_the_first_glimpse_in_training_only():
    import jax
    from openvivqa_jax.vqa.train import add_auxiliary_losses, forward_with_intermediates
    cfg = tiny_model_config("mlpag")
    cfg.model.visual_glimpses.num = 2
    cfg.model.visual_glimpses.count_loss = 0.5
    batch = random_batch(cfg, 40, batch=3)
    model = build_model(cfg.model, 40, seed=0)
    with pytest.raises(ValueError, match="count_target"):
        forward_with_intermediates(model, batch, deterministic=False, rngs=nnx.Rngs(dropout=jax.random.key(0)))
    batch["count_target"] = np.array([2, 0, 5], np.int32)
    _, sown = forward_with_intermediates(model, batch, deterministic=True)
    assert add_auxiliary_losses(sown, jnp.float32(1.0), {"loss": 1.0})[1] == {"loss": 1.0}  # nothing sown
    _, sown = forward_with_intermediates(model, batch, deterministic=False, rngs=nnx.Rngs(dropout=jax.random.key(0)))
    _, metrics = add_auxiliary_losses(sown, jnp.float32(1.0), {"loss": 1.0})
    # the soft counts of the training pass, recomputed: the same dropout key gives the same glimpses
    enc = model.glimpses
    vis = model.vision(batch, deterministic=True)
    assert enc.count_loss_weight == 0.5 and np.isfinite(float(metrics["count_loss"]))
    # with every region scored near sigmoid(-4) the soft count starts near 0.018 * S: below both targets
    s = int(np.asarray(vis["mask"]).sum(1)[0])
    c0 = 1 / (1 + np.exp(4.0)) * s
    want = 0.5 * np.mean([(2 - c0) - 0.5 if 2 - c0 > 1 else 0.5 * (2 - c0) ** 2, (5 - c0) - 0.5])
    assert float(metrics["count_loss"]) == pytest.approx(want, rel=0.25)
    cfg.model.visual_glimpses.count_loss = -1.0
    with pytest.raises(ValueError, match="count_loss"):
        build_model(cfg.model, 40, seed=0)


def test_check_config_refuses_the_count_loss_without_glimpses():
    from openvivqa_jax.config_check import ConfigError, check_config
    cfg = tiny_model_config("mlpag")
    cfg.model.visual_glimpses.count_loss = 1.0
    with pytest.raises(ConfigError, match=r"visual_glimpses.count_loss=1.0 .*visual_glimpses.num=1") as e:
        check_config(cfg)
    assert "\n" not in str(e.value)
    cfg.model.visual_glimpses.num = 1
    check_config(cfg)
    cfg.model.visual_glimpses.count_loss = -0.5
    with pytest.raises(ConfigError, match="model.visual_glimpses.count_loss"):
        check_config(cfg)
