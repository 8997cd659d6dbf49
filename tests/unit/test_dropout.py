"""Dropout (:class:`openvivqa_jax.models.layers.Dropout`): the keep rate over 10^6 draws is within 3 standard
errors of ``1 - rate``; kept elements are scaled by ``1 / keep``; masks are independent across elements (pairs
drawn from one threefry block and neighbours), differ across layers (calls) and steps (keys), and are fixed by
the seed. The resumed training run equals the uninterrupted one with dropout on: tests/e2e/test_train.py
(``test_resume_after_sigkill_matches_uninterrupted``, configs/tiny.py trains with dropout 0.1)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from openvivqa_jax.models.layers import Dropout, dropout_bit_width

N = 1_000_000


def _mask(rate, key, shape=(N,)):
    out = Dropout(rate)(jnp.ones(shape, jnp.float32), deterministic=False, rngs=nnx.Rngs(dropout=key))
    return np.asarray(out) != 0, np.asarray(out)


@pytest.mark.parametrize("rate,width", [(0.1, 16), (0.5, 8), (0.25, 8), (0.3, 16), (1e-4, 32)])
def test_bit_width(rate, width):
    # 0.9 * 256 = 230.4 is not an integer (drop rate 0.1016); 0.9 * 65536 = 58982.4 -> 58982 (0.1000061);
    # 0.9999 * 65536 = 65529.4 -> drop rate 1.068e-4, 7% off 1e-4, so 32 bits.
    assert dropout_bit_width(rate) == width


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.3, 1e-4])
@pytest.mark.parametrize("impl", ["threefry2x32", "unsafe_rbg"])
def test_keep_rate_within_three_standard_errors(rate, impl):
    keep, scaled = _mask(rate, jax.random.key(7, impl=impl))
    p = 1 - rate
    se = math.sqrt(p * (1 - p) / N)
    assert abs(keep.mean() - p) < 3 * se, (keep.mean(), p, se)
    np.testing.assert_allclose(scaled[keep], 1 / p, rtol=1e-6)
    assert (scaled[~keep] == 0).all()


def test_masks_independent_across_elements():
    """Pairs from one threefry-2x32 block (element ``j`` and the one packed ``words/2`` words later) and
    neighbouring elements of one word are dropped together with probability ``rate**2``."""
    rate = 0.5  # 8-bit: four elements per word, 2N/8 words, block partner 4 * words/2 = N/2 elements later
    drop = ~_mask(rate, jax.random.key(3))[0]
    se = math.sqrt(rate ** 2 * (1 - rate ** 2) / (N // 2))
    for a, b in [(drop[: N // 2], drop[N // 2:]), (drop[0::2], drop[1::2])]:
        assert abs((a & b).mean() - rate ** 2) < 3 * se


def test_masks_differ_across_layers_and_steps_and_repeat_for_a_seed():
    x = jnp.ones((64, 256), jnp.float32)
    layer1, layer2 = Dropout(0.1), Dropout(0.1)

    def step_masks(seed, step):
        rngs = nnx.Rngs(dropout=jax.random.fold_in(jax.random.key(seed), step))  # the trainer's keys
        return [np.asarray(layer(x, deterministic=False, rngs=rngs)) != 0 for layer in (layer1, layer2)]

    s0, s1, again = step_masks(0, 0), step_masks(0, 1), step_masks(0, 0)
    for a, b in [(s0[0], s0[1]), (s0[0], s1[0]), (s0[1], s1[1])]:
        # Independent masks agree on p^2 + (1-p)^2 = 0.82 of the elements, not all.
        assert 0.79 < (a == b).mean() < 0.85
    for a, b in zip(s0, again):
        np.testing.assert_array_equal(a, b)


def test_deterministic_and_rate_zero_are_identity():
    x = jnp.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(Dropout(0.5)(x, deterministic=True), x)
    np.testing.assert_array_equal(Dropout(0.0)(x, deterministic=False, rngs=nnx.Rngs(dropout=0)), x)
    with pytest.raises(ValueError, match="no rngs"):
        Dropout(0.5)(x, deterministic=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(__import__("openvivqa_jax.models", fromlist=["MODEL_REGISTRY"]).MODEL_REGISTRY))
def test_every_model_drops_out_with_the_seed(name):
    """Each model of the zoo runs with dropout on: the same key gives the same logits, another key others."""
    from conftest import random_batch, tiny_model_config
    from openvivqa_jax.models import build_model

    cfg = tiny_model_config(name)
    cfg.model.dropout = 0.3
    model = build_model(cfg.model, 40, seed=0)
    batch = random_batch(cfg, 40, batch=2)
    run = lambda seed: np.asarray(model(batch, deterministic=False, rngs=nnx.Rngs(dropout=seed)))  # noqa: E731
    a, b, c = run(0), run(0), run(1)
    assert np.isfinite(a[a > -1e8]).all()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
