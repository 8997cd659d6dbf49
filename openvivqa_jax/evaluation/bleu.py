"""BLEU-1..4 exactly as pycocoevalcap 1.2 computes it, vectorized over the corpus.

Definition (pycocoevalcap ``bleu/bleu.py`` + ``bleu/bleu_scorer.py``, David Chiang's scorer):

- n-grams of whitespace tokens; a hypothesis n-gram is "correct" up to the maximum number of
  times it occurs in any one reference of its question (clipped counts);
- ``guess_k = max(0, hyp_len - k + 1)``;
- the effective reference length of a question is the reference length closest to the hypothesis
  length, ties to the shorter one (``option="closest"``);
- corpus score: ``BLEU-n = (prod_{k<=n} (correct_k + 1e-15) / (guess_k + 1e-9)) ** (1/n)``, times the
  brevity penalty ``exp(1 - 1/ratio)`` when ``ratio = (testlen + 1e-15) / (reflen + 1e-9) < 1``, with
  ``correct``, ``guess``, ``testlen`` and ``reflen`` summed over the corpus (corpus BLEU, not a mean of
  sentence scores). The epsilons are the toolkit's (``tiny``, ``small``).

The per-question values returned by :func:`sentence_bleu` are the toolkit's ``bleu_list``
(same formula on one question's counts), used for per-question reports only.

Arrays: ``(items, 4)`` per-question counts, ``items`` = questions.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from openvivqa_jax.evaluation.ngrams import MAX_N, NgramCorpus

__all__ = ["BleuStats", "bleu_stats", "corpus_bleu", "sentence_bleu"]

_TINY = 1e-15  # pycocoevalcap bleu_scorer.compute_score: tiny
_SMALL = 1e-9  # pycocoevalcap bleu_scorer.compute_score: small


@dataclasses.dataclass(frozen=True)
class BleuStats:
    """Sufficient statistics of BLEU per question.

    Attributes:
      correct: ``(items, 4)`` int64 clipped n-gram matches for n = 1..4.
      guess: ``(items, 4)`` int64 hypothesis n-grams for n = 1..4.
      testlen: ``(items,)`` int64 hypothesis length in tokens.
      reflen: ``(items,)`` int64 closest reference length in tokens.
    """

    correct: np.ndarray
    guess: np.ndarray
    testlen: np.ndarray
    reflen: np.ndarray


def bleu_stats(corpus: NgramCorpus) -> BleuStats:
    """Computes the per-question BLEU statistics of ``corpus`` (vectorized, no per-n-gram loop).

    Args:
      corpus: the corpus n-gram table (every item has >= 1 reference).

    Returns:
      The :class:`BleuStats`.
    """
    items, grams = corpus.num_items, max(corpus.num_grams, 1)
    # Max count of each (item, n-gram) over the item's references.
    r_keys = corpus.ref_item[corpus.r_row] * grams + corpus.r_gram
    if r_keys.size:
        order = np.argsort(r_keys, kind="stable")
        sk, sc = r_keys[order], corpus.r_count[order]
        starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
        ukeys, umax = sk[starts], np.maximum.reduceat(sc, starts)
    else:
        ukeys = umax = np.zeros((0,), np.int64)
    h_keys = corpus.h_item * grams + corpus.h_gram
    pos = np.searchsorted(ukeys, h_keys)
    pos_c = np.minimum(pos, max(ukeys.size - 1, 0))
    found = (pos < ukeys.size) & (ukeys[pos_c] == h_keys) if ukeys.size else np.zeros(h_keys.shape, bool)
    clipped = np.where(found, np.minimum(corpus.h_count, umax[pos_c] if ukeys.size else 0), 0)
    h_order = corpus.gram_order[corpus.h_gram] if corpus.h_gram.size else np.zeros((0,), np.int64)
    correct = np.bincount(
        corpus.h_item * MAX_N + (h_order - 1), weights=clipped, minlength=items * MAX_N
    ).astype(np.int64).reshape(items, MAX_N)
    ks = np.arange(MAX_N)
    guess = np.maximum(0, corpus.hyp_len[:, None] - ks[None, :])
    # Closest reference length, ties to the shorter: min over refs of (|l - testlen|, l).
    big = int(corpus.ref_len.max(initial=0)) + 1
    key = np.abs(corpus.ref_len - corpus.hyp_len[corpus.ref_item]) * big + corpus.ref_len
    starts = np.r_[0, np.cumsum(corpus.refs_per_item)[:-1]].astype(np.int64)
    reflen = np.minimum.reduceat(key, starts) % big if items else np.zeros((0,), np.int64)
    return BleuStats(correct=correct, guess=guess, testlen=corpus.hyp_len.copy(), reflen=reflen)


def corpus_bleu(stats: BleuStats, items: np.ndarray | None = None) -> list[float]:
    """Corpus BLEU-1..4 of the questions ``items`` (all when None), as pycocoevalcap computes it.

    The floating-point operations are the toolkit's, in its order, so values match bit for bit.

    Args:
      stats: per-question statistics from :func:`bleu_stats`.
      items: ``(k,)`` indices of the questions to score; must be non-empty.

    Returns:
      ``[BLEU-1, BLEU-2, BLEU-3, BLEU-4]`` in [0, 1].

    Raises:
      ValueError: if ``items`` is empty.
    """
    sel = slice(None) if items is None else items
    correct = stats.correct[sel].sum(axis=0)
    guess = stats.guess[sel].sum(axis=0)
    if (items is not None and len(items) == 0) or stats.correct.shape[0] == 0:
        raise ValueError("corpus BLEU of an empty set of questions")
    testlen = int(stats.testlen[sel].sum())
    reflen = int(stats.reflen[sel].sum())
    bleus = []
    bleu = 1.0
    for k in range(MAX_N):
        bleu *= float(int(correct[k]) + _TINY) / (int(guess[k]) + _SMALL)
        bleus.append(bleu ** (1.0 / (k + 1)))
    ratio = (testlen + _TINY) / (reflen + _SMALL)
    if ratio < 1:
        for k in range(MAX_N):
            bleus[k] *= math.exp(1 - 1 / ratio)
    return bleus


def sentence_bleu(stats: BleuStats) -> np.ndarray:
    """Per-question BLEU-1..4 (pycocoevalcap's ``bleu_list``), vectorized.

    Args:
      stats: per-question statistics from :func:`bleu_stats`.

    Returns:
      ``(items, 4)`` float64 in [0, 1].
    """
    items = stats.correct.shape[0]
    out = np.empty((items, MAX_N), np.float64)
    bleu = np.ones((items,), np.float64)
    for k in range(MAX_N):
        bleu = bleu * ((stats.correct[:, k] + _TINY) / (stats.guess[:, k] + _SMALL))
        out[:, k] = bleu ** (1.0 / (k + 1))
    ratio = (stats.testlen + _TINY) / (stats.reflen + _SMALL)
    short = ratio < 1
    with np.errstate(over="ignore", divide="ignore"):
        penalty = np.exp(1 - 1 / ratio[short])
    out[short] *= penalty[:, None]
    return out
