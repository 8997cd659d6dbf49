"""A region counter: how many of the regions a counting question names, as one decoder memory token.

A transformer decoder reads the image through a softmax over its memory slots, which cannot tell one matching
object from three; counting modules score each region on its own instead and add the scores up (Zhang et al.,
ICLR 2018; Trott et al., ICLR 2018). Class-free region proposals (:mod:`openvivqa_jax.data.proposals`) cut an
object into parts (a person is a head, a shirt and legs), so the count is of the one part per object that the
question's noun picks out, and which part that is has to be learned from the counts alone: many more counting
questions than a batch of mixed questions carries. So this module is small and separate:

* each region's input ``x_s`` = its features and box ``(R, F + 4)``, standardized by per-feature statistics of
  the training split's regions (set once before training by the training loop, then kept as set);
* a FiLM-conditioned MLP (Perez et al., AAAI 2018) scores it: ``h = relu(W_1 x_s + q_1)``,
  ``e_s = w_e . relu((W_2 h + b_2) * (1 + q_2))``, where ``q_1``, ``q_2`` are means of the question pieces'
  own embeddings, so the question picks which regions count;
* the count is ``c = sum_s sigmoid(e_s)`` over the valid regions;
* trained only by a Huber loss against the count the answer gives (``có ba người`` -> 3,
  :func:`openvivqa_jax.text.counts.answer_count`) on a stream of the training split's counting questions
  beside the main batches (``counting_*`` fields of the batch, made by the training input), the MLP and the
  question embeddings with an optimizer of their own (a constant learning rate;
  :func:`openvivqa_jax.training.state.counter_optimizer`);
* read by the model as one memory token: the count embedded by linear interpolation between the integers
  ``0..max_count`` (:func:`openvivqa_jax.models.grounding.soft_count_embedding`), projected to ``d``, with the
  answer loss's gradient stopped at the count, so the decoder learns to say the number the counter gives.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.data.proposals import read_feature_dim
from openvivqa_jax.models.grounding import count_loss, soft_count_embedding
from openvivqa_jax.models.layers import dense, layer_norm

__all__ = ["RegionCounter", "region_counter", "counter_weight", "COUNTING_FIELDS"]

#: The batch fields of the counting stream: ``counting_`` + these (the stream's own batch size first).
COUNTING_FIELDS = ("region_features", "region_boxes", "region_mask", "question", "question_mask", "count_target")


class RegionCounter(nnx.Module):
    """Question-conditioned count of regions (module doc).

    Args:
      feature_dim: ``F``, the width of a region's features (box excluded).
      vocab_size: question pieces' vocabulary size.
      hidden_dim: ``H``, the width of the scoring MLP and of the question embeddings.
      d_model: width of the memory token.
      max_count: ``K``, the largest count bin of the token's embedding.
      score_bias: the score's starting bias; -4 starts the count near ``0.018 R`` (about 1 for 64 regions).
      rngs: parameter RNGs; dtype: compute dtype of the token (the counter itself runs in float32).
    """

    def __init__(self, *, feature_dim: int, vocab_size: int, hidden_dim: int, d_model: int, max_count: int,
                 rngs: nnx.Rngs, dtype: Any = jnp.float32, score_bias: float = -4.0):
        self.feature_dim = int(feature_dim)
        n_in = feature_dim + 4
        self.max_count = int(max_count)
        self.dtype = dtype
        self.input_mean = nnx.Param(jnp.zeros((n_in,), jnp.float32))
        self.input_std = nnx.Param(jnp.ones((n_in,), jnp.float32))
        self.w1 = dense(n_in, hidden_dim, rngs, jnp.float32)
        self.w2 = dense(hidden_dim, hidden_dim, rngs, jnp.float32)
        self.score = dense(hidden_dim, 1, rngs, jnp.float32)
        self.score.bias[...] = jnp.full((1,), score_bias, jnp.float32)
        init = nnx.initializers.normal(0.1)
        self.q_add = nnx.Param(init(rngs.params(), (vocab_size, hidden_dim), jnp.float32))
        self.q_mul = nnx.Param(init(rngs.params(), (vocab_size, hidden_dim), jnp.float32))
        self.token = dense(max_count + 1, d_model, rngs, dtype)
        self.norm = layer_norm(d_model, rngs, dtype)

    def inputs(self, features: jax.Array, boxes: jax.Array) -> jax.Array:
        """``(batch, R, F')`` stored features (``F' >= F``; the first ``F`` are read) and ``(batch, R, 4)`` boxes
        -> ``(batch, R, F + 4)`` float32, unstandardized."""
        return jnp.concatenate([features[..., :self.feature_dim].astype(jnp.float32), boxes.astype(jnp.float32)],
                               -1)

    def __call__(self, features: jax.Array, boxes: jax.Array, mask: jax.Array, question: jax.Array,
                 question_mask: jax.Array) -> jax.Array:
        """Soft counts.

        Args:
          features: ``(batch, R, F)`` region features; boxes: ``(batch, R, 4)``; mask: ``(batch, R)`` bool.
          question: ``(batch, l)`` int piece ids; question_mask: ``(batch, l)`` bool.

        Returns:
          ``(batch,)`` float32, ``sum_s sigmoid(e_s)`` over the valid regions.
        """
        x = (self.inputs(features, boxes) - self.input_mean[...]) / self.input_std[...]
        qm = question_mask.astype(jnp.float32)[..., None]
        n = jnp.maximum(qm.sum(1), 1.0)
        q_add = (self.q_add[...][question] * qm).sum(1) / n
        q_mul = (self.q_mul[...][question] * qm).sum(1) / n
        h = jax.nn.relu(self.w1(x) + q_add[:, None])
        h = jax.nn.relu(self.w2(h) * (1.0 + q_mul[:, None]))
        e = self.score(h)[..., 0]
        return jnp.sum(jnp.where(mask.astype(bool), jax.nn.sigmoid(e), 0.0), axis=1)

    def memory_token(self, counts: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(batch,)`` counts -> ``(tokens (batch, 1, d), mask (batch, 1) bool)``, the answer loss's gradient
        stopped at the counts."""
        emb = soft_count_embedding(jax.lax.stop_gradient(counts), self.max_count)
        tok = self.norm(self.token(emb.astype(self.dtype)))
        return tok[:, None], jnp.ones((counts.shape[0], 1), bool)

    def stream_loss(self, batch: dict) -> tuple[jax.Array, jax.Array]:
        """The Huber count loss (:func:`openvivqa_jax.models.grounding.count_loss`) on the batch's counting stream
        (the ``counting_`` fields of :data:`COUNTING_FIELDS`) and the share of its questions counted exactly
        (the count rounded), both float32 scalars."""
        f = {k: batch[f"counting_{k}"] for k in COUNTING_FIELDS}
        c = self(f["region_features"], f["region_boxes"], f["region_mask"], f["question"], f["question_mask"])
        t = f["count_target"]
        has = t >= 1
        exact = jnp.sum(jnp.where(has, jnp.round(c) == t, False)) / jnp.maximum(jnp.sum(has), 1)
        return count_loss(c, t), exact.astype(jnp.float32)


def counter_weight(model_cfg) -> float:
    """``model.counter.weight`` of a model config (0.0 when the config has no ``counter`` entry, as the paper
    models' own configs): the counter is on, with its stream and its loss, when it is above 0."""
    return float((model_cfg.get("counter") or {}).get("weight", 0.0) or 0.0)


def region_counter(cfg, *, feature_dim: int, vocab_size: int, rngs: nnx.Rngs, dtype: Any) -> RegionCounter | None:
    """The :class:`RegionCounter` of ``config.model.counter`` (``weight`` > 0; ``hidden_dim``, ``max_count``;
    ``proposal_features``: ``"all"``, the default, reads a region's stored features whole, ``"objects"`` with
    class-free proposals only the segment's own colour, area and shape,
    :func:`openvivqa_jax.data.proposals.read_feature_dim`), or None when the weight is 0 or the config has no ``counter`` entry.

    Raises:
      ValueError: a negative weight, a ``max_count`` below 1, an unknown ``proposal_features``, or a counter
        over a vision that has no regions.
    """
    c = cfg.get("counter")
    weight = counter_weight(cfg)
    if weight < 0:
        raise ValueError(f"model.counter.weight must be >= 0, got {weight}")
    if not weight:
        return None
    if cfg.vision.kind not in ("proposals", "region"):
        raise ValueError(f"model.counter counts regions; model.vision.kind={cfg.vision.kind!r} has none (use "
                         "'proposals', which makes them from the pixels, or 'region'), or set "
                         "--config.model.counter.weight=0")
    max_count = int(c.get("max_count", 10))
    if max_count < 1:
        raise ValueError(f"model.counter.max_count must be >= 1, got {max_count}")
    feature_dim = read_feature_dim(c.get("proposal_features", "all"), cfg.vision.kind, feature_dim, "model.counter")
    return RegionCounter(feature_dim=feature_dim, vocab_size=vocab_size, hidden_dim=int(c.get("hidden_dim", 128)),
                         d_model=cfg.d_model, max_count=max_count, rngs=rngs, dtype=dtype)
