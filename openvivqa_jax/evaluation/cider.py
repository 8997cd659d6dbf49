"""CIDEr-D exactly as pycocoevalcap 1.2 computes it (``cider/cider_scorer.py``), vectorized.

Definition (Vedantam et al. 2015, CIDEr-D variant of the MS-COCO toolkit):

- document frequency ``df(g)`` of an n-gram = number of questions whose reference set contains
  it, counted over the scored references only; ``ref_len = log(num_questions)``;
- tf-idf weight of an n-gram with count ``c`` in a string: ``c * (ref_len - log(max(1, df(g))))``;
- for each order n = 1..4 and each reference: ``sum_g min(h_g, r_g) * r_g / (|h_n| |r_n|)`` (clipped
  cosine; the division is skipped when a norm is 0), times the Gaussian length penalty
  ``exp(-(l_h - l_r)**2 / (2 sigma**2))`` with sigma = 6;
- the toolkit's "length" is the number of **bigrams** (``len(tokens) - 1``, 0 for <= 1 token), a quirk
  of ``counts2vec`` that we reproduce;
- score = 10 * mean over n of the sum over references / number of references; corpus score = mean
  over questions.

With a single question ``ref_len = log(1) = 0`` and every reference n-gram has ``df = 1``, so every
weight is 0 and CIDEr is 0 by construction: the IDF is degenerate (reported as a note).

Arrays: ``items`` questions, ``refs`` reference rows, ``4`` n-gram orders.
"""

from __future__ import annotations

import numpy as np

from openvivqa_jax.evaluation.ngrams import MAX_N, NgramCorpus

__all__ = ["SIGMA", "cider_d"]

#: Standard deviation of the Gaussian length penalty (pycocoevalcap ``Cider(sigma=6.0)``).
SIGMA = 6.0


def cider_d(corpus: NgramCorpus, items: np.ndarray | None = None, sigma: float = SIGMA) -> np.ndarray:
    """Per-question CIDEr-D of the questions ``items``, with the IDF computed over those questions.

    Calling it with a subset gives what pycocoevalcap gives when run on that subset alone.

    Args:
      corpus: the corpus n-gram table.
      items: ``(k,)`` indices of the questions to score (all when None).
      sigma: Gaussian length-penalty standard deviation.

    Returns:
      ``(k,)`` float64 per-question CIDEr-D (in [0, 10]); the corpus CIDEr is its mean.
    """
    n_all = corpus.num_items
    if items is None:
        items = np.arange(n_all)
    items = np.asarray(items, np.int64)
    k = items.size
    if k == 0:
        return np.zeros((0,), np.float64)
    # Local index of each selected item, -1 for the others.
    local = np.full((n_all,), -1, np.int64)
    local[items] = np.arange(k)

    row_item_local = local[corpus.ref_item]  # (refs,)
    row_sel = row_item_local >= 0
    rows = np.flatnonzero(row_sel)
    local_row = np.full(row_sel.shape, -1, np.int64)
    local_row[rows] = np.arange(rows.size)
    num_rows = rows.size

    # Entries of the selected references and hypotheses.
    r_mask = row_sel[corpus.r_row]
    r_row = local_row[corpus.r_row[r_mask]]
    r_item = row_item_local[corpus.r_row[r_mask]]
    r_gram = corpus.r_gram[r_mask]
    r_count = corpus.r_count[r_mask].astype(np.float64)
    h_mask = local[corpus.h_item] >= 0
    h_item = local[corpus.h_item[h_mask]]
    h_gram = corpus.h_gram[h_mask]
    h_count = corpus.h_count[h_mask].astype(np.float64)

    grams = max(corpus.num_grams, 1)
    # Document frequency: distinct (item, gram) pairs among the references.
    pairs = np.sort(r_item * grams + r_gram)  # sort-based unique: numpy's hash-based np.unique is slower here
    pairs = pairs[np.concatenate([[True], pairs[1:] != pairs[:-1]])] if pairs.size else pairs
    df = np.bincount(pairs % grams, minlength=grams).astype(np.float64)
    ref_len = np.log(float(k))
    weight = ref_len - np.log(np.maximum(1.0, df))  # (grams,)

    vh = h_count * weight[h_gram]
    vr = r_count * weight[r_gram]
    h_ord = corpus.gram_order[h_gram] - 1 if h_gram.size else np.zeros((0,), np.int64)
    r_ord = corpus.gram_order[r_gram] - 1 if r_gram.size else np.zeros((0,), np.int64)
    norm_h = np.sqrt(np.bincount(h_item * MAX_N + h_ord, weights=vh * vh, minlength=k * MAX_N)).reshape(k, MAX_N)
    norm_r = np.sqrt(
        np.bincount(r_row * MAX_N + r_ord, weights=vr * vr, minlength=num_rows * MAX_N)
    ).reshape(num_rows, MAX_N)

    dot = _clipped_dots(h_item * grams + h_gram, vh, r_item * grams + r_gram, vr, r_row * MAX_N + r_ord, num_rows)

    row_item = row_item_local[rows]  # (rows,) local item of each selected reference
    nh = norm_h[row_item]
    denom_ok = (nh != 0) & (norm_r != 0)
    val = np.where(denom_ok, dot / np.where(denom_ok, nh * norm_r, 1.0), dot)
    # Toolkit quirk: "length" counts bigrams.
    len_h = np.maximum(corpus.hyp_len[items] - 1, 0)[row_item]
    len_r = np.maximum(corpus.ref_len[rows] - 1, 0)
    delta = (len_h - len_r).astype(np.float64)
    val = val * (np.e ** (-(delta**2) / (2 * sigma**2)))[:, None]

    per_item = np.bincount(row_item, weights=val.sum(axis=1), minlength=k)
    n_refs = corpus.refs_per_item[items].astype(np.float64)
    return per_item / MAX_N / n_refs * 10.0


def _clipped_dots(h_keys: np.ndarray, vh: np.ndarray, r_keys: np.ndarray, vr: np.ndarray, r_slot: np.ndarray,
                  num_rows: int) -> np.ndarray:
    """``(num_rows, MAX_N)`` clipped dot products ``sum_g min(h_g, r_g) * r_g`` of each reference row and order:
    each reference entry (key ``item * grams + gram``, weight ``vr``, slot ``row * MAX_N + order``) matched with
    the hypothesis entry of its item and gram (key ``h_keys``, weight ``vh``)."""
    h_order_idx = np.argsort(h_keys, kind="stable")
    sorted_keys = h_keys[h_order_idx]
    pos = np.searchsorted(sorted_keys, r_keys)
    pos_c = np.minimum(pos, max(sorted_keys.size - 1, 0))
    if sorted_keys.size:
        found = (pos < sorted_keys.size) & (sorted_keys[pos_c] == r_keys)
        vh_match = np.where(found, vh[h_order_idx[pos_c]], 0.0)
    else:
        found = np.zeros(r_keys.shape, bool)
        vh_match = np.zeros(r_keys.shape)
    contrib = np.where(found, np.minimum(vh_match, vr) * vr, 0.0)
    return np.bincount(r_slot, weights=contrib, minlength=num_rows * MAX_N).reshape(num_rows, MAX_N)
