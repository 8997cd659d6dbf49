"""Question encoders, attention and fusion layers shared by several models of the zoo.

Each model file (``fst.py``, ``qumlag.py``, ``mlpag.py``, ``m4c.py``, ``saaa.py``, ``mcan.py``,
``lorra.py``) imports only shared modules (this one, :mod:`~openvivqa_jax.models.layers`,
:mod:`~openvivqa_jax.models.embeddings`, :mod:`~openvivqa_jax.models.decoder`,
:mod:`~openvivqa_jax.models.base`, :mod:`~openvivqa_jax.models.classifier`), never another model file.

* :class:`LstmQuestionEncoder`: piece embeddings and an LSTM (SAAA, MCAN, LoRRA, FST, QuMLAG).
* :class:`StackedAttention`, :func:`stacked_fusion`, :func:`glimpse_vectors`: stacked attention
  (Kazemi & Elqursh 2017 eq. 2-3; OpenViVQA paper §4.1 eq. 5-6), used by FST, SAAA and LoRRA;
  :func:`lstm_stacked_attention`: the LSTM question encoder and stacked attention of FST and SAAA.
* :class:`GuidedAttentionStack`, :class:`AttentionReduce`: MCAN's co-attention and "AttFlat"
  (Yu et al. 2019 §3), used by MCAN, QuMLAG and LoRRA; :func:`lstm_co_attention`: the LSTM question
  encoder and co-attention of MCAN and QuMLAG.
* :func:`vocab_only_ocr`: the empty OCR inputs of a vocabulary-only decoder (FST, QuMLAG).

The attribute names of the modules here are part of the parameter paths of every model that uses them
(``question/lstm/...``, ``fusion/image_guided/...``); renaming one breaks old checkpoints.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.layers import NEG_INF, CrossBlock, Dropout, EncoderBlock, dense, layer_norm

__all__ = ["LstmQuestionEncoder", "StackedAttention", "stacked_fusion", "glimpse_vectors", "vocab_only_ocr",
           "lstm_stacked_attention", "GuidedAttentionStack", "lstm_co_attention", "AttentionReduce"]


class LstmQuestionEncoder(nnx.Module):
    """Piece embeddings and a one-layer LSTM over the question (SAAA, MCAN, LoRRA, FST, QuMLAG).

    Uses ``nnx.RNN`` over ``nnx.OptimizedLSTMCell`` with ``seq_lengths``, so the final state is read at
    each question's last real token (questions are right-padded; docs/design.md §5).

    Args:
      vocab_size: ``V``; ``word_dim``: embedding width (the papers' 300-d word vectors: started from fastText
        with ``model.question_embedding = "fasttext"``, :mod:`openvivqa_jax.models.pretrained`);
      hidden_dim: LSTM width ``d_Q``; ``dropout``: on the embeddings.
    """

    def __init__(self, *, vocab_size: int, word_dim: int, hidden_dim: int, dropout: float, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.hidden_dim = hidden_dim
        self.embedding = nnx.Embed(vocab_size, word_dim, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        cell = nnx.OptimizedLSTMCell(word_dim, hidden_dim, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.lstm = nnx.RNN(cell, return_carry=True, rngs=False)
        self.dropout = Dropout(dropout)

    def __call__(self, ids: jax.Array, mask: jax.Array, *, deterministic=True, rngs=None):
        """Encodes questions.

        Args:
          ids: ``(batch, q_len)`` int32 pieces; ``mask``: ``(batch, q_len)`` bool, right-padded.

        Returns:
          ``(outputs (batch, q_len, d_Q) with padding rows zeroed, final (batch, d_Q))``; ``final`` is
          the hidden state after the last real token (after the first token for an empty question).
        """
        mask = mask.astype(bool)
        x = self.dropout(self.embedding(ids), deterministic=deterministic, rngs=rngs)
        lengths = jnp.maximum(mask.sum(-1), 1).astype(jnp.int32)
        zeros = jnp.zeros(ids.shape[:1] + (self.hidden_dim,), jnp.float32)
        (_, h), out = self.lstm(x, initial_carry=(zeros, zeros), seq_lengths=lengths)
        return jnp.where(mask[..., None], out, 0).astype(x.dtype), h.astype(x.dtype)


class StackedAttention(nnx.Module):
    """Question-guided attention maps over positions, eq. 5: ``a = softmax_s(W_x relu(W_I x_I + W_Q x_Q))``.

    Args:
      image_dim: ``d_I``; ``question_dim``: ``d_Q``; ``attention_dim``: width of ``W_I``/``W_Q``;
      num_glimpses: ``G`` (columns of ``a``); ``dropout``: on the inputs of each projection (SAAA).
    """

    def __init__(self, *, image_dim: int, question_dim: int, attention_dim: int, num_glimpses: int,
                 dropout: float, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.w_image = dense(image_dim, attention_dim, rngs, dtype, use_bias=False)  # W_I (bias in W_Q)
        self.w_question = dense(question_dim, attention_dim, rngs, dtype)  # W_Q
        self.w_x = dense(attention_dim, num_glimpses, rngs, dtype)  # W_x
        self.dropout = Dropout(dropout)

    def __call__(self, x_i: jax.Array, i_mask: jax.Array, x_q: jax.Array, *, deterministic=True, rngs=None):
        """Attention weights.

        Args:
          x_i: ``(batch, s, d_I)``; ``i_mask``: ``(batch, s)`` bool; ``x_q``: ``(batch, d_Q)``.

        Returns:
          ``a`` ``(batch, s, G)`` float32; each column sums to 1 over the valid positions, 0 on masked ones.
        """
        drop = lambda t: self.dropout(t, deterministic=deterministic, rngs=rngs)  # noqa: E731
        h = jax.nn.relu(self.w_image(drop(x_i)) + self.w_question(drop(x_q))[:, None, :])
        logits = self.w_x(drop(h)).astype(jnp.float32)
        logits = jnp.where(i_mask.astype(bool)[..., None], logits, NEG_INF)
        return jax.nn.softmax(logits, axis=1)


def lstm_stacked_attention(cfg, vocab_size: int, *, rngs: nnx.Rngs,
                           dtype: Any = jnp.float32) -> tuple[LstmQuestionEncoder, StackedAttention]:
    """The question encoder and stacked attention of SAAA, as SAAA and FST make them (in this order).

    Args:
      cfg: ``config.model`` (word_dim, lstm_dim ``d_Q``, d_model (the image features' width), attention_dim,
        num_glimpses, dropout).
      vocab_size: ``V``.
      rngs: parameter RNGs.
      dtype: compute dtype.

    Returns:
      ``(question, attention)``: the LSTM whose final state ``(batch, d_Q)`` is the question vector, and the
      :class:`StackedAttention` of the ``(batch, s, d)`` image features guided by it.
    """
    question = LstmQuestionEncoder(vocab_size=vocab_size, word_dim=cfg.word_dim, hidden_dim=cfg.lstm_dim,
                                   dropout=cfg.dropout, rngs=rngs, dtype=dtype)
    attention = StackedAttention(image_dim=cfg.d_model, question_dim=cfg.lstm_dim, attention_dim=cfg.attention_dim,
                                 num_glimpses=cfg.num_glimpses, dropout=cfg.dropout, rngs=rngs, dtype=dtype)
    return question, attention


def stacked_fusion(a: jax.Array, x_i: jax.Array) -> jax.Array:
    """Eq. 6, ``x_f = sum_g a_g ⊗ x_I``: ``a`` ``(batch, s, G)``, ``x_i`` ``(batch, s, d)`` -> ``(batch, s, d)``."""
    return a.sum(-1, keepdims=True).astype(x_i.dtype) * x_i


def glimpse_vectors(a: jax.Array, x_i: jax.Array) -> jax.Array:
    """SAAA's glimpses ``g_k = sum_s a[s, k] x_I[s]`` concatenated: ``(batch, G * d)``."""
    g = jnp.einsum("bsg,bsd->bgd", a.astype(x_i.dtype), x_i)
    return g.reshape(g.shape[0], -1)


def vocab_only_ocr(batch_size: int, num_ocr: int, d_model: int, dtype: Any):
    """OCR stand-ins for a vocabulary-only decoder: zero features ``(batch, N, d)`` and an all-False mask
    ``(batch, N)``, so OCR logits are ``NEG_INF`` and a fed-back copy id embeds as a constant vector."""
    return jnp.zeros((batch_size, num_ocr, d_model), dtype), jnp.zeros((batch_size, num_ocr), bool)


class GuidedAttentionStack(nnx.Module):
    """MCAN's encoder-decoder co-attention (SA on the question, then SA + GA on the image).

    Args:
      d_model, num_heads, ffn_dim, dropout: block sizes; num_layers: ``L`` (per stream).
    """

    def __init__(self, *, d_model: int, num_heads: int, ffn_dim: int, dropout: float, num_layers: int,
                 rngs: nnx.Rngs, dtype: Any = jnp.float32):
        blk = dict(d_model=d_model, num_heads=num_heads, ffn_dim=ffn_dim, dropout=dropout, rngs=rngs, dtype=dtype)
        self.question_self = nnx.List([EncoderBlock(**blk) for _ in range(num_layers)])
        self.image_self = nnx.List([EncoderBlock(**blk) for _ in range(num_layers)])
        self.image_guided = nnx.List([CrossBlock(**blk) for _ in range(num_layers)])
        self.question_norm = layer_norm(d_model, rngs, dtype)
        self.image_norm = layer_norm(d_model, rngs, dtype)

    def __call__(self, x_i, i_mask, x_q, q_mask, *, deterministic=True, rngs=None):
        """Co-attention.

        Args:
          x_i: ``(batch, s, d)``; ``i_mask``: ``(batch, s)`` bool.
          x_q: ``(batch, l, d)``; ``q_mask``: ``(batch, l)`` bool (padding keys never attended).

        Returns:
          ``(x_i (batch, s, d), x_q (batch, l, d))``, each layer-normed.
        """
        kw = dict(deterministic=deterministic, rngs=rngs)
        i_mask, q_mask = i_mask.astype(bool), q_mask.astype(bool)
        for sa in self.question_self:
            x_q = sa(x_q, q_mask, **kw)
        for sa, ga in zip(self.image_self, self.image_guided):
            x_i = sa(x_i, i_mask, **kw)
            x_i = ga(x_i, x_q, q_mask, **kw)  # question-guided attention: image queries, question keys/values
        return self.image_norm(x_i), self.question_norm(x_q)


def lstm_co_attention(cfg, vocab_size: int, *, rngs: nnx.Rngs,
                      dtype: Any = jnp.float32) -> tuple[LstmQuestionEncoder, GuidedAttentionStack]:
    """MCAN's question encoder and co-attention, as MCAN and QuMLAG make them (in this order).

    Args:
      cfg: ``config.model`` (word_dim, d_model (the LSTM's width too), num_heads, ffn_dim, dropout,
        num_fusion_layers).
      vocab_size: ``V``.
      rngs: parameter RNGs.
      dtype: compute dtype.

    Returns:
      ``(question, fusion)``: the LSTM over the question (per-token ``(batch, l, d)``) and the
      :class:`GuidedAttentionStack` of ``num_fusion_layers`` units per stream.
    """
    d = cfg.d_model
    question = LstmQuestionEncoder(vocab_size=vocab_size, word_dim=cfg.word_dim, hidden_dim=d, dropout=cfg.dropout,
                                   rngs=rngs, dtype=dtype)
    fusion = GuidedAttentionStack(d_model=d, num_heads=cfg.num_heads, ffn_dim=cfg.ffn_dim, dropout=cfg.dropout,
                                  num_layers=cfg.num_fusion_layers, rngs=rngs, dtype=dtype)
    return question, fusion


class AttentionReduce(nnx.Module):
    """MCAN's attentional reduction ("AttFlat"): ``(batch, len, d)`` -> ``(batch, flat_dim)``.

    ``alpha = softmax_len(MLP(x))`` (``G`` glimpses, masked), ``x~ = W_m [sum_i alpha_ig x_i]_g``.

    Args:
      d_model; hidden_dim: MLP width; num_glimpses: ``G``; flat_dim: output width; dropout.
    """

    def __init__(self, *, d_model: int, hidden_dim: int, num_glimpses: int, flat_dim: int, dropout: float,
                 rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.mlp_in = dense(d_model, hidden_dim, rngs, dtype)
        self.mlp_out = dense(hidden_dim, num_glimpses, rngs, dtype)
        self.merge = dense(num_glimpses * d_model, flat_dim, rngs, dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x, mask, *, deterministic=True, rngs=None):
        """``x`` ``(batch, len, d)``, ``mask`` ``(batch, len)`` -> ``(batch, flat_dim)``."""
        h = self.dropout(jax.nn.relu(self.mlp_in(x)), deterministic=deterministic, rngs=rngs)
        logits = jnp.where(mask.astype(bool)[..., None], self.mlp_out(h).astype(jnp.float32), NEG_INF)
        alpha = jax.nn.softmax(logits, axis=1).astype(x.dtype)  # (batch, len, G)
        g = jnp.einsum("blg,bld->bgd", alpha, x)
        return self.merge(g.reshape(g.shape[0], -1))
