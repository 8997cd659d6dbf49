"""Shared n-gram tables for BLEU and CIDEr-D, as flat numpy arrays.

Both scorers of the MS-COCO caption toolkit (pycocoevalcap 1.2 ``bleu_scorer.precook`` and
``cider_scorer.precook``) split a string on whitespace (``str.split()``) and count every 1..4-gram.
This module does that once for a whole corpus and stores the counts as COO-style arrays, so that
the scorers can work with ``np.bincount``/``np.searchsorted`` instead of per-sentence dictionaries.

Named axes: ``items`` (questions), ``refs`` (all reference strings, grouped by item in order),
``hyp_entries``/``ref_entries`` (distinct (string, n-gram) pairs), ``grams`` (distinct n-grams).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["NgramCorpus", "build_ngram_corpus", "MAX_N"]

#: Highest n-gram order (BLEU-4, CIDEr-D with n=4).
MAX_N = 4


@dataclasses.dataclass(frozen=True)
class NgramCorpus:
    """n-gram counts of a corpus of hypotheses and their references.

    Attributes:
      num_items: number of questions.
      num_grams: number of distinct n-grams in the corpus (ids are ``0..num_grams-1``).
      gram_order: ``(grams,)`` int64, the order n (1..4) of every n-gram id.
      hyp_len: ``(items,)`` int64, whitespace tokens in each hypothesis.
      ref_len: ``(refs,)`` int64, whitespace tokens in each reference.
      ref_item: ``(refs,)`` int64, the item of each reference (non-decreasing).
      refs_per_item: ``(items,)`` int64, references of each item (>= 1).
      h_item, h_gram, h_count: ``(hyp_entries,)`` int64, hypothesis n-gram counts.
      r_row, r_gram, r_count: ``(ref_entries,)`` int64, reference n-gram counts (``r_row`` indexes refs).
    """

    num_items: int
    num_grams: int
    gram_order: np.ndarray
    hyp_len: np.ndarray
    ref_len: np.ndarray
    ref_item: np.ndarray
    refs_per_item: np.ndarray
    h_item: np.ndarray
    h_gram: np.ndarray
    h_count: np.ndarray
    r_row: np.ndarray
    r_gram: np.ndarray
    r_count: np.ndarray


def _gram_ids(tok: np.ndarray, starts: np.ndarray, k: int, num_words: int) -> tuple[np.ndarray, int]:
    """Ids (dense, 0-based) of the k-grams starting at ``starts`` of the word-id array ``tok``, and their count."""
    if num_words ** k < 2**62:  # one int64 key per k-gram
        key = np.zeros(starts.shape, np.int64)
        for j in range(k):
            key = key * num_words + tok[starts + j]
        uniq, inv = np.unique(key, return_inverse=True)
    else:
        uniq, inv = np.unique(np.stack([tok[starts + j] for j in range(k)], axis=1), axis=0, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), len(uniq)


def build_ngram_corpus(hyps: Sequence[str], refs: Sequence[Sequence[str]], n: int = MAX_N) -> NgramCorpus:
    """Counts the 1..n-grams of every hypothesis and reference.

    Vectorized: words become integer ids (one dict pass), each order's n-grams become one int64 key per
    occurrence (word ids in base ``num_words``), ``np.unique`` numbers the distinct n-grams (order by order)
    and counts the (string, n-gram) pairs. N-gram ids carry no meaning beyond identity.

    Args:
      hyps: ``items`` sanitized hypothesis strings.
      refs: ``items`` non-empty lists of sanitized reference strings.
      n: highest n-gram order.

    Returns:
      The :class:`NgramCorpus`.

    Raises:
      ValueError: if the lengths differ or an item has no reference (the caller excludes those).
    """
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} reference lists")
    for item, item_refs in enumerate(refs):
        if not item_refs:
            raise ValueError(f"item {item} has no reference")
    texts = [*hyps, *(r for item_refs in refs for r in item_refs)]
    num_hyps = len(hyps)
    words: list[str] = []
    lengths = np.zeros((len(texts),), np.int64)
    for i, text in enumerate(texts):
        w = text.split()
        lengths[i] = len(w)
        words.extend(w)
    vocab: dict[str, int] = {}
    setdefault = vocab.setdefault
    tok = np.fromiter((setdefault(w, len(vocab)) for w in words), np.int64, count=len(words))
    num_words = max(len(vocab), 1)
    row_of = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
    pos = np.arange(len(words), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    rows, gids, order = [], [], []
    num_grams = 0
    for k in range(1, n + 1):
        starts = np.flatnonzero(pos + k <= lengths[row_of])
        if not starts.size:
            break
        ids, count = _gram_ids(tok, starts, k, num_words)
        rows.append(row_of[starts])
        gids.append(ids + num_grams)
        order.append(np.full((count,), k, np.int64))
        num_grams += count
    G = max(num_grams, 1)
    if rows:
        uniq, cnt = np.unique(np.concatenate(rows) * G + np.concatenate(gids), return_counts=True)
    else:
        uniq, cnt = np.zeros((0,), np.int64), np.zeros((0,), np.int64)
    row, gram, cnt = uniq // G, uniq % G, cnt.astype(np.int64)
    is_hyp = row < num_hyps
    refs_per_item = [len(item_refs) for item_refs in refs]
    return NgramCorpus(
        num_items=len(hyps),
        num_grams=num_grams,
        gram_order=np.concatenate(order) if order else np.zeros((0,), np.int64),
        hyp_len=lengths[:num_hyps],
        ref_len=lengths[num_hyps:],
        ref_item=np.repeat(np.arange(len(refs), dtype=np.int64), refs_per_item),
        refs_per_item=np.asarray(refs_per_item, np.int64),
        h_item=row[is_hyp],
        h_gram=gram[is_hyp],
        h_count=cnt[is_hyp],
        r_row=row[~is_hyp] - num_hyps,
        r_gram=gram[~is_hyp],
        r_count=cnt[~is_hyp],
    )
