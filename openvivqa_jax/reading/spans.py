"""Span decoding with a maximum answer length (BERT's SQuAD decoding, Devlin et al. 2019, run_squad.py).

The score of the span ``[i, j]`` is ``start_logits[i] + end_logits[j]``; the answer is the best span with
``i <= j < i + max_answer_len`` whose two ends are passage tokens. run_squad.py looks for it among the
``n_best_size`` (20) best starts and ends; here every pair is scored (a ``(len, len)`` band), so the result is
the exact best, which run_squad.py's finds whenever it lies among those candidates. Ties go to the smallest
``i``, then the smallest ``j`` (row-major ``argmax``).

Arrays: ``(batch, len)`` logits and masks; ``(batch,)`` results.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["best_spans", "best_spans_numpy"]


def best_spans(start_logits: jax.Array, end_logits: jax.Array, passage_mask: jax.Array,
               max_answer_len: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The best span of each row (module doc).

    Args:
      start_logits, end_logits: ``(batch, len)`` float.
      passage_mask: ``(batch, len)`` bool, the tokens a span may start and end on.
      max_answer_len: the most tokens in a span (>= 1).

    Returns:
      ``(start, end, score)``: ``(batch,)`` int32 positions and float32 ``start_logits[start] +
      end_logits[end]``; a row without passage tokens gets ``(0, 0, -inf)``.
    """
    n = start_logits.shape[-1]
    i = jnp.arange(n)[:, None]
    j = jnp.arange(n)[None, :]
    band = (j >= i) & (j < i + max_answer_len)
    ok = band[None] & passage_mask[:, :, None] & passage_mask[:, None, :]
    scores = start_logits.astype(jnp.float32)[:, :, None] + end_logits.astype(jnp.float32)[:, None, :]
    scores = jnp.where(ok, scores, -jnp.inf)
    flat = scores.reshape(scores.shape[0], -1)
    best = jnp.argmax(flat, axis=-1)
    score = jnp.take_along_axis(flat, best[:, None], axis=-1)[:, 0]
    start, end = best // n, best % n
    empty = ~jnp.any(passage_mask, axis=-1)
    return (jnp.where(empty, 0, start).astype(jnp.int32), jnp.where(empty, 0, end).astype(jnp.int32),
            jnp.where(empty, -jnp.inf, score))


def best_spans_numpy(start_logits: np.ndarray, end_logits: np.ndarray, passage_mask: np.ndarray,
                     max_answer_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`best_spans` by a loop over every pair (a reference for tests; same tie rule)."""
    b, n = start_logits.shape
    out_s, out_e = np.zeros(b, np.int32), np.zeros(b, np.int32)
    out_v = np.full(b, -np.inf, np.float32)
    for r in range(b):
        for i in range(n):
            for j in range(i, min(n, i + max_answer_len)):
                if passage_mask[r, i] and passage_mask[r, j]:
                    v = np.float32(start_logits[r, i]) + np.float32(end_logits[r, j])
                    if v > out_v[r]:
                        out_s[r], out_e[r], out_v[r] = i, j, v
    return out_s, out_e, out_v
