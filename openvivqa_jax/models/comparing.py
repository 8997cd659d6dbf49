"""Counting and comparing with the region verifier's per-region scores (``model.verifier.compare``).

The region verifier (:mod:`openvivqa_jax.models.verifying`) scores each region against what a question names,
``s_r`` in ``[0, 1]``, and answers *is there ...?* with their noisy-OR. The same scores answer three more kinds
of question, each by a rule that has nothing left to learn but the scores:

* **how many** (*how many red circles are there?*, *có bao nhiêu hình tròn màu đỏ?*): the number of matching
  regions is a sum of independent Bernoulli variables, whose distribution over ``0..K`` (the Poisson-binomial,
  :func:`count_distribution`, the last bin holding ``K`` or more) gives each number word's first-piece logit
  ``log P(count = n)`` (Zhang et al., ICLR 2018, count by summing per-object scores instead of attending);
* **more / fewer** (*are there more circles than squares?*): the question's words are cut at a word of
  :data:`openvivqa_jax.text.polarity.COMPARISON_SPLIT` into the first thing's and the second's
  (:func:`question_segments`), each scored by the mean of its own pieces' detectors; the answer's probability is
  ``P(count_A > count_B)`` of the two distributions (:func:`greater_probability`), or ``P(count_A < count_B)``
  when a word of :data:`openvivqa_jax.text.polarity.REVERSING` turns it round (*fewer*, *ít*);
* **the same attribute** (*are the circle and the square the same colour?*): the second thing's words end at a
  word of :data:`openvivqa_jax.text.polarity.COMPARISON_END` (*and* **the square the** *same colour*; *và*
  **hình vuông có** *cùng màu không*), since the words after it name no thing and would pull its regions' scores
  towards 0; each thing's regions are averaged by their scores' odds into one input vector (a soft pointer,
  :func:`soft_pointer`), and ``logit P(same) = g_same (c - mean_f w_f (x_A,f - x_B,f)^2)`` (:func:`same_logit`
  times :data:`openvivqa_jax.models.verifying.SAME_GAIN`), the feature weights ``w = softplus(mean of the
  pieces' attribute weights)`` learned from the words, so *colour* picks the colour features; *different* /
  *khác* negates the logit.

* **what is left of X** (``model.verifier.relate``; *what is above the red circle?*, *bên trái hình tròn là
  gì?*): ``X`` is pointed at by the scores of the question's words after its side word
  (:data:`openvivqa_jax.text.polarity.RELATION_WORDS`: *left of* **the red circle**, *bên trái* **hình tròn**;
  all its words when it has none), since the words before it (*what is*) name no region; the other thing by
  ``softmax_r(log sigmoid(a_r) + log(1 - s_r))`` over the regions, ``a_r`` a learned objectness of the region's
  embedding, bounded above by 0 so that however sure the objectness grows, it cannot outweigh the named thing's
  exclusion ``log(1 - s_r)`` and point back at ``X``;
  the answer *nothing* (:data:`openvivqa_jax.text.polarity.NOTHING`) of a question with a side word has the
  first-piece logit ``-g_rel RELATION_GAIN (u . d - |u_perp . d|)`` (0 for one without: it asks about no side),
  ``d = c_O - c_X`` the offset of the pointed box centres, ``u`` ``(2,)`` the mean of the question pieces'
  direction weights (*left* learns to point along -x) and ``u_perp`` ``u`` turned a quarter: something is on
  that side when the other thing lies within 45 degrees of ``u`` (the cone-shaped model of direction relations,
  Peuquet and Zhan, Pattern Recognition 1987; Frank, 1991), so a thing mostly below ``X`` and a little to its
  left is below it and not left of it, as a person says; the other thing's inputs become one decoder memory
  token (:func:`relation_terms`), from which the decoder names it (*blue square*), and whose answer loss is what
  teaches the objectness which region that is.

Why rules for the cut and the direction: learned from the answers alone, *fewer* and *different* are an
exclusive-or with what the words name, as a negation is (:mod:`openvivqa_jax.text.polarity`). Which of the
three answers a yes/no question takes (exists, more, same) is learned from its words.

The word tables are read from the run's tokenizer, whole-word pieces only (:func:`question_piece_roles`,
:func:`answer_piece_numbers`), as the answer pieces' polarity is.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from openvivqa_jax.text.counts import ENGLISH_NUMBER_WORDS, NUMBER_WORDS
from openvivqa_jax.text.polarity import COMPARISON_END, COMPARISON_SPLIT, NOTHING, RELATION_WORDS, REVERSING

__all__ = ["RELATION_GAIN", "relation_terms", "answer_piece_nothing", "relation_pieces", "count_distribution",
           "greater_probability", "question_segments", "soft_pointer", "same_logit", "question_piece_roles",
           "answer_piece_numbers"]

_WORD_START = "\u2581"
#: The gain of the direction weights on the box centres' offsets (in picture widths): a few steps of the
#: verifier's Adam move a side's candidates well apart.
RELATION_GAIN = 10.0


def count_distribution(scores: jax.Array, mask: jax.Array, max_count: int) -> jax.Array:
    """``(batch, K + 1)`` float32: ``P(sum_r b_r = n)`` for ``n = 0..K-1`` and ``P(sum >= K)`` in the last bin,
    for independent Bernoulli ``b_r`` of probability ``scores`` ``(batch, R)`` over the regions where ``mask``
    ``(batch, R)`` (the Poisson-binomial distribution, by the recursion over regions ``P'(n) = P(n) (1 - s_r) +
    P(n - 1) s_r``).

    Raises:
      ValueError: ``max_count`` below 1.
    """
    if max_count < 1:
        raise ValueError(f"max_count must be >= 1, got {max_count}")
    s = jnp.where(mask.astype(bool), scores.astype(jnp.float32), 0.0)
    start = jnp.zeros((s.shape[0], max_count + 1), jnp.float32).at[:, 0].set(1.0)

    def add_region(p, s_r):
        move = p * s_r[:, None]
        shifted = jnp.concatenate([jnp.zeros_like(move[:, :1]), move[:, :-1]], 1)
        return p - move + shifted.at[:, -1].add(move[:, -1]), None

    out, _ = jax.lax.scan(add_region, start, s.T)
    return out


def greater_probability(p_a: jax.Array, p_b: jax.Array) -> jax.Array:
    """``(batch,)``: ``P(A > B)`` for independent counts of distributions ``p_a``, ``p_b`` ``(batch, K + 1)``
    (:func:`count_distribution`; two counts both in the last bin, ``K`` or more, are taken as equal)."""
    below = jnp.cumsum(p_b, 1) - p_b  # P(B < n)
    return jnp.sum(p_a * below, 1)


def question_segments(question: jax.Array, question_mask: jax.Array,
                      split_piece: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(first, second)`` float32 masks ``(batch, l)`` of a question's pieces before and after its first split
    piece (``split_piece`` ``(V,)``: 1 for the pieces of :data:`openvivqa_jax.text.polarity.COMPARISON_SPLIT`,
    2 for those of :data:`openvivqa_jax.text.polarity.COMPARISON_END`), split pieces excluded, ``second`` ending
    before the first end piece after the split (*the circle and* **the square the** *same colour*); a question
    without a split piece is all ``first``, and its ``second`` is empty. ``question``
    ``(batch, l)`` int, ``question_mask`` ``(batch, l)`` bool."""
    qm = question_mask.astype(jnp.float32)
    role = split_piece[question]
    split = (role == 1.0) * qm
    end = (role == 2.0) * qm
    after = (jnp.cumsum(split, 1) - split) > 0
    ended = jnp.cumsum(end * after, 1) > 0
    keep = qm * (1.0 - split)
    return keep * (~after), keep * after * (~ended)


def soft_pointer(scores: jax.Array, mask: jax.Array, x: jax.Array) -> jax.Array:
    """``(batch, D)``: the mean of the regions' inputs ``x`` ``(batch, R, D)`` weighted by the odds
    ``s / (1 - s)`` of their ``scores`` ``(batch, R)`` over the valid ``mask`` ``(batch, R)`` (0 where no region
    scores): the softmax of the score logits. Weighting by the scores themselves would let the many regions
    that score a little (60 of 0.05 against one of 0.95) outweigh the one the question names."""
    s = jnp.clip(scores, 0.0, 1.0 - 1e-4)
    w = jnp.where(mask.astype(bool), s / (1.0 - s), 0.0)
    w = w / (jnp.sum(w, 1, keepdims=True) + 1e-6)
    return jnp.einsum("br,brd->bd", w, x)


def same_logit(x_a: jax.Array, x_b: jax.Array, weights: jax.Array, bias: jax.Array) -> jax.Array:
    """``(batch,)``: ``bias - mean_f weights_f (x_a,f - x_b,f)^2`` for two pointed inputs ``(batch, D)`` and
    per-question feature weights ``(batch, D)`` (non-negative)."""
    return bias - jnp.mean(weights * jnp.square(x_a - x_b), -1)


def relation_terms(scores: jax.Array, mask: jax.Array, boxes: jax.Array, x: jax.Array, objectness: jax.Array,
                   direction: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(pointed (batch, D), something logit (batch,))`` of the relation rule (module doc).

    Args:
      scores: ``(batch, R)`` the regions' scores against the question (``s_r``); mask: ``(batch, R)`` bool.
      boxes: ``(batch, R, 4)`` xyxy in picture units; x: ``(batch, R, D)`` the regions' inputs.
      objectness: ``(batch, R)`` the regions' objectness logits ``a_r``; direction: ``(batch, 2)`` ``u``.

    The other thing's weights are ``sigmoid(a_r) (1 - s_r)`` normalised over the valid regions; the logit is
    ``RELATION_GAIN (u . d - |u_perp . d|)`` of the cone rule, ``u_perp = (-u_y, u_x)``.
    """
    valid = mask.astype(bool)
    centre = 0.5 * (boxes[..., :2] + boxes[..., 2:]).astype(jnp.float32)
    anchor = soft_pointer(scores, mask, centre)
    logits = jax.nn.log_sigmoid(objectness) + jnp.log1p(-jnp.clip(scores, 0.0, 1.0 - 1e-6))
    w = jax.nn.softmax(jnp.where(valid, logits, -1e9), -1)
    w = jnp.where(valid, w, 0.0)
    other = jnp.einsum("br,brk->bk", w, centre)
    d = other - anchor
    across = direction[:, 0] * d[:, 1] - direction[:, 1] * d[:, 0]  # u_perp . d
    some = RELATION_GAIN * (jnp.einsum("bk,bk->b", d, direction) - jnp.abs(across))
    return jnp.einsum("br,brd->bd", w, x), some


def relation_pieces(tokenizer) -> np.ndarray:
    """``(V,)`` float32, 1 for a whole-word piece of :data:`openvivqa_jax.text.polarity.RELATION_WORDS`."""
    return _whole_word(tokenizer, RELATION_WORDS)


def answer_piece_nothing(tokenizer) -> np.ndarray:
    """``(V,)`` float32, 1 for a whole-word piece of :data:`openvivqa_jax.text.polarity.NOTHING`, 0 else."""
    return _whole_word(tokenizer, NOTHING)


def _whole_word(tokenizer, words) -> np.ndarray:
    out = np.zeros((int(tokenizer.vocab_size),), np.float32)
    for i in range(len(out)):
        piece = tokenizer.id_to_piece(i)
        if piece.startswith(_WORD_START) and piece[1:].lower() in words:
            out[i] = 1.0
    return out


def question_piece_roles(tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """``(split, reverse)``, each ``(V,)`` float32: ``split`` 1 for a whole-word piece of
    :data:`openvivqa_jax.text.polarity.COMPARISON_SPLIT` and 2 for one of
    :data:`openvivqa_jax.text.polarity.COMPARISON_END` (:func:`question_segments`), ``reverse`` 1 for one of
    :data:`openvivqa_jax.text.polarity.REVERSING`; 0 else."""
    split = _whole_word(tokenizer, COMPARISON_SPLIT)
    split = np.where(split > 0, split, 2.0 * _whole_word(tokenizer, COMPARISON_END)).astype(np.float32)
    return split, _whole_word(tokenizer, REVERSING)


def answer_piece_numbers(tokenizer, max_count: int) -> np.ndarray:
    """``(V,)`` int32: the number ``1..max_count`` a whole-word answer piece says (digits, English ``one`` ...,
    Vietnamese ``một`` ... of :data:`openvivqa_jax.text.counts.NUMBER_WORDS`), 0 for any other piece."""
    words = {**{w: v for w, v in NUMBER_WORDS.items() if v >= 1}, **ENGLISH_NUMBER_WORDS,
             **{str(n): n for n in range(1, max_count + 1)}}
    out = np.zeros((int(tokenizer.vocab_size),), np.int32)
    for i in range(len(out)):
        piece = tokenizer.id_to_piece(i)
        value = words.get(piece[1:].lower(), 0) if piece.startswith(_WORD_START) else 0
        out[i] = value if 1 <= value <= max_count else 0
    return out
