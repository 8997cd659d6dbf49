"""MCAN: Deep Modular Co-Attention Networks (Yu et al., CVPR 2019), a classifier baseline (paper §5.1).

Components (MCAN's encoder-decoder variant, the one the MCAN paper reports best):

* Question: piece embeddings + LSTM (:class:`~openvivqa_jax.models.fst.LstmQuestionEncoder`), per-token
  ``x_Q`` ``(batch, l, d)``.
* Image: region (or grid) features projected to ``d`` (``VisionEncoder``), ``x_I`` ``(batch, s, d)``.
* :class:`GuidedAttentionStack`: ``L`` self-attention (SA) units on the question (the encoder), then
  ``L`` SGA units on the image, each SA on the image followed by guided attention (GA) with the image as
  query and the encoder's final question features as key/value (the decoder). QuMLAG (§4.2) reuses it.
* :class:`AttentionReduce` (MCAN's "AttFlat", §3.4): per stream, an MLP scores each position, a masked
  softmax over positions gives ``G`` glimpses, their weighted sums are concatenated and projected to
  ``flat_dim``.
* Fusion and classifier (MCAN eq. 12-13): ``z = LayerNorm(W_q q~ + W_i i~)``, logits ``W_z z`` over the
  ``K`` top training answers.

Loss: sigmoid BCE against the soft scores (MCAN's code), see :mod:`openvivqa_jax.models.classifier`.
The transformer units are the shared pre-LN blocks of :mod:`openvivqa_jax.models.layers` (MCAN used
post-LN); each stream gets a final LayerNorm.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.classifier import ClassifierModel
from openvivqa_jax.models.fst import LstmQuestionEncoder, vision_encoder
from openvivqa_jax.models.layers import NEG_INF, CrossBlock, Dropout, EncoderBlock, _ln, dense

__all__ = ["MCAN", "GuidedAttentionStack", "AttentionReduce"]


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
        self.question_norm = _ln(d_model, rngs, dtype)
        self.image_norm = _ln(d_model, rngs, dtype)

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
        self.vocab_size = vocab_size
        self.num_answers = cfg.num_answers
        self.num_ocr_classes = 0
        self._set_loss(cfg, "bce")
        self.vision = vision_encoder(cfg, rngs=rngs, dtype=dtype)
        self.question = LstmQuestionEncoder(vocab_size=vocab_size, word_dim=cfg.word_dim, hidden_dim=d,
                                            dropout=cfg.dropout, rngs=rngs, dtype=dtype)
        self.fusion = GuidedAttentionStack(d_model=d, num_heads=cfg.num_heads, ffn_dim=cfg.ffn_dim,
                                           dropout=cfg.dropout, num_layers=cfg.num_fusion_layers, rngs=rngs,
                                           dtype=dtype)
        red = dict(d_model=d, hidden_dim=d, num_glimpses=cfg.num_glimpses, flat_dim=cfg.classifier_dim,
                   dropout=cfg.dropout, rngs=rngs, dtype=dtype)
        self.question_reduce = AttentionReduce(**red)
        self.image_reduce = AttentionReduce(**red)
        self.out_norm = _ln(cfg.classifier_dim, rngs, dtype)
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
