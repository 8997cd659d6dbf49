"""LoRRA: Look, Read, Reason & Answer (Singh et al., CVPR 2019), a classifier baseline (paper §5.1).

Components (Singh et al. §4, as in Pythia's ``lorra`` model):

* Question: piece embeddings + LSTM, then self-attention pooling to ``q`` ``(batch, d)`` (MCAN's
  :class:`~openvivqa_jax.models.encoders.AttentionReduce` stands in for Pythia's conv self-attention).
* Image attention (top-down, :class:`TopDownAttention`):
  ``a = softmax_s(W_t (relu(W_v v) ⊙ relu(W_q q)))`` ``(batch, s, G)``; attended image
  ``v~ = [sum_s a[s, g] v_s]_g`` ``(batch, G * d)``.
* Context attention: the same over the OCR token features ``x_S`` ``(batch, N, d)`` (``OcrEmbedding``:
  text embedding, PHOC, appearance, box) with ``G_c`` glimpses, padding tokens masked: ``c~``.
* Combine (Pythia ``non_linear_element_multiply``): ``f = relu(W_f [v~; c~]) ⊙ relu(W_g q)``.
* Classifier: ``W_2 relu(W_1 f)`` over ``K + N`` classes, the ``K`` top training answers then one class
  per OCR slot ("answer with OCR token ``j``"); padding slots are masked in the loss and in prediction.

Loss: sigmoid BCE against the soft scores of all valid classes, OCR classes included (Pythia
``logit_bce``); see :mod:`openvivqa_jax.models.classifier`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.classifier import ClassifierModel
from openvivqa_jax.models.embeddings import OcrEmbedding
from openvivqa_jax.models.encoders import AttentionReduce, LstmQuestionEncoder, glimpse_vectors
from openvivqa_jax.models.layers import NEG_INF, Dropout, dense

__all__ = ["LoRRA", "TopDownAttention"]


class TopDownAttention(nnx.Module):
    """Top-down attention with the non-linear element-wise combination (Pythia / LoRRA).

    Args:
      feature_dim: width of the attended features; query_dim: width of ``q``; hidden_dim: combine width;
      num_glimpses: ``G``; dropout: on the combined features.
    """

    def __init__(self, *, feature_dim: int, query_dim: int, hidden_dim: int, num_glimpses: int, dropout: float,
                 rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.w_feature = dense(feature_dim, hidden_dim, rngs, dtype)
        self.w_query = dense(query_dim, hidden_dim, rngs, dtype)
        self.w_logit = dense(hidden_dim, num_glimpses, rngs, dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x, mask, q, *, deterministic=True, rngs=None):
        """``x`` ``(batch, n, f)``, ``mask`` ``(batch, n)``, ``q`` ``(batch, query_dim)`` -> ``a`` ``(batch, n, G)``
        float32, a distribution over the valid positions per glimpse (all zeros when none is valid)."""
        h = jax.nn.relu(self.w_feature(x)) * jax.nn.relu(self.w_query(q))[:, None, :]
        logits = self.w_logit(self.dropout(h, deterministic=deterministic, rngs=rngs)).astype(jnp.float32)
        m = mask.astype(bool)[..., None]
        a = jax.nn.softmax(jnp.where(m, logits, NEG_INF), axis=1)
        return jnp.where(m, a, 0.0)


class LoRRA(ClassifierModel):
    """LoRRA classifier over ``K`` answers + ``N`` OCR slots. See the module docstring.

    Args:
      cfg: ``config.model`` (d_model, dropout, vision.*, word_dim, lstm_dim, attention_dim, num_glimpses,
        context_glimpses, classifier_dim, num_answers, num_ocr, phoc_dim, ocr_features, ocr_extra_features,
        classifier_loss (default ``bce``)).
      vocab_size: ``V``.
    """

    def __init__(self, cfg, vocab_size: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        d = cfg.d_model
        super().__init__(cfg, vocab_size, default_loss="bce", num_ocr_classes=cfg.num_ocr, rngs=rngs, dtype=dtype)
        self.question = LstmQuestionEncoder(vocab_size=vocab_size, word_dim=cfg.word_dim, hidden_dim=cfg.lstm_dim,
                                            dropout=cfg.dropout, rngs=rngs, dtype=dtype)
        self.question_reduce = AttentionReduce(d_model=cfg.lstm_dim, hidden_dim=cfg.lstm_dim,
                                               num_glimpses=cfg.num_glimpses, flat_dim=d, dropout=cfg.dropout,
                                               rngs=rngs, dtype=dtype)
        self.ocr = OcrEmbedding(vocab_size=vocab_size, d_model=d, phoc_dim=cfg.phoc_dim,
                                appearance_dim=self.vision.raw_dim, features=tuple(cfg.ocr_features),
                                extra_dims=dict(cfg.get("ocr_extra_features", {}) or {}), dropout=cfg.dropout,
                                rngs=rngs, dtype=dtype)
        att = dict(feature_dim=d, query_dim=d, hidden_dim=cfg.attention_dim, dropout=cfg.dropout, rngs=rngs,
                   dtype=dtype)
        self.image_attention = TopDownAttention(num_glimpses=cfg.num_glimpses, **att)
        self.context_attention = TopDownAttention(num_glimpses=cfg.context_glimpses, **att)
        fused_in = (cfg.num_glimpses + cfg.context_glimpses) * d
        self.combine_features = dense(fused_in, cfg.classifier_dim, rngs, dtype)
        self.combine_question = dense(d, cfg.classifier_dim, rngs, dtype)
        self.hidden = dense(cfg.classifier_dim, cfg.classifier_dim, rngs, dtype)
        self.head = dense(cfg.classifier_dim, cfg.num_answers + cfg.num_ocr, rngs, dtype)
        self.dropout = Dropout(cfg.dropout)

    def __call__(self, batch, *, deterministic=True, rngs=None):
        """Logits ``(batch, K + N)`` float32 (OCR padding slots are masked by :meth:`output_mask`)."""
        kw = dict(deterministic=deterministic, rngs=rngs)
        vis = self.vision(batch, **kw)
        q_mask = batch["question_mask"].astype(bool)
        x_q, _ = self.question(batch["question"], q_mask, **kw)
        q = self.question_reduce(x_q, q_mask, **kw)
        a_img = self.image_attention(vis["feats"], vis["mask"], q, **kw)
        x_s = self.ocr(batch, vis, **kw)
        a_ctx = self.context_attention(x_s, batch["ocr_mask"], q, **kw)
        fused = jnp.concatenate([glimpse_vectors(a_img, vis["feats"]), glimpse_vectors(a_ctx, x_s)], -1)
        f = jax.nn.relu(self.combine_features(fused)) * jax.nn.relu(self.combine_question(q))
        h = jax.nn.relu(self.hidden(self.dropout(f, **kw)))
        return self.head(self.dropout(h, **kw)).astype(jnp.float32)
