"""Shared Flax NNX layers: transformer blocks, with attention, dropout and the pixel backbone re-exported.

Every model of the zoo is composed from these. Layers never mention meshes or devices; sharding
comes from regex rules over parameter paths (``query``/``key``/``value``/``out``/``wi``/``wo``/
``embedding`` names are what the rules match).

Masks are boolean with ``True`` = attend / valid. Attention masks broadcast to
``(batch, num_heads, q_len, kv_len)``.

The building blocks live in :mod:`~openvivqa_jax.models.attention` (multi-head attention, ``dense``),
:mod:`~openvivqa_jax.models.dropout` and :mod:`~openvivqa_jax.models.cnn` (``SmallCNN`` and the grid
helpers); this module holds the transformer blocks and re-exports every name, so
``from openvivqa_jax.models.layers import ...`` keeps working.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

# Re-exported: the zoo's modules import these from here.
from openvivqa_jax.models.attention import (  # noqa: F401
    ATTENTION_IMPLS,
    NEG_INF,
    MultiHeadAttention,
    RelativePositionBias,
    dense,
    relative_position_bucket,
    set_attention_impl,
)
from openvivqa_jax.models.cnn import SmallCNN, box_overlap_weights, grid_boxes, masked_mean  # noqa: F401
from openvivqa_jax.models.dropout import Dropout, _keep_mask, _threshold, dropout_bit_width  # noqa: F401

__all__ = [
    "NEG_INF",
    "ATTENTION_IMPLS",
    "Dropout",
    "dropout_bit_width",
    "set_attention_impl",
    "MultiHeadAttention",
    "RelativePositionBias",
    "relative_position_bucket",
    "FeedForward",
    "EncoderBlock",
    "CrossBlock",
    "DecoderLayer",
    "SmallCNN",
    "grid_boxes",
    "box_overlap_weights",
    "masked_mean",
    "dense",
    "layer_norm",
    "call_block",
]


def call_block(block, *args, remat: bool = False, deterministic: bool = True, rngs=None, **kwargs):
    """``block(*args, deterministic=..., rngs=..., **kwargs)``; with ``remat`` under ``nnx.remat``
    (``jax.checkpoint``): the block's activations are not kept for the backward pass but recomputed
    there, trading one more forward pass of the block for its activation memory. Outputs and gradients
    are the same either way (dropout draws the same masks in the recomputation)."""
    if not remat:
        return block(*args, deterministic=deterministic, rngs=rngs, **kwargs)

    def run(block, args, kwargs, rngs):
        return block(*args, deterministic=deterministic, rngs=rngs, **kwargs)

    return nnx.remat(run)(block, args, kwargs, rngs)


class FeedForward(nnx.Module):
    """Position-wise FFN: ``wo(dropout(relu(wi(x))))``, ``d -> ffn_dim -> d``; a subclass may change the
    activation (:meth:`activation`)."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.wi = dense(d_model, ffn_dim, rngs, dtype)
        self.wo = dense(ffn_dim, d_model, rngs, dtype)
        self.dropout = Dropout(dropout)

    def activation(self, h: jax.Array) -> jax.Array:
        """The inner activation, ReLU, of ``h`` ``(..., ffn_dim)``."""
        return jax.nn.relu(h)

    def __call__(self, x, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
        """``x``: ``(..., d)`` -> ``(..., d)``."""
        h = self.activation(self.wi(x))
        return self.wo(self.dropout(h, deterministic=deterministic, rngs=rngs))


def layer_norm(d: int, rngs: nnx.Rngs, dtype: Any) -> nnx.LayerNorm:
    """The LayerNorm every model of the zoo uses (Ba et al. 2016): over the last axis of width ``d``.

    ``y = (x - mean) / sqrt(var + 1e-6) * scale + bias``; ``epsilon = 1e-6`` is flax's default and big_vision's
    ViT's (whose checkpoints :mod:`~openvivqa_jax.models.vit` loads). Parameters
    (``scale``, ``bias``, ``(d,)``) are float32; ``dtype`` is the compute dtype.

    Args:
      d: feature width (the last axis of the inputs, ``(..., d)``).
      rngs: parameter RNGs (LayerNorm's initializers are constant; the argument keeps NNX's signature).
      dtype: compute dtype, e.g. ``jnp.float32`` or ``jnp.bfloat16``.

    Returns:
      An ``nnx.LayerNorm`` mapping ``(..., d) -> (..., d)``.
    """
    return nnx.LayerNorm(d, epsilon=1e-6, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)


class CrossBlock(nnx.Module):
    """Pre-LN transformer block: attention of ``x`` over ``context`` then FFN, both residual.

    With ``context is x`` this is a self-attention encoder block. Used for MLPAG's question
    self-attention, spatial attention (image over question) and context attention (OCR over
    question), QuMLAG's guided attention and MCAN's SA/GA units.
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float, *, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.norm_q = layer_norm(d_model, rngs, dtype)
        self.norm_kv = layer_norm(d_model, rngs, dtype)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout, rngs=rngs, dtype=dtype)
        self.norm_ffn = layer_norm(d_model, rngs, dtype)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, rngs=rngs, dtype=dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x, context, context_mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
        """Args: ``x`` ``(batch, q_len, d)``; ``context`` ``(batch, kv_len, d)``; ``context_mask``
        ``(batch, kv_len)`` bool. Returns ``(batch, q_len, d)``."""
        mask = context_mask[:, None, None, :]
        h = self.attn(self.norm_q(x), self.norm_kv(context), mask, deterministic=deterministic, rngs=rngs)
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        h = self.ffn(self.norm_ffn(x), deterministic=deterministic, rngs=rngs)
        return x + self.dropout(h, deterministic=deterministic, rngs=rngs)


class EncoderBlock(nnx.Module):
    """Pre-LN self-attention block over ``x`` ``(batch, len, d)`` with key mask ``(batch, len)``."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float, *, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.norm_q = layer_norm(d_model, rngs, dtype)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout, rngs=rngs, dtype=dtype)
        self.norm_ffn = layer_norm(d_model, rngs, dtype)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, rngs=rngs, dtype=dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None, attn_mask=None,
                 attn_bias=None):
        """``attn_mask`` (optional) overrides the key mask with a full ``(batch, 1|H, len, len)`` mask;
        ``attn_bias`` (optional) float ``(batch|1, H, len, len)`` is added to the attention logits."""
        m = mask[:, None, None, :] if attn_mask is None else attn_mask
        xn = self.norm_q(x)
        h = self.attn(xn, xn, m, deterministic=deterministic, rngs=rngs, bias=attn_bias)
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        h = self.ffn(self.norm_ffn(x), deterministic=deterministic, rngs=rngs)
        return x + self.dropout(h, deterministic=deterministic, rngs=rngs)


class DecoderLayer(nnx.Module):
    """Pre-LN transformer decoder layer: causal self-attention, cross-attention, FFN.

    Supports teacher forcing over a whole sequence and single-step decoding with a KV cache whose
    result equals the full recompute (tested).
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float, *, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.norm_self = layer_norm(d_model, rngs, dtype)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout, rngs=rngs, dtype=dtype)
        self.norm_cross = layer_norm(d_model, rngs, dtype)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout, rngs=rngs, dtype=dtype)
        self.norm_ffn = layer_norm(d_model, rngs, dtype)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, rngs=rngs, dtype=dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x, self_mask, cross_kv, cross_mask, *, deterministic=True, rngs=None,
                 return_attention: bool = False):
        """Teacher-forced pass.

        Args:
          x: ``(batch, ans_len, d)``.
          self_mask: ``(batch|1, 1, ans_len, ans_len)`` causal & padding mask.
          cross_kv: ``(k, v)`` from :meth:`cross_attn.project_kv` of the memory.
          cross_mask: ``(batch, 1, 1, mem_len)``.
          return_attention: also return the cross-attention probabilities (predict's heat map).

        Returns:
          ``(batch, ans_len, d)``; with ``return_attention`` also ``(batch, H, ans_len, mem_len)`` float32.
        """
        xn = self.norm_self(x)
        h = self.self_attn(xn, xn, self_mask, deterministic=deterministic, rngs=rngs)
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        h = self.cross_attn.attend(self.norm_cross(x), *cross_kv, cross_mask, deterministic=deterministic, rngs=rngs,
                                   return_weights=return_attention)
        if return_attention:
            h, weights = h
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        h = self.ffn(self.norm_ffn(x), deterministic=deterministic, rngs=rngs)
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        return (x, weights) if return_attention else x

    def step(self, x, t, cache, cross_kv, cross_mask):
        """One decoding step at position ``t`` with the self-attention KV cache.

        Args:
          x: ``(batch, 1, d)`` input at step ``t``.
          t: int32 scalar step index.
          cache: ``{"k", "v"}`` each ``(batch, H, head_dim, max_len)`` (head-major,
            :meth:`MultiHeadAttention.project_kv_heads`).
          cross_kv: ``(k, v)`` from :meth:`cross_attn.project_kv_heads` of the memory, each
            ``(batch, H, head_dim, mem_len)``; cross_mask: as in :meth:`__call__`.

        Returns:
          ``(y, cache)`` with ``y`` ``(batch, 1, d)`` and the cache updated at position ``t``.

        Raises:
          ValueError: ``x`` is not ``(batch, 1, d)`` (the cache holds one position per call, so more new
            tokens would be attended as if they were one: wrong values, not an error, without this
            check), ``t`` is not a scalar, or the cache is not ``(batch, H, head_dim, max_len)``. Use
            :meth:`__call__` with a causal mask for several positions.
        """
        if getattr(x, "ndim", None) != 3 or x.shape[1] != 1:
            raise ValueError(f"DecoderLayer.step takes one new token, x of shape (batch, 1, d_model); got shape "
                             f"{getattr(x, 'shape', None)}. Use DecoderLayer.__call__ with a causal mask for "
                             "several positions")
        if jnp.ndim(t) != 0:
            raise ValueError(f"DecoderLayer.step: t must be a scalar step index, got shape {jnp.shape(t)}")
        for name in ("k", "v"):
            if cache[name].ndim != 4 or cache[name].shape[0] != x.shape[0]:
                raise ValueError(f"DecoderLayer.step: cache[{name!r}] must be (batch={x.shape[0]}, heads, head_dim, "
                                 f"max_len), got shape {cache[name].shape}")
        xn = self.norm_self(x)
        k_t, v_t = self.self_attn.project_kv_heads(xn)
        k = jax.lax.dynamic_update_slice_in_dim(cache["k"], k_t.astype(cache["k"].dtype), t, axis=3)
        v = jax.lax.dynamic_update_slice_in_dim(cache["v"], v_t.astype(cache["v"].dtype), t, axis=3)
        max_len = k.shape[3]
        mask = (jnp.arange(max_len) <= t)[None, None, None, :]
        h = self.self_attn.attend_heads(xn, [(k, v)], mask)
        x = x + h
        x = x + self.cross_attn.attend_heads(self.norm_cross(x), [cross_kv], cross_mask)
        x = x + self.ffn(self.norm_ffn(x))
        return x, {"k": k, "v": v}
