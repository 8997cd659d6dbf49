"""``DecoderLayer.step`` / ``AnswerDecoder.step``: one new token per call; misuse raises instead of
returning wrong values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from openvivqa_jax.models.decoder import AnswerDecoder
from openvivqa_jax.models.layers import DecoderLayer

D, H, L, M, B = 16, 2, 4, 3, 2


def _setup():
    layer = DecoderLayer(D, H, 32, 0.0, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (B, L, D))
    memory = jax.random.normal(jax.random.PRNGKey(2), (B, M, D))
    cross_mask = jnp.ones((B, 1, 1, M), bool)
    shape = (B, H, D // H, L)
    cache = {"k": jnp.zeros(shape), "v": jnp.zeros(shape)}
    return layer, x, memory, cross_mask, cache


def test_step_equals_full_pass_one_token_at_a_time():
    layer, x, memory, cross_mask, cache = _setup()
    causal = jnp.tril(jnp.ones((L, L), bool))[None, None]
    full = layer(x, causal, layer.cross_attn.project_kv(memory), cross_mask)
    kv = layer.cross_attn.project_kv_heads(memory)
    for t in range(L):
        y, cache = layer.step(x[:, t : t + 1], jnp.int32(t), cache, kv, cross_mask)
        np.testing.assert_allclose(np.asarray(y[:, 0]), np.asarray(full[:, t]), atol=1e-5)


def test_step_rejects_several_new_tokens():
    layer, x, memory, cross_mask, cache = _setup()
    kv = layer.cross_attn.project_kv_heads(memory)
    with pytest.raises(ValueError, match=r"one new token.*got shape \(2, 2, 16\)"):
        layer.step(x[:, :2], jnp.int32(0), cache, kv, cross_mask)
    with pytest.raises(ValueError, match="one new token"):
        layer.step(x[:, 0], jnp.int32(0), cache, kv, cross_mask)  # (batch, d): the token axis is missing
    with pytest.raises(ValueError, match="scalar"):
        layer.step(x[:, :1], jnp.array([0, 1]), cache, kv, cross_mask)
    bad = {"k": cache["k"][:1], "v": cache["v"][:1]}
    with pytest.raises(ValueError, match="cache"):
        layer.step(x[:, :1], jnp.int32(0), bad, kv, cross_mask)


def test_answer_decoder_step_rejects_a_sequence_of_ids():
    dec = AnswerDecoder(vocab_size=20, num_ocr=3, d_model=D, num_layers=1, num_heads=H, ffn_dim=32, dropout=0.0,
                        max_len=L, use_pointer=True, rngs=nnx.Rngs(0))
    cache = dec.init_cache(B, L)
    with pytest.raises(ValueError, match=r"one new id per example.*\(2, 2\)"):
        dec.step(jnp.zeros((B, 2), jnp.int32), jnp.int32(0), cache, None, jnp.ones((B, M), bool),
                 jnp.zeros((B, 3, D)), jnp.ones((B, 3), bool))


def test_answer_decoder_step_at_max_len_raises():
    """Steps 0 .. max_len - 1 are finite; t = max_len (past the positional table and the cache) raises."""
    dec = AnswerDecoder(vocab_size=20, num_ocr=3, d_model=D, num_layers=1, num_heads=H, ffn_dim=32, dropout=0.0,
                        max_len=L, use_pointer=True, rngs=nnx.Rngs(0))
    cache = dec.init_cache(B, L)
    args = (None, jnp.ones((B, M), bool), jnp.zeros((B, 3, D)), jnp.ones((B, 3), bool))
    kv = dec.precompute_heads(jnp.zeros((B, M, D)))
    logits, _ = dec.step(jnp.zeros((B,), jnp.int32), jnp.int32(L - 1), cache, kv, *args[1:])
    assert bool(jnp.isfinite(logits).all())
    with pytest.raises(ValueError, match=rf"step t={L} is outside \[0, {L}\)"):
        dec.step(jnp.zeros((B,), jnp.int32), jnp.int32(L), cache, kv, *args[1:])
    with pytest.raises(ValueError, match=r"step t=-1"):
        dec.step(jnp.zeros((B,), jnp.int32), -1, cache, kv, *args[1:])
