"""SAAA: Show, Ask, Attend, and Answer (Kazemi & Elqursh 2017), a classifier baseline (paper §5.1).

Components (Kazemi & Elqursh §3):

* Image: grid (or region) features ``x_I`` ``(batch, s, d)`` (``VisionEncoder``).
* Question: piece embeddings + LSTM, final state ``x_Q`` ``(batch, d_Q)``
  (:class:`~openvivqa_jax.models.encoders.LstmQuestionEncoder`).
* Stacked attention (their eq. 2-3; the same module as FST's eq. 5,
  :class:`~openvivqa_jax.models.encoders.StackedAttention`): ``a = softmax_s(W_x relu(W_I x_I + W_Q x_Q))``
  ``(batch, s, G)``; glimpses ``g_k = sum_s a[s, k] x_I[s]``.
* Classifier (their eq. 4-5): ``logits = W_2 relu(W_1 [g_1; ...; g_G; x_Q])`` over ``K`` answers (dropout
  before each layer).

Loss: softmax cross-entropy against the normalized soft scores, i.e. the average negative
log-likelihood of the ground-truth answers (their §3.4); see :mod:`openvivqa_jax.models.classifier`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.classifier import ClassifierModel
from openvivqa_jax.models.encoders import glimpse_vectors, lstm_stacked_attention
from openvivqa_jax.models.layers import Dropout, dense

__all__ = ["SAAA"]


class SAAA(ClassifierModel):
    """SAAA classifier. See the module docstring.

    Args:
      cfg: ``config.model`` (d_model, dropout, vision.*, word_dim, lstm_dim, attention_dim, num_glimpses,
        classifier_dim, num_answers, classifier_loss (default ``softmax``)).
      vocab_size: ``V``.
    """

    def __init__(self, cfg, vocab_size: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        d = cfg.d_model
        super().__init__(cfg, vocab_size, default_loss="softmax", rngs=rngs, dtype=dtype)
        self.question, self.attention = lstm_stacked_attention(cfg, vocab_size, rngs=rngs, dtype=dtype)
        self.hidden = dense(cfg.num_glimpses * d + cfg.lstm_dim, cfg.classifier_dim, rngs, dtype)
        self.head = dense(cfg.classifier_dim, cfg.num_answers, rngs, dtype)
        self.dropout = Dropout(cfg.dropout)

    def __call__(self, batch, *, deterministic=True, rngs=None):
        """Logits ``(batch, K)`` float32."""
        kw = dict(deterministic=deterministic, rngs=rngs)
        vis = self.vision(batch, **kw)
        _, x_q = self.question(batch["question"], batch["question_mask"], **kw)
        a = self.attention(vis["feats"], vis["mask"], x_q, **kw)
        h = jnp.concatenate([glimpse_vectors(a, vis["feats"]), x_q], -1)
        h = jax.nn.relu(self.hidden(self.dropout(h, **kw)))
        return self.head(self.dropout(h, **kw)).astype(jnp.float32)
