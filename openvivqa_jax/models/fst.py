"""FST: Fusing by Stacking Together (OpenViVQA paper §4.1, eq. 5-7).

Components (Figure 8):

* Image embedding: grid (or region) features ``x_I`` ``(batch, s, d)`` from
  :class:`~openvivqa_jax.models.embeddings.VisionEncoder` (``d_I = d_model``).
* Question embedding: piece embeddings and an LSTM
  (:class:`~openvivqa_jax.models.encoders.LstmQuestionEncoder`); ``x_Q`` ``(batch, d_Q)`` is the final
  hidden state at each question's last real token.
* Fusion, stacked attention (:class:`~openvivqa_jax.models.encoders.StackedAttention`) with ``G``
  glimpses::

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

import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.base import MemoryDecoderGenerator
from openvivqa_jax.models.decoder import answer_decoder
from openvivqa_jax.models.embeddings import vision_encoder
from openvivqa_jax.models.encoders import lstm_stacked_attention, stacked_fusion, vocab_only_ocr
from openvivqa_jax.models.layers import dense, layer_norm

__all__ = ["FST"]


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
        self._set_sizes(cfg, vocab_size)
        self.append_question = bool(cfg.append_question)
        self.vision = vision_encoder(cfg, rngs=rngs, dtype=dtype)
        self.question, self.attention = lstm_stacked_attention(cfg, vocab_size, rngs=rngs, dtype=dtype)
        if self.append_question:
            self.question_proj = dense(cfg.lstm_dim, d, rngs, dtype)
        self.memory_norm = layer_norm(d, rngs, dtype)
        self.decoder = answer_decoder(cfg, vocab_size, use_pointer=False, rngs=rngs, dtype=dtype)

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
