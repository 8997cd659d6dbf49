"""FST: Fusing by Stacking Together (OpenViVQA paper §4.1, eq. 5-7), and two layers it shares.

Components (Figure 8):

* Image embedding: grid (or region) features ``x_I`` ``(batch, s, d)`` from
  :class:`~openvivqa_jax.models.embeddings.VisionEncoder` (``d_I = d_model``).
* Question embedding: piece embeddings and an LSTM (:class:`LstmQuestionEncoder`); ``x_Q`` ``(batch, d_Q)``
  is the final hidden state at each question's last real token.
* Fusion, stacked attention (:class:`StackedAttention`) with ``G`` glimpses::

      a   = softmax_s( W_x relu(W_I x_I + W_Q x_Q) )          (batch, s, G)     eq. 5
      x_f = sum_{g=1..G} a_g ⊗ x_I                             (batch, s, d)     eq. 6

  ``softmax_s`` is over the spatial positions (masked positions excluded), so each glimpse ``a_g`` is a
  distribution over the ``s`` positions. Two readings of the printed equations are fixed here:

  - eq. 5 has no nonlinearity as printed; without one ``W_x W_Q x_Q`` is the same at every position and
    cancels in the softmax over ``s``, so the attention could not depend on the question. The ReLU of
    SAAA (Kazemi & Elqursh 2017, whom §4.1 follows) and of the authors' code is used.
  - eq. 5 writes ``W_x`` as ``D x D`` (the attention width equals the number of glimpses); here the
    attention width (``attention_dim``) and ``G`` (``num_glimpses``) are separate, eq. 5 being the case
    ``G = attention_dim``. The authors' code uses width 512 and 2 glimpses.

  ``⊗`` is the broadcast multiplication: ``a_g`` ``(s,)`` scales each row of ``x_I`` ``(s, d)``, so
  ``x_f[p] = (sum_g a[p, g]) x_I[p]``, a question-dependent reweighting of the ``s`` positions.
* Answer generator (eq. 7): the transformer decoder (:class:`~openvivqa_jax.models.decoder.AnswerDecoder`,
  vocabulary only) over the memory. **Memory shape**: ``x_f`` as eq. 6 gives it, ``s`` vectors of width
  ``d`` (not ``G`` glimpse vectors: eq. 6 keeps the spatial axis and sums over glimpses). With
  ``append_question`` (the authors' code) a projection of ``x_Q`` is appended as one more memory slot,
  ``[x_f; W x_Q]`` ``(batch, s + 1, d)``, since ``x_f`` alone carries the question only through the
  attention weights; with ``append_question = False`` the memory is exactly eq. 7's ``x_f``. A final
  LayerNorm normalizes the memory.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.base import MemoryDecoderGenerator
from openvivqa_jax.models.decoder import AnswerDecoder
from openvivqa_jax.models.embeddings import vision_encoder
from openvivqa_jax.models.layers import NEG_INF, Dropout, _ln, dense

__all__ = ["FST", "LstmQuestionEncoder", "StackedAttention", "stacked_fusion",
           "glimpse_vectors", "vocab_only_ocr"]




class LstmQuestionEncoder(nnx.Module):
    """Piece embeddings and a one-layer LSTM over the question (SAAA, MCAN, LoRRA, FST, QuMLAG).

    Uses ``nnx.RNN`` over ``nnx.OptimizedLSTMCell`` with ``seq_lengths``, so the final state is read at
    each question's last real token (questions are right-padded; docs/design.md §5).

    Args:
      vocab_size: ``V``; ``word_dim``: embedding width (the papers' 300-d word vectors, trained here);
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


class FST(MemoryDecoderGenerator):
    """FST (paper §4.1). See the module docstring.

    Args:
      cfg: ``config.model`` (d_model, num_heads, ffn_dim, dropout, num_decoder_layers, max_question_len,
        max_answer_len, num_ocr, vision.*, word_dim, lstm_dim, attention_dim, num_glimpses, append_question).
      vocab_size: ``V``.
      rngs: parameter RNGs.
      dtype: compute dtype.
    """

    copies_ocr = False

    def __init__(self, cfg, vocab_size: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        d = cfg.d_model
        self.vocab_size = vocab_size
        self.num_ocr = cfg.num_ocr
        self.d_model = d
        self.append_question = bool(cfg.append_question)
        self.vision = vision_encoder(cfg, rngs=rngs, dtype=dtype)
        self.question = LstmQuestionEncoder(vocab_size=vocab_size, word_dim=cfg.word_dim, hidden_dim=cfg.lstm_dim,
                                            dropout=cfg.dropout, rngs=rngs, dtype=dtype)
        self.attention = StackedAttention(image_dim=d, question_dim=cfg.lstm_dim, attention_dim=cfg.attention_dim,
                                          num_glimpses=cfg.num_glimpses, dropout=cfg.dropout, rngs=rngs, dtype=dtype)
        if self.append_question:
            self.question_proj = dense(cfg.lstm_dim, d, rngs, dtype)
        self.memory_norm = _ln(d, rngs, dtype)
        self.decoder = AnswerDecoder(vocab_size=vocab_size, num_ocr=cfg.num_ocr, d_model=d,
                                     num_layers=cfg.num_decoder_layers, num_heads=cfg.num_heads, ffn_dim=cfg.ffn_dim,
                                     dropout=cfg.dropout, max_len=cfg.max_answer_len, use_pointer=False, rngs=rngs,
                                     dtype=dtype)

    def fuse(self, batch, *, deterministic=True, rngs=None):
        """Eq. 5-6. Returns ``(x_f (batch, s, d), a (batch, s, G), x_i, i_mask, x_q (batch, d_Q))``."""
        kw = dict(deterministic=deterministic, rngs=rngs)
        vis = self.vision(batch, **kw)
        x_i, i_mask = vis["feats"], vis["mask"]
        _, x_q = self.question(batch["question"], batch["question_mask"], **kw)
        a = self.attention(x_i, i_mask, x_q, **kw)
        return stacked_fusion(a, x_i), a, x_i, i_mask, x_q

    def encode(self, batch, *, deterministic=True, rngs=None):
        """Returns ``{memory (batch, s [+ 1], d), memory_mask, ocr_feats (batch, N, d) zeros,
        ocr_mask (batch, N) False, attention (batch, s, G)}``."""
        x_f, a, _, i_mask, x_q = self.fuse(batch, deterministic=deterministic, rngs=rngs)
        memory, mask = x_f, i_mask
        if self.append_question:
            memory = jnp.concatenate([x_f, self.question_proj(x_q)[:, None]], 1)
            mask = jnp.concatenate([i_mask, jnp.ones(i_mask.shape[:1] + (1,), bool)], 1)
        ocr_feats, ocr_mask = vocab_only_ocr(x_f.shape[0], self.num_ocr, self.d_model, memory.dtype)
        return {"memory": self.memory_norm(memory), "memory_mask": mask, "ocr_feats": ocr_feats,
                "ocr_mask": ocr_mask, "attention": a}
