"""Question-guided visual glimpses: the image cells (or regions) the question names, as decoder memory tokens.

A transformer answer decoder finds the object a question names only through its cross-attention over every
memory slot, a search it learns slowly (docs/results.md, "non-text questions"). This module gives it that object
in a few fixed memory slots instead: ``G`` glimpses, each an attention over the image guided by the question,
appended to the memory, as the stacked attention of SAAA (Kazemi & Elqursh 2017) and MCAN's attentional
reduction (Yu et al. 2019) pool an image for a classifier. Each glimpse token carries

* the attended features ``v_g = sum_s softmax_s(e_gs) x_s`` (the object's appearance and, through the cells'
  box embedding, its place: its colour and side);
* a soft count ``c_g = sum_s sigmoid(e_gs)`` over the valid cells, embedded by linear interpolation between
  the integers ``0..max_count`` (the unnormalized attention of counting modules such as Zhang et al. 2018:
  a softmax alone cannot tell one matching object from three).

The scores are an MLP of each cell and the pooled question, ``e_s = W_e relu(W_x x_s + W_q q)``, so a score can
require several things at once (a kind *and* a side). The module reads the image features before the fusion
layers, so the path from the pixels to the answer is short.

Option, training only: the count loss (``count_loss`` weight > 0) supervises the first glimpse's soft count
``c_0`` directly with the count the answer gives a counting question (``có ba người`` -> 3, the Vietnamese
rules of :func:`openvivqa_jax.text.counts.answer_count`), a Huber loss, so which regions to count (one
part of each object: a segmentation cuts a person into head, shirt and legs) is learned from the count itself
instead of only through the answer tokens.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from openvivqa_jax.models.encoders import AttentionReduce
from openvivqa_jax.models.layers import NEG_INF, Dropout, dense, layer_norm

__all__ = ["VisualGlimpses", "soft_count_embedding", "visual_glimpses", "count_loss", "counting_targets"]


def soft_count_embedding(count: jax.Array, max_count: int) -> jax.Array:
    """Linear interpolation of a real count between the integers ``0..max_count`` (a two-hot vector).

    Args:
      count: ``(...)`` float, non-negative; values above ``max_count`` are clipped to it.
      max_count: the largest integer bin ``K``.

    Returns:
      ``(..., K + 1)`` float32 weights summing to 1: ``relu(1 - |clip(count) - k|)`` for ``k = 0..K``.
    """
    c = jnp.clip(count.astype(jnp.float32), 0.0, float(max_count))
    return jax.nn.relu(1.0 - jnp.abs(c[..., None] - jnp.arange(max_count + 1, dtype=jnp.float32)))


class VisualGlimpses(nnx.Module):
    """``G`` question-guided glimpses over the image as memory tokens (see the module docstring).

    Args:
      d_model: width ``d`` of the image features, the question tokens and the output tokens.
      num_glimpses: ``G``.
      hidden_dim: width of the score MLP.
      max_count: the largest count bin of the soft count embedding.
      dropout: on the score MLP's hidden units.
      count_loss_weight: weight of the training-only count loss of the first glimpse (module doc); 0: none.
      score_bias: the score MLP's starting output bias. The soft count is ``sum_s sigmoid(e_s)``: with a zero
        bias it starts near ``S / 2`` (32 for 64 regions), above ``max_count``, where the clipped count embedding
        passes no gradient; -4 starts it near ``0.018 S`` (about 1 for 64 regions). The softmax weights do not
        depend on it.
      rngs: parameter RNGs; dtype: compute dtype.
    """

    def __init__(self, *, d_model: int, num_glimpses: int, hidden_dim: int, max_count: int, dropout: float,
                 rngs: nnx.Rngs, dtype: Any = jnp.float32, score: str = "mlp", score_bias: float = -4.0,
                 count_loss_weight: float = 0.0):
        self.score_kind = score
        self.count_loss_weight = float(count_loss_weight)
        self.num_glimpses = int(num_glimpses)
        self.max_count = int(max_count)
        self.question_pool = AttentionReduce(d_model=d_model, hidden_dim=d_model, num_glimpses=1, flat_dim=d_model,
                                             dropout=dropout, rngs=rngs, dtype=dtype)
        self.w_image = dense(d_model, hidden_dim, rngs, dtype, use_bias=False)
        self.w_question = dense(d_model, hidden_dim, rngs, dtype)
        self.w_score = dense(hidden_dim, num_glimpses, rngs, dtype)
        self.w_score.bias.value = jnp.full((num_glimpses,), score_bias, jnp.float32)
        if score in ("dot", "both"):
            self.key = dense(d_model, num_glimpses * hidden_dim, rngs, dtype)
            self.query = dense(d_model, num_glimpses * hidden_dim, rngs, dtype)
        self.value = dense(d_model, d_model, rngs, dtype)
        self.count = dense(max_count + 1, d_model, rngs, dtype)
        self.where = dense(4, d_model, rngs, dtype)
        self.slot = nnx.Param(jax.random.normal(rngs.params(), (num_glimpses, d_model), jnp.float32) * 0.02)
        self.norm = layer_norm(d_model, rngs, dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x_i: jax.Array, i_mask: jax.Array, x_q: jax.Array, q_mask: jax.Array, boxes: jax.Array, *,
                 deterministic: bool = True, rngs: nnx.Rngs | None = None) -> dict[str, jax.Array]:
        """Glimpses of the image guided by the question.

        Args:
          x_i: ``(batch, S, d)`` image cells or regions; ``i_mask``: ``(batch, S)`` bool, valid ones.
          x_q: ``(batch, l, d)`` question tokens; ``q_mask``: ``(batch, l)`` bool.

        Returns:
          ``{"tokens": (batch, G, d), "mask": (batch, G) bool (all True), "weights": (batch, S, G) float32
          (softmax over the valid positions, 0 on the others), "counts": (batch, G) float32}``.
        """
        i_mask = i_mask.astype(bool)
        q = self.question_pool(x_q, q_mask, deterministic=deterministic, rngs=rngs)
        h = jax.nn.relu(self.w_image(x_i) + self.w_question(q)[:, None, :])
        h = self.dropout(h, deterministic=deterministic, rngs=rngs)
        scores = self.w_score(h).astype(jnp.float32)  # (batch, S, G)
        if self.score_kind in ("dot", "both"):
            b, n = x_i.shape[:2]
            k = self.key(x_i).reshape(b, n, self.num_glimpses, -1)
            qq = self.query(q).reshape(b, self.num_glimpses, -1)
            dot = jnp.einsum("bsgh,bgh->bsg", k, qq).astype(jnp.float32) / jnp.sqrt(k.shape[-1])
            scores = dot if self.score_kind == "dot" else scores + dot
        weights = jax.nn.softmax(jnp.where(i_mask[..., None], scores, NEG_INF), axis=1)
        counts = jnp.sum(jnp.where(i_mask[..., None], jax.nn.sigmoid(scores), 0.0), axis=1)  # (batch, G)
        pooled = jnp.einsum("bsg,bsd->bgd", weights.astype(x_i.dtype), x_i)
        count_emb = soft_count_embedding(counts, self.max_count).astype(x_i.dtype)
        where = jnp.einsum("bsg,bsk->bgk", weights, boxes.astype(jnp.float32)).astype(x_i.dtype)
        tokens = self.norm(self.value(pooled) + self.count(count_emb) + self.where(where)
                           + self.slot[...].astype(x_i.dtype)[None])
        mask = jnp.ones(tokens.shape[:2], bool)
        return {"tokens": tokens, "mask": mask, "weights": weights, "counts": counts}


def counting_targets(batch: dict) -> jax.Array:
    """The batch's ``count_target`` ``(batch,)`` int32 (0: no count target), which the input pipeline adds when
    ``model.visual_glimpses.count_loss`` > 0.

    Raises:
      ValueError: the batch has no ``count_target`` (made by a pipeline of another config).
    """
    if "count_target" not in batch:
        raise ValueError("model.visual_glimpses.count_loss > 0 needs the batches' count_target, which the input "
                         "pipeline adds when that config value is set; these batches were made without it")
    return batch["count_target"]


def count_loss(counts: jax.Array, targets: jax.Array, delta: float = 1.0) -> jax.Array:
    """Huber loss of soft counts against answer counts, averaged over the rows that have one.

    Args:
      counts: ``(batch,)`` float soft counts (``sum_s sigmoid(e_s)``).
      targets: ``(batch,)`` int, the answer's count; rows with a target below 1 do not count.
      delta: the Huber threshold, in objects (quadratic within it, linear beyond).

    Returns:
      A float32 scalar: ``mean_rows huber(c - n)``, 0 when no row has a target.
    """
    has = targets >= 1
    huber = optax.losses.huber_loss(counts.astype(jnp.float32), targets.astype(jnp.float32), delta=delta)
    return jnp.sum(jnp.where(has, huber, 0.0)) / jnp.maximum(jnp.sum(has), 1)


def visual_glimpses(cfg, *, rngs: nnx.Rngs, dtype: Any) -> VisualGlimpses | None:
    """The :class:`VisualGlimpses` of ``config.model.visual_glimpses`` (``num``: ``G``, 0 for none; ``hidden_dim``;
    ``max_count``; ``count_loss``: the count loss's weight, 0 for none), or None when ``num`` is 0 or the config
    has no ``visual_glimpses`` entry (the paper's models).

    Raises:
      ValueError: a negative ``num`` or ``count_loss``, or a ``max_count`` below 1.
    """
    g = cfg.get("visual_glimpses")
    num = int(g.get("num", 0) or 0) if g is not None else 0
    if num < 0:
        raise ValueError(f"model.visual_glimpses.num must be >= 0, got {num}")
    if not num:
        return None
    max_count = int(g.get("max_count", 10))
    if max_count < 1:
        raise ValueError(f"model.visual_glimpses.max_count must be >= 1, got {max_count}")
    weight = float(g.get("count_loss", 0.0) or 0.0)
    if weight < 0:
        raise ValueError(f"model.visual_glimpses.count_loss must be >= 0, got {weight}")
    return VisualGlimpses(d_model=cfg.d_model, num_glimpses=num, hidden_dim=int(g.get("hidden_dim", cfg.d_model)),
                          max_count=max_count, dropout=cfg.dropout, rngs=rngs, dtype=dtype,
                          count_loss_weight=weight)
