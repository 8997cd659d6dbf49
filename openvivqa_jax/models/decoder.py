"""Transformer answer decoder with the dynamic pointer network over OCR tokens.

Output space: ``V`` vocabulary pieces + ``N`` OCR slots (docs/design.md §5). At each step the decoder
hidden state ``h`` gives vocabulary logits ``h' = W_v h`` and pointer scores (MLPAG eq. 11; M4C's
dynamic pointer network)::

    ocr = (W_h h + b_h) (W_S x_S + b_S)^T / sqrt(d)        (batch, len, N)

and the prediction is the argmax over ``[h', ocr]`` (eq. 12). The ``1/sqrt(d)`` scale is M4C's; the
paper's eq. 11 omits it (a constant rescaling of logits). Padding OCR slots get ``NEG_INF``.

The previous output feeds back through the piece embedding, or, for a copied OCR slot, through a
projection of that OCR token's features (M4C: "the next input embedding of a copied token is that
OCR token's embedding").
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.layers import NEG_INF, DecoderLayer, Dropout, dense, layer_norm

__all__ = ["AnswerDecoder", "answer_decoder", "causal_mask"]


def causal_mask(length: int) -> jax.Array:
    """``(1, 1, length, length)`` bool lower-triangular mask (position i sees j <= i)."""
    return jnp.tril(jnp.ones((length, length), bool))[None, None]


class AnswerDecoder(nnx.Module):
    """Transformer decoder over a fused memory, with optional pointer network.

    Args:
      vocab_size: ``V``.
      num_ocr: ``N`` OCR slots.
      d_model, num_layers, num_heads, ffn_dim, dropout: transformer sizes.
      max_len: maximum answer length in steps (positional table size).
      use_pointer: when False (FST, QuMLAG), OCR logits are ``NEG_INF`` (vocabulary only).
      rngs: parameter RNGs.
      dtype: compute dtype.
    """

    def __init__(self, *, vocab_size: int, num_ocr: int, d_model: int, num_layers: int, num_heads: int,
                 ffn_dim: int, dropout: float, max_len: int, use_pointer: bool, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.vocab_size = vocab_size
        self.num_ocr = num_ocr
        self.d_model = d_model
        self.max_len = max_len
        self.use_pointer = use_pointer
        self.embedding = nnx.Embed(vocab_size, d_model, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.pos_embedding = nnx.Embed(max_len, d_model, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.in_norm = layer_norm(d_model, rngs, dtype)
        self.layers = nnx.List([
            DecoderLayer(d_model, num_heads, ffn_dim, dropout, rngs=rngs, dtype=dtype) for _ in range(num_layers)
        ])
        self.final_norm = layer_norm(d_model, rngs, dtype)
        self.vocab_head = dense(d_model, vocab_size, rngs, dtype)
        if use_pointer:
            self.ocr_in = dense(d_model, d_model, rngs, dtype)
            self.ptr_query = dense(d_model, d_model, rngs, dtype)
            self.ptr_key = dense(d_model, d_model, rngs, dtype)
        self.dropout = Dropout(dropout)

    def precompute_ocr(self, ocr_feats: jax.Array) -> dict[str, jax.Array]:
        """The pointer network's per-example OCR projections, computed once for all decoding steps.

        Args:
          ocr_feats: ``(batch, N, d)`` OCR features.

        Returns:
          ``{"ocr_proj": (batch, N, d)`` the copied tokens' input features ``ocr_in(ocr_feats)``,
          ``"ocr_keys": (batch, N, d)`` the pointer keys ``ptr_key(ocr_feats)`` (eq. 12)``}``; empty for a
          decoder without the pointer (FST, QuMLAG).
        """
        if not self.use_pointer:
            return {}
        return {"ocr_proj": self.ocr_in(ocr_feats), "ocr_keys": self.ptr_key(ocr_feats)}

    def embed_inputs(self, ids: jax.Array, positions: jax.Array, ocr_feats: jax.Array | None, *,
                     ocr_proj: jax.Array | None = None, input_bias: jax.Array | None = None) -> jax.Array:
        """Input embeddings of extended ids.

        Args:
          ids: ``(batch, len)`` int32 extended ids (``>= V`` means OCR slot ``id - V``).
          positions: ``(len,)`` int32 positions.
          ocr_feats: ``(batch, N, d)`` OCR features (unused when ``ocr_proj`` is given).
          ocr_proj: ``(batch, N, d)`` ``ocr_in(ocr_feats)`` from :meth:`precompute_ocr`, or None to compute it.
          input_bias: ``(batch, d)`` added to every step's input before the input LayerNorm (the model's
            question summary, MLPAG's ``question_to_decoder``), or None.

        Returns:
          ``(batch, len, d)``.
        """
        V = self.vocab_size
        is_ocr = ids >= V
        x = self.embedding(jnp.where(is_ocr, 0, ids))
        if self.use_pointer:
            slot = jnp.clip(ids - V, 0, self.num_ocr - 1)
            if ocr_proj is None:
                ocr_proj = self.ocr_in(ocr_feats)
            copied = jnp.take_along_axis(ocr_proj, slot[..., None], axis=1)
            x = jnp.where(is_ocr[..., None], copied, x)
        x = x + self.pos_embedding(positions)[None]
        if input_bias is not None:
            x = x + input_bias[:, None, :].astype(x.dtype)
        return self.in_norm(x)

    def output_logits(self, h: jax.Array, ocr_feats: jax.Array | None, ocr_mask: jax.Array, *,
                      ocr_keys: jax.Array | None = None) -> jax.Array:
        """Logits over ``V + N`` (eq. 11-12) in float32.

        Args:
          h: ``(batch, len, d)`` decoder outputs.
          ocr_feats: ``(batch, N, d)`` (unused when ``ocr_keys`` is given); ``ocr_mask``: ``(batch, N)`` bool.
          ocr_keys: ``(batch, N, d)`` the pointer keys ``ptr_key(ocr_feats)`` (:meth:`precompute_ocr`), or
            None to compute them.

        Returns:
          ``(batch, len, V + N)`` float32.
        """
        vocab = self.vocab_head(h).astype(jnp.float32)
        if self.use_pointer:
            q = self.ptr_query(h)
            k = self.ptr_key(ocr_feats) if ocr_keys is None else ocr_keys
            ocr = jnp.einsum("bld,bnd->bln", q, k).astype(jnp.float32) / jnp.sqrt(self.d_model)
            ocr = jnp.where(ocr_mask[:, None, :], ocr, NEG_INF)
        else:
            ocr = jnp.full(h.shape[:2] + (self.num_ocr,), NEG_INF, jnp.float32)
        return jnp.concatenate([vocab, ocr], axis=-1)

    def precompute(self, memory: jax.Array) -> list[tuple[jax.Array, jax.Array]]:
        """Cross-attention keys/values of the memory, once per layer (reused at every step)."""
        return [layer.cross_attn.project_kv(memory) for layer in self.layers]

    def precompute_heads(self, memory: jax.Array) -> list[tuple[jax.Array, jax.Array]]:
        """:meth:`precompute` in the head-major layout of cached decoding, ``(batch, H, head_dim, mem_len)``
        each (:meth:`~openvivqa_jax.models.layers.MultiHeadAttention.project_kv_heads`), for :meth:`step`."""
        return [layer.cross_attn.project_kv_heads(memory) for layer in self.layers]

    def __call__(self, ids, memory, memory_mask, ocr_feats, ocr_mask, *, deterministic=True, rngs=None,
                 return_attention: bool = False, input_bias: jax.Array | None = None):
        """Teacher-forced logits.

        Args:
          ids: ``(batch, ans_len)`` decoder inputs (BOS first).
          memory: ``(batch, mem_len, d)`` fused features; ``memory_mask``: ``(batch, mem_len)``.
          ocr_feats: ``(batch, N, d)``; ``ocr_mask``: ``(batch, N)``.
          input_bias: ``(batch, d)`` added to every input (:meth:`embed_inputs`), or None.
          return_attention: also return each layer's cross-attention probabilities over the memory
            (for predict's heat map; the default path is unchanged).

        Returns:
          ``(batch, ans_len, V + N)`` float32 logits; with ``return_attention`` also a list (one per
          layer) of ``(batch, H, ans_len, mem_len)`` float32 probabilities.
        """
        L = ids.shape[1]
        x = self.embed_inputs(ids, jnp.arange(L), ocr_feats, input_bias=input_bias)
        x = self.dropout(x, deterministic=deterministic, rngs=rngs)
        self_mask = causal_mask(L)
        cross_mask = memory_mask[:, None, None, :]
        weights = []
        for layer, kv in zip(self.layers, self.precompute(memory)):
            x = layer(x, self_mask, kv, cross_mask, deterministic=deterministic, rngs=rngs,
                      return_attention=return_attention)
            if return_attention:
                x, w = x
                weights.append(w)
        logits = self.output_logits(self.final_norm(x), ocr_feats, ocr_mask)
        return (logits, weights) if return_attention else logits

    def init_cache(self, batch_size: int, max_len: int, dtype: Any = jnp.float32) -> list[dict[str, jax.Array]]:
        """Zero self-attention caches: per layer ``{"k","v"}`` of ``(batch, H, head_dim, max_len)`` (head-major)."""
        out = []
        for layer in self.layers:
            a = layer.self_attn
            shape = (batch_size, a.num_heads, a.head_dim, max_len)
            out.append({"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)})
        return out

    def step(self, ids_t, t, cache, cross_kv, memory_mask, ocr_feats, ocr_mask, *, ocr_proj=None, ocr_keys=None,
             input_bias=None):
        """One cached decoding step.

        Args:
          ids_t: ``(batch,)`` extended ids input at step ``t``.
          t: int32 scalar.
          cache: from :meth:`init_cache` (updated copy returned).
          cross_kv: from :meth:`precompute_heads`.
          memory_mask: ``(batch, mem_len)``; ``ocr_feats``, ``ocr_mask`` as in :meth:`__call__`.
          ocr_proj, ocr_keys: ``(batch, N, d)`` each from :meth:`precompute_ocr` (then ``ocr_feats`` is not
            read and may be None), or None to project ``ocr_feats`` at this step.
          input_bias: ``(batch, d)`` added to the step's input (:meth:`embed_inputs`), or None.

        Returns:
          ``(logits (batch, V + N) float32, new_cache)``.

        Raises:
          ValueError: ``ids_t`` is not ``(batch,)`` (one new token per example), ``t`` is not a scalar, or a
            concrete ``t`` is outside ``[0, max_len)`` (or past the cache).
        """
        if jnp.ndim(ids_t) != 1:
            raise ValueError(f"AnswerDecoder.step takes one new id per example, ids_t of shape (batch,); got shape "
                             f"{jnp.shape(ids_t)}. Use AnswerDecoder.__call__ for teacher forcing over a sequence")
        if jnp.ndim(t) != 0:
            raise ValueError(f"AnswerDecoder.step: t must be a scalar step index, got shape {jnp.shape(t)}")
        # A step past the positional table or the cache reads clamped positions and writes nowhere: non-finite
        # or wrong logits. A concrete t is checked here; under jit the decode loops bound t by max_len.
        limit = min(self.max_len, cache[0]["k"].shape[-1]) if cache else self.max_len
        try:
            t_value = int(t)
        except (TypeError, jax.errors.ConcretizationTypeError):
            t_value = None  # traced
        if t_value is not None and not 0 <= t_value < limit:
            raise ValueError(f"AnswerDecoder.step: step t={t_value} is outside [0, {limit}) (max_len {self.max_len}, "
                             f"cache length {cache[0]['k'].shape[-1] if cache else 'n/a'}); decoding has at most "
                             "max_len steps")
        x = self.embed_inputs(ids_t[:, None], jnp.reshape(t, (1,)), ocr_feats, ocr_proj=ocr_proj,
                              input_bias=input_bias)
        cross_mask = memory_mask[:, None, None, :]
        new_cache = []
        for layer, kv, c in zip(self.layers, cross_kv, cache):
            x, c = layer.step(x, t, c, kv, cross_mask)
            new_cache.append(c)
        logits = self.output_logits(self.final_norm(x), ocr_feats, ocr_mask, ocr_keys=ocr_keys)
        return logits[:, 0], new_cache


def answer_decoder(cfg, vocab_size: int, *, use_pointer: bool, rngs: nnx.Rngs,
                   dtype: Any = jnp.float32) -> AnswerDecoder:
    """The :class:`AnswerDecoder` of a model's config (FST, QuMLAG: vocabulary only; MLPAG: with the pointer).

    Args:
      cfg: ``config.model`` (num_ocr, d_model, num_decoder_layers, num_heads, ffn_dim, dropout,
        max_answer_len).
      vocab_size: ``V``.
      use_pointer: the dynamic pointer network over the ``N`` OCR slots.
      rngs: parameter RNGs.
      dtype: compute dtype.

    Returns:
      The decoder: ``(batch, ans_len)`` extended ids and a ``(batch, M, d)`` memory -> ``(batch, ans_len, V + N)``
      logits.
    """
    return AnswerDecoder(vocab_size=vocab_size, num_ocr=cfg.num_ocr, d_model=cfg.d_model,
                         num_layers=cfg.num_decoder_layers, num_heads=cfg.num_heads, ffn_dim=cfg.ffn_dim,
                         dropout=cfg.dropout, max_len=cfg.max_answer_len, use_pointer=use_pointer, rngs=rngs,
                         dtype=dtype)
