"""Contrastive word–region alignment: a training-only auxiliary loss that grounds question words in image cells.

Why: the answer decoder finds the object a question names only through attention from the question token
over the image (``question_over_image``), and with uniform attention over ``S`` grid cells at the start of
training the named object's cell carries ``1/S`` of the signal that would teach that attention. The answer
loss therefore waits on a plateau whose length grows with the number of cells. This loss gives the same
attention a direct signal from every question: a picture's question should match *its* picture's cells
better than the other pictures of the batch (weakly supervised phrase grounding, Gupta et al., "Contrastive
Learning for Weakly Supervised Phrase Grounding", ECCV 2020; the max-over-regions word score of Karpathy &
Fei-Fei, "Deep Visual-Semantic Alignments", CVPR 2015). It needs no boxes or labels, only (picture, question)
pairs, so it works on a user's own photos as on the synthetic set.

Score of question ``b`` against picture ``c``, from the query/key projections of the block in which the
question attends over the image (so the loss trains exactly the attention the model uses)::

    l[b, c, t, h, i] = q[b, t, h] . k[c, i, h] / sqrt(head_dim)              # word t, head h, cell i
    s[b, c, t]       = mean_h logsumexp_i (beta l[b, c, t, h, i]) / beta     # a soft max over the cells
    S[b, c]          = sum_t m[b, t] s[b, c, t] / sum_t m[b, t]               # mean over the question's words

and the loss is the symmetric InfoNCE (CLIP's) of ``S / temperature`` with the matching pairs on the diagonal;
other questions of the same picture in the batch are neither positives nor negatives (masked out).

The image keys are computed from the image features *before* the fusion layers: after them each cell has
attended over its own question, and matching question ``b`` against those cells would let the loss match
questions to questions instead of words to cells.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from openvivqa_jax.models.attention import NEG_INF

__all__ = ["alignment_scores", "picture_fingerprint", "word_region_loss"]


def alignment_scores(q: jax.Array, q_mask: jax.Array, k: jax.Array, i_mask: jax.Array,
                     sharpness: float = 1.0) -> jax.Array:
    """Question–picture scores ``S`` ``(batch_q, batch_i)`` float32 (module docstring).

    Args:
      q: projected question tokens ``(batch_q, q_len, heads, head_dim)``.
      q_mask: ``(batch_q, q_len)`` bool, the question's real tokens.
      k: projected image cells or regions ``(batch_i, num_cells, heads, head_dim)``.
      i_mask: ``(batch_i, num_cells)`` bool.
      sharpness: ``beta`` of the pooling over cells, ``logsumexp_i(beta * l) / beta``: 1 is the plain
        log-sum-exp, larger values approach the max (the gradient goes to the best-matching cells instead of
        being spread over all of them).

    Returns:
      ``S[b, c]``: the mean over question ``b``'s tokens of the head-averaged log-sum-exp over picture ``c``'s
      cells of the scaled dot product.

    Raises:
      ValueError: a ``sharpness`` that is not positive.
    """
    if not sharpness > 0:
        raise ValueError(f"model.word_region_loss.sharpness must be > 0, got {sharpness}")
    scale = 1.0 / float(q.shape[-1]) ** 0.5
    logits = jnp.einsum("bthd,cihd->bcthi", q, k, preferred_element_type=jnp.float32) * scale
    logits = jnp.where(i_mask[None, :, None, None, :], logits, NEG_INF)
    per_word = (jax.nn.logsumexp(logits * sharpness, axis=-1) / sharpness).mean(axis=-1)  # (batch_q, batch_i, q_len)
    m = q_mask.astype(jnp.float32)[:, None, :]
    return (per_word * m).sum(-1) / jnp.maximum(m.sum(-1), 1.0)


def picture_fingerprint(raw: jax.Array) -> jax.Array:
    """Two numbers per example that tell pictures apart: ``(batch, 2)`` from the vision features before
    projection ``raw`` ``(batch, S, C)`` (their mean and their mean weighted by a ramp over positions); two
    questions of one picture get equal fingerprints. Not differentiated."""
    raw = jax.lax.stop_gradient(raw.astype(jnp.float32)).reshape(raw.shape[0], -1)
    ramp = jnp.linspace(-1.0, 1.0, raw.shape[1], dtype=jnp.float32)
    return jnp.stack([raw.mean(-1), (raw * ramp).mean(-1)], -1)


def word_region_loss(scores: jax.Array, fingerprint: jax.Array, temperature: float) -> jax.Array:
    """Symmetric InfoNCE over the batch of question–picture ``scores`` ``(batch, batch)`` (row: question,
    column: picture; the diagonal pairs match). Off-diagonal pairs whose ``fingerprint`` ``(batch, 2)`` equals
    the diagonal's (another question of the same picture) are masked out of both directions.

    Returns:
      The scalar loss (float32): the mean of the question->picture and picture->question cross-entropies.

    Raises:
      ValueError: a ``temperature`` that is not positive.
    """
    if not temperature > 0:
        raise ValueError(f"model.word_region_loss.temperature must be > 0, got {temperature}")
    n = scores.shape[0]
    same = jnp.all(fingerprint[:, None, :] == fingerprint[None, :, :], axis=-1) & ~jnp.eye(n, dtype=bool)
    z = jnp.where(same, NEG_INF, scores / temperature)
    diag = jnp.diagonal(z)
    q_to_i = jax.nn.logsumexp(z, axis=1) - diag
    i_to_q = jax.nn.logsumexp(z, axis=0) - diag
    return 0.5 * (q_to_i.mean() + i_to_q.mean())
