"""MCAN: Deep Modular Co-Attention Networks (Yu et al., CVPR 2019), a classifier baseline (paper §5.1).

Components (MCAN's encoder-decoder variant, the one the MCAN paper reports best):

* Question: piece embeddings + LSTM (:class:`~openvivqa_jax.models.encoders.LstmQuestionEncoder`),
  per-token ``x_Q`` ``(batch, l, d)``.
* Image: region (or grid) features projected to ``d`` (``VisionEncoder``), ``x_I`` ``(batch, s, d)``.
* :class:`~openvivqa_jax.models.encoders.GuidedAttentionStack`: ``L`` self-attention (SA) units on the
  question (the encoder), then ``L`` SGA units on the image, each SA on the image followed by guided
  attention (GA) with the image as query and the encoder's final question features as key/value (the
  decoder). QuMLAG (§4.2) reuses it.
* :class:`~openvivqa_jax.models.encoders.AttentionReduce` (MCAN's "AttFlat", §3.4): per stream, an MLP
  scores each position, a masked softmax over positions gives ``G`` glimpses, their weighted sums are
  concatenated and projected to ``flat_dim``.
* Fusion and classifier (MCAN eq. 12-13): ``z = LayerNorm(W_q q~ + W_i i~)``, logits ``W_z z`` over the
  ``K`` top training answers.

Loss: sigmoid BCE against the soft scores (MCAN's code), see :mod:`openvivqa_jax.models.classifier`.
The transformer units are the shared pre-LN blocks of :mod:`openvivqa_jax.models.layers` (MCAN used
post-LN); each stream gets a final LayerNorm.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.classifier import ClassifierModel
from openvivqa_jax.models.encoders import AttentionReduce, lstm_co_attention
from openvivqa_jax.models.layers import dense, layer_norm

__all__ = ["MCAN"]


class MCAN(ClassifierModel):
    """MCAN classifier. See the module docstring.

    Args:
      cfg: ``config.model`` (d_model, num_heads, ffn_dim, dropout, num_fusion_layers, vision.*, word_dim,
        num_answers, classifier_dim (``flat_dim``), num_glimpses (AttFlat glimpses), classifier_loss
        (default ``bce``)).
      vocab_size: ``V``.
    """

    def __init__(self, cfg, vocab_size: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        d = cfg.d_model
        super().__init__(cfg, vocab_size, default_loss="bce", rngs=rngs, dtype=dtype)
        self.question, self.fusion = lstm_co_attention(cfg, vocab_size, rngs=rngs, dtype=dtype)
        red = dict(d_model=d, hidden_dim=d, num_glimpses=cfg.num_glimpses, flat_dim=cfg.classifier_dim,
                   dropout=cfg.dropout, rngs=rngs, dtype=dtype)
        self.question_reduce = AttentionReduce(**red)
        self.image_reduce = AttentionReduce(**red)
        self.out_norm = layer_norm(cfg.classifier_dim, rngs, dtype)
        self.head = dense(cfg.classifier_dim, cfg.num_answers, rngs, dtype)

    def __call__(self, batch, *, deterministic=True, rngs=None):
        """Logits ``(batch, K)`` float32."""
        kw = dict(deterministic=deterministic, rngs=rngs)
        vis = self.vision(batch, **kw)
        q_mask = batch["question_mask"].astype(bool)
        x_q, _ = self.question(batch["question"], q_mask, **kw)
        x_i, x_q = self.fusion(vis["feats"], vis["mask"], x_q, q_mask, **kw)
        z = self.out_norm(self.question_reduce(x_q, q_mask, **kw) + self.image_reduce(x_i, vis["mask"], **kw))
        return self.head(z).astype(jnp.float32)
