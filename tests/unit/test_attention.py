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


def _ref_attend(self, q_in, k, v, mask, *, deterministic=True, rngs=None, return_weights=False):
    q = self._split(self.query(q_in))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(self.head_dim)
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
