"""Attention through ``jax.nn.dot_product_attention`` (``model.attention_impl``): every model's logits equal
the explicit einsum-softmax attention within 1e-5, teacher-forced and in cached decoding (head-major caches,
M4C's prefix + cache segments); the config field is validated.

The reference attention is written here (the computation the layers did before: ``q k^T / sqrt(head_dim)``,
masked logits set to -1e9, softmax, ``p v``; per-segment dots over the head-major caches) and patched
into :class:`MultiHeadAttention` to get the reference logits of the same parameters and inputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import random_batch, tiny_model_config
from openvivqa_jax.models import MODEL_REGISTRY, build_model
from openvivqa_jax.models import layers
from openvivqa_jax.models.base import GeneratorModel

V = 40
ALL = sorted(MODEL_REGISTRY)


def _ref_attend(self, q_in, k, v, mask, *, deterministic=True, rngs=None, return_weights=False, bias=None):
    q = self._split(self.query(q_in))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(self.head_dim)
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = jnp.where(mask, logits, -1e9)
    w = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", w.astype(v.dtype), v)
    out = self.out(ctx.reshape(ctx.shape[:-2] + (-1,)))
    return (out, w) if return_weights else out


def _ref_attend_heads(self, q_in, segments, mask):
    q = self._split(self.query(q_in))
    logits = jnp.concatenate([jnp.einsum("bqhd,bhdk->bhqk", q, k) for k, _ in segments], -1) / np.sqrt(self.head_dim)
    if mask is not None:
        logits = jnp.where(mask, logits, -1e9)
    p = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    ctx, start = 0.0, 0
    for k, v in segments:
        n = k.shape[-1]
        ctx = ctx + jnp.einsum("bhqk,bhdk->bqhd", p[..., start:start + n], v)
        start += n
    return self.out(ctx.reshape(ctx.shape[:-2] + (-1,)))


def _logits(model, batch, cfg):
    """``{"train": teacher-forced (or classifier) logits, "decode": cached step logits stacked over t}``."""
    out = {"train": np.asarray(model(batch))}
    if isinstance(model, GeneratorModel):
        enc = model.encode(batch)
        dec = model.prepare_decode(enc)
        b = batch["question"].shape[0]
        cache = model.init_cache(b, cfg.model.max_answer_len)
        steps = []
        for t in range(cfg.model.max_answer_len):
            lg, cache = model.decode_step(dec, jnp.asarray(batch["decoder_in"][:, t]), jnp.int32(t), cache)
            steps.append(np.asarray(lg))
        out["decode"] = np.stack(steps, 1)
    return out


@pytest.mark.parametrize("name", ALL)
def test_logits_equal_explicit_attention(name, monkeypatch):
    cfg = tiny_model_config(name)
    model = build_model(cfg.model, V, seed=1)
    batch = random_batch(cfg, V, batch=3, seed=2)
    # Padding questions (and M4C's prefix) exercise the masks; one fully padded OCR row per example.
    batch["ocr_mask"][:, -1] = False
    ours = _logits(model, batch, cfg)
    n_attn = sum(isinstance(m, layers.MultiHeadAttention) for _, m in nnx.iter_graph(model))
    monkeypatch.setattr(layers.MultiHeadAttention, "attend", _ref_attend)
    monkeypatch.setattr(layers.MultiHeadAttention, "attend_heads", _ref_attend_heads)
    ref = _logits(model, batch, cfg)
    assert ours.keys() == ref.keys()
    for mode in ours:
        finite = ref[mode] > -1e8  # padded OCR slots hold the NEG_INF constant in both
        np.testing.assert_array_equal(finite, ours[mode] > -1e8)
        np.testing.assert_allclose(ours[mode][finite], ref[mode][finite], atol=1e-5, rtol=1e-5,
                                   err_msg=f"{name} {mode} ({n_attn} attention layers)")
    if name in ("mlpag", "m4c", "qumlag"):
        assert n_attn > 0 and "decode" in ours


def test_fully_masked_row_is_uniform_average():
    """A query with no valid key averages all values (as the -1e9 logits did), not NaN."""
    attn = layers.MultiHeadAttention(8, 2, 0.0, rngs=nnx.Rngs(0))
    x = jnp.asarray(np.random.default_rng(0).standard_normal((1, 3, 8)), jnp.float32)
    mask = jnp.zeros((1, 1, 1, 3), bool)
    got = attn(x, x, mask)
    k, v = attn.project_kv(x)
    want = attn.out(jnp.broadcast_to(v.mean(1, keepdims=True), v.shape).reshape(1, 3, 8))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)


def test_attention_impl_config_is_checked():
    cfg = tiny_model_config("mlpag")
    cfg.model.attention_impl = "flash"
    with pytest.raises(ValueError, match="attention_impl must be one of"):
        build_model(cfg.model, V)
    if jax.default_backend() != "gpu":
        cfg.model.attention_impl = "cudnn"
        with pytest.raises(ValueError, match="needs a CUDA GPU"):
            build_model(cfg.model, V)
    cfg.model.attention_impl = "xla"
    model = build_model(cfg.model, V)
    impls = {m.implementation for _, m in nnx.iter_graph(model)
             if isinstance(m, layers.MultiHeadAttention)}
    assert impls == {"xla"}


def _numpy_attention(attn, x, mask, bias):
    """softmax(q k^T / sqrt(head_dim) + bias, masked) v, then the output projection, in numpy."""
    w = {n: np.asarray(getattr(attn, n).kernel) for n in ("query", "key", "value", "out")}
    b = {n: np.asarray(getattr(attn, n).bias) for n in ("query", "key", "value", "out")}
    xs = np.asarray(x)
    h, hd = attn.num_heads, attn.head_dim
    q, k, v = ((xs @ w[n] + b[n]).reshape(xs.shape[0], xs.shape[1], h, hd) for n in ("query", "key", "value"))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd) + np.asarray(bias)
    logits = np.where(np.asarray(mask), logits, -1e9)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ctx = np.einsum("bhqk,bkhd->bqhd", p, v).reshape(xs.shape[0], xs.shape[1], h * hd)
    return ctx @ w["out"] + b["out"]


@pytest.mark.parametrize("fused", [True, False])
def test_an_attention_bias_is_added_to_the_scaled_logits(fused):
    """A float bias (the relative-position one) enters before the softmax, on the fused path
    (``dot_product_attention``) and on the explicit one (weights returned) alike."""
    rng = np.random.default_rng(3)
    attn = layers.MultiHeadAttention(8, 2, 0.0, rngs=nnx.Rngs(0))
    x = jnp.asarray(rng.standard_normal((2, 5, 8)), jnp.float32)
    mask = jnp.asarray(rng.random((2, 1, 1, 5)) > 0.3).at[:, :, :, 0].set(True)
    bias = jnp.asarray(3 * rng.standard_normal((1, 2, 5, 5)), jnp.float32)
    k, v = attn.project_kv(x)
    got = attn.attend(x, k, v, mask, bias=bias, return_weights=not fused)
    got = got if fused else got[0]
    np.testing.assert_allclose(np.asarray(got), _numpy_attention(attn, x, mask, bias), atol=1e-5, rtol=1e-5)
    plain = attn.attend(x, k, v, mask)
    assert not np.allclose(np.asarray(plain), np.asarray(got), atol=1e-3)  # the bias did something


def test_relative_position_buckets_by_the_t5_rule():
    """32 buckets, max distance 128 (T5's defaults): 16 for keys before the query, 16 after; offsets 0-7
    exact; larger ones at 8 + floor(8 * ln(n / 8) / ln(16)): n = 20 -> 8 + floor(2.64) = 10, 50 -> 8 +
    floor(5.29) = 13, 100 -> 8 + floor(7.29) = 15, and 128 on in the last bucket (15)."""
    offsets = jnp.asarray([0, -1, -7, -8, -20, -50, -100, -128, -1000, 1, 7, 8, 20, 50, 100, 1000])
    want = [0, 1, 7, 8, 10, 13, 15, 15, 15, 17, 23, 24, 26, 29, 31, 31]
    assert layers.relative_position_bucket(offsets).tolist() == want


def test_relative_position_bias_depends_on_the_offset_only():
    rel = layers.RelativePositionBias(3, 8, 16, rngs=nnx.Rngs(0))
    bias = np.asarray(rel(40))
    table = np.asarray(rel.embedding.embedding)
    assert bias.shape == (1, 3, 40, 40)
    buckets = np.asarray(layers.relative_position_bucket(jnp.arange(40)[None, :] - jnp.arange(40)[:, None], 8, 16))
    np.testing.assert_array_equal(bias[0], np.transpose(table[buckets], (2, 0, 1)))
    np.testing.assert_array_equal(bias[0, :, 5, 9], bias[0, :, 20, 24])  # same offset, same bias
    with pytest.raises(ValueError, match="even number"):
        layers.RelativePositionBias(3, 7, rngs=nnx.Rngs(0))
