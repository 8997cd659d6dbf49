"""Contrastive word–region alignment loss (``openvivqa_jax/models/word_region.py``) against numpy loops: the
question–picture scores (masked cells and words ignored), the symmetric InfoNCE with another question of the
same picture masked out, and MLPAG sowing it into the training loss."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import random_batch, tiny_model_config
from openvivqa_jax.models import build_model
from openvivqa_jax.models.word_region import alignment_scores, picture_fingerprint, word_region_loss


def _lse(z):
    m = max(z)
    return m + np.log(sum(np.exp(v - m) for v in z))


@pytest.mark.parametrize("beta", [1.0, 8.0])
def test_alignment_scores_match_loops(beta):
    rng = np.random.default_rng(0)
    bq, bi, t, h, dh, s = 3, 2, 4, 2, 5, 6
    q, k = rng.normal(size=(bq, t, h, dh)), rng.normal(size=(bi, s, h, dh))
    q_mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], bool)
    i_mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    got = np.asarray(alignment_scores(jnp.asarray(q, jnp.float32), jnp.asarray(q_mask), jnp.asarray(k, jnp.float32),
                                      jnp.asarray(i_mask), beta))
    want = np.zeros((bq, bi))
    for b in range(bq):
        for c in range(bi):
            words = []
            for w in range(t):
                if not q_mask[b, w]:
                    continue
                per_head = [_lse([beta * q[b, w, hh] @ k[c, i, hh] / np.sqrt(dh)
                                  for i in range(s) if i_mask[c, i]])
                            / beta for hh in range(h)]
                words.append(np.mean(per_head))
            want[b, c] = np.mean(words)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="sharpness"):
        alignment_scores(jnp.asarray(q, jnp.float32), jnp.asarray(q_mask), jnp.asarray(k, jnp.float32),
                         jnp.asarray(i_mask), 0.0)


def test_infonce_masks_other_questions_of_the_same_picture():
    scores = np.array([[2.0, 0.5, 1.0], [0.3, 1.0, 0.9], [1.5, -0.2, 0.4]])
    fp = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]])  # rows 0 and 2: two questions of one picture
    tau = 0.5
    got = float(word_region_loss(jnp.asarray(scores, jnp.float32), jnp.asarray(fp, jnp.float32), tau))
    z = scores / tau
    allowed = [[0, 1], [0, 1, 2], [1, 2]]  # row/column b keeps itself and the other pictures only
    q_to_i = [_lse([z[b, c] for c in allowed[b]]) - z[b, b] for b in range(3)]
    i_to_q = [_lse([z[r, c] for r in allowed[c]]) - z[c, c] for c in range(3)]
    np.testing.assert_allclose(got, 0.5 * (np.mean(q_to_i) + np.mean(i_to_q)), rtol=1e-6)
    with pytest.raises(ValueError, match="temperature"):
        word_region_loss(jnp.asarray(scores), jnp.asarray(fp), 0.0)


def test_fingerprint_equal_for_equal_pictures_only():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    fp = np.asarray(picture_fingerprint(jnp.asarray(np.stack([a, b, a, a[::-1]]), jnp.float32)))
    assert (fp[0] == fp[2]).all()
    assert not (fp[0] == fp[1]).all() and not (fp[0] == fp[3]).all()  # same values, cells in another order


def test_mlpag_sows_the_loss_in_training_only():
    from flax import nnx
    from openvivqa_jax.vqa.train import add_auxiliary_losses, forward_with_intermediates
    cfg = tiny_model_config("mlpag")
    cfg.model.question_over_image = True
    batch = random_batch(cfg, 40, batch=4)
    cfg.model.word_region_loss.weight = 0.5
    model = build_model(cfg.model, 40, seed=0)
    _, sown = forward_with_intermediates(model, batch, deterministic=True)
    assert add_auxiliary_losses(sown, jnp.float32(1.0), {"loss": 1.0})[1] == {"loss": 1.0}  # nothing sown
    _, sown = forward_with_intermediates(model, batch, deterministic=False, rngs=nnx.Rngs(dropout=jax.random.key(0)))
    total, metrics = add_auxiliary_losses(sown, jnp.float32(1.0), {"loss": 1.0})
    wr = float(metrics["word_region_loss"])
    # at the start the four pictures are told apart at about chance: weight * log(4)
    assert 0.5 * np.log(4) * 0.5 < wr < 0.5 * np.log(4) * 2.0
    assert float(total) == pytest.approx(1.0 + wr) and float(metrics["answer_loss"]) == 1.0
    cfg.model.word_region_loss.temperature = 0.0
    with pytest.raises(ValueError, match="temperature"):
        forward_with_intermediates(build_model(cfg.model, 40, seed=0), batch, deterministic=False,
                                   rngs=nnx.Rngs(dropout=jax.random.key(0)))
    cfg.model.question_over_image = False
    with pytest.raises(ValueError, match="question_over_image"):
        build_model(cfg.model, 40, seed=0)


def test_check_config_refuses_the_loss_without_its_attention_and_bad_values():
    from openvivqa_jax.config_check import ConfigError, check_config
    cfg = tiny_model_config("mlpag")
    cfg.model.word_region_loss.weight = 1.0
    with pytest.raises(ConfigError, match="question_over_image"):
        check_config(cfg)
    cfg.model.question_over_image = True
    check_config(cfg)
    for field, bad in (("temperature", 0.0), ("sharpness", -1.0), ("weight", -0.5), ("max_words", -1)):
        c = tiny_model_config("mlpag")
        c.model.question_over_image = True
        c.model.word_region_loss[field] = bad
        with pytest.raises(ConfigError, match=f"model.word_region_loss.{field}"):
            check_config(c)


def _sown_word_region(cfg, batch):
    from flax import nnx
    from openvivqa_jax.vqa.train import add_auxiliary_losses, forward_with_intermediates
    model = build_model(cfg.model, 40, seed=0)
    _, sown = forward_with_intermediates(model, batch, deterministic=True)  # no dropout: runs comparable
    _, sown = forward_with_intermediates(model, batch, deterministic=False, rngs=nnx.Rngs(dropout=jax.random.key(0)))
    return add_auxiliary_losses(sown, jnp.float32(1.0), {"loss": 1.0})


def test_max_words_leaves_the_loss_of_short_questions_unchanged_and_counts_long_ones():
    """max_words: the same loss while every question fits (the padding past it is masked out anyway), and the
    share of questions with tokens past it is a metric, not part of the loss."""
    cfg = tiny_model_config("mlpag")
    cfg.model.question_over_image = True
    cfg.model.word_region_loss.weight = 1.0
    cfg.model.dropout = 0.0
    q_len = cfg.model.max_question_len
    batch = random_batch(cfg, 40, batch=4)
    lengths = np.array([2, 3, 3, 2])  # every question within 3 tokens
    batch["question_mask"] = np.arange(q_len)[None] < lengths[:, None]
    _, full = _sown_word_region(cfg, batch)
    cfg.model.word_region_loss.max_words = 3
    total, cut = _sown_word_region(cfg, batch)
    assert float(cut["word_region_words_cut"]) == 0.0
    assert float(cut["word_region_loss"]) == pytest.approx(float(full["word_region_loss"]), rel=1e-5)
    assert float(total) == pytest.approx(1.0 + float(cut["word_region_loss"]), rel=1e-6)  # the metric is not added
    # Two of the four questions have tokens past 3.
    batch["question_mask"] = np.arange(q_len)[None] < np.array([5, 3, 4, 2])[:, None]
    _, cut = _sown_word_region(cfg, batch)
    assert float(cut["word_region_words_cut"]) == pytest.approx(0.5)
