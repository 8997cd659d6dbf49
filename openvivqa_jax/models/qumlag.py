"""QuMLAG: Question-guided MultiModal Learning and Answer Generation (OpenViVQA paper §4.2, eq. 8).

Components (Figure 9):

* Image embedding: region features through a fully connected layer, ``x_I`` ``(batch, s, d)``
  (``VisionEncoder``; grid features stand in on the synthetic data).
* Question embedding: piece embeddings (the paper's FastText vectors with ``model.question_embedding =
  "fasttext"``, :mod:`openvivqa_jax.models.pretrained`; else learned from a random start) and an LSTM,
  per-token ``x_Q`` ``(batch, l, d)`` (:class:`~openvivqa_jax.models.encoders.LstmQuestionEncoder`).
* MultiModal fusion, the guided-attention (GA) mechanism of MCAN
  (:class:`~openvivqa_jax.models.encoders.GuidedAttentionStack`, ``num_fusion_layers`` units per stream):
  self-attention refining ``x_Q``; self-attention refining ``x_I``; question-guided attention with
  ``x_I`` as query and ``x_Q`` as key and value (padding question tokens masked). Then
  ``x_f = [x_I; x_Q]`` ``(batch, s + l, d)`` with mask ``[i_mask; q_mask]``.
* Answer generator (eq. 8): the transformer decoder over ``x_f``, vocabulary only (no pointer).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.base import MemoryDecoderGenerator
from openvivqa_jax.models.decoder import answer_decoder
from openvivqa_jax.models.embeddings import vision_encoder
from openvivqa_jax.models.encoders import lstm_co_attention, vocab_only_ocr

__all__ = ["QuMLAG"]


class QuMLAG(MemoryDecoderGenerator):
    """QuMLAG (paper §4.2). See the module docstring.

    Args:
      cfg: ``config.model`` (d_model, num_heads, ffn_dim, dropout, num_fusion_layers, num_decoder_layers,
        max_answer_len, num_ocr, vision.*, word_dim).
      vocab_size: ``V``.
      rngs: parameter RNGs.
      dtype: compute dtype.
    """

    copies_ocr = False

    def __init__(self, cfg, vocab_size: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self._set_sizes(cfg, vocab_size)
        self.vision = vision_encoder(cfg, rngs=rngs, dtype=dtype)
        self.question, self.fusion = lstm_co_attention(cfg, vocab_size, rngs=rngs, dtype=dtype)
        self.decoder = answer_decoder(cfg, vocab_size, use_pointer=False, rngs=rngs, dtype=dtype)

    def encode(self, batch, *, deterministic=True, rngs=None):
        """Fusion module. Returns ``{memory (batch, s + l, d), memory_mask (batch, s + l),
        ocr_feats (batch, N, d) zeros, ocr_mask (batch, N) False}``."""
        kw = dict(deterministic=deterministic, rngs=rngs)
        vis = self.vision(batch, **kw)
        q_mask = batch["question_mask"].astype(bool)
        x_q, _ = self.question(batch["question"], q_mask, **kw)
        x_i, x_q = self.fusion(vis["feats"], vis["mask"], x_q, q_mask, **kw)
        memory = jnp.concatenate([x_i, x_q], 1)
        mask = jnp.concatenate([vis["mask"].astype(bool), q_mask], 1)
        ocr_feats, ocr_mask = vocab_only_ocr(memory.shape[0], self.num_ocr, self.d_model, memory.dtype)
        return {"memory": memory, "memory_mask": mask, "ocr_feats": ocr_feats, "ocr_mask": ocr_mask}
