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
from collections import Counter
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


def _count(words: list[str], n: int) -> Counter:
    counts: Counter = Counter()
    for k in range(1, n + 1):
        if len(words) >= k:
            counts.update(zip(*[words[i:] for i in range(k)]))
    return counts


def build_ngram_corpus(hyps: Sequence[str], refs: Sequence[Sequence[str]], n: int = MAX_N) -> NgramCorpus:
    """Counts the 1..n-grams of every hypothesis and reference.

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
    vocab: dict[tuple[str, ...], int] = {}
    order: list[int] = []

    def ids_of(counts: Counter) -> tuple[list[int], list[int]]:
        gid, cnt = [], []
        for gram, c in counts.items():
            i = vocab.get(gram)
            if i is None:
                i = len(vocab)
                vocab[gram] = i
                order.append(len(gram))
            gid.append(i)
            cnt.append(c)
        return gid, cnt

    hyp_len, h_item, h_gram, h_count = [], [], [], []
    ref_len, ref_item, refs_per_item, r_row, r_gram, r_count = [], [], [], [], [], []
    row = 0
    for item, (hyp, item_refs) in enumerate(zip(hyps, refs)):
        if not item_refs:
            raise ValueError(f"item {item} has no reference")
        words = hyp.split()
        hyp_len.append(len(words))
        g, c = ids_of(_count(words, n))
        h_item.extend([item] * len(g))
        h_gram.extend(g)
        h_count.extend(c)
        refs_per_item.append(len(item_refs))
        for ref in item_refs:
            words = ref.split()
            ref_len.append(len(words))
            ref_item.append(item)
            g, c = ids_of(_count(words, n))
            r_row.extend([row] * len(g))
            r_gram.extend(g)
            r_count.extend(c)
            row += 1

    def arr(x: list[int]) -> np.ndarray:
        return np.asarray(x, dtype=np.int64)

    return NgramCorpus(
        num_items=len(hyps),
        num_grams=len(vocab),
        gram_order=arr(order),
        hyp_len=arr(hyp_len),
        ref_len=arr(ref_len),
        ref_item=arr(ref_item),
        refs_per_item=arr(refs_per_item),
        h_item=arr(h_item),
        h_gram=arr(h_gram),
        h_count=arr(h_count),
        r_row=arr(r_row),
        r_gram=arr(r_gram),
        r_count=arr(r_count),
    )
