"""Embedding relevance: Word Mover's Distance turned into a [0, 1] score ("WMDRel").

Following the annotation-free caption evaluation of ``papers/cross_lingual_caption_eval.md`` (WMD of
Kusner et al. 2015 as re-purposed by Kilickaya et al. 2017): the WMD between two sentences is the
minimum cumulative cost of moving the normalized bag of words of one onto the other, the cost of
moving word ``u`` to word ``v`` being the Euclidean distance of their word vectors; the relevance is
its normalized inverse ``WMDRel = 1 - wmd / z``.

Choices (the paper leaves ``z`` and the vectors open):

- word vectors come from a user-given file in word2vec **text** format (optional ``count dim``
  header line, then ``word v_1 ... v_dim`` per line); only words of the scored corpus are kept. Keys
  are matched after the same normalization as the text (NFC, lowercase, one tone-mark convention),
  so an NFD or capitalized vocabulary still matches. Tokens are the whitespace tokens of the
  sanitized text (Vietnamese syllables; ``_``-joined multi-syllable keys are not used);
- vectors are L2-normalized, so every word-to-word distance lies in [0, 2] and ``z = 2`` bounds the
  score to [0, 1] without depending on the rest of the corpus;
- out-of-vocabulary tokens are not dropped: each distinct one gets its own direction orthogonal to
  everything else (distance 0 to itself, sqrt(2) to any other word), so identical unknown words
  still match. They are counted in the result's notes;
- no stop-word removal (answers are short); the score of a question is the max over its references
  (min WMD), an empty prediction scores 0, the corpus score is the mean over questions;
- the transport problem is solved exactly: closed form when one side has a single distinct word;
  otherwise, with ``n`` and ``m`` tokens, both bags are uniform measures over ``L = lcm(n, m)``
  atoms after repeating tokens, whose optimal transport is an optimal assignment (Birkhoff-von
  Neumann), solved by ``scipy.optimize.linear_sum_assignment`` when ``L <= 210``; larger problems use
  POT's ``ot.emd2`` when installed, else ``scipy.optimize.linprog`` (HiGHS).

Arrays: vectors ``(vocab, dim)`` float64; scores ``(items,)``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from absl import logging

from openvivqa_jax.text.normalize import normalize_text

__all__ = ["WordVectors", "load_word_vectors", "wmd", "wmd_relevance", "Z_NORM"]

#: Normalization factor z: the largest distance between two unit vectors.
Z_NORM = 2.0
_ASSIGNMENT_MAX_ATOMS = 210  # lcm of any two lengths <= 15; ~0.5 ms per assignment
_SQRT2 = math.sqrt(2.0)

try:  # POT's exact network simplex, optional
    import ot as _POT
except ImportError:
    _POT = None


@dataclasses.dataclass(frozen=True)
class WordVectors:
    """Unit-normalized word vectors of the words a corpus needs.

    Attributes:
      index: word -> row of ``vectors``.
      vectors: ``(vocab, dim)`` float64, rows of L2 norm 1.
      path: the file they came from.
      file_words: words read from the file (for reports).
    """

    index: dict[str, int]
    vectors: np.ndarray
    path: str
    file_words: int


def load_word_vectors(path: str | os.PathLike, needed: Iterable[str] | None = None) -> WordVectors:
    """Reads a word2vec text-format file, keeping the words in ``needed`` (all when None).

    Args:
      path: the vectors file (UTF-8).
      needed: the normalized tokens to keep.

    Returns:
      The :class:`WordVectors` (zero vectors are skipped, so such words count as unknown).

    Raises:
      OSError: if the file cannot be read.
      ValueError: on a malformed line (the message names the file and the line number).
    """
    path = os.fspath(path)
    wanted = None if needed is None else set(needed)
    index: dict[str, int] = {}
    rows: list[np.ndarray] = []
    dim = None
    file_words = 0
    with open(path, encoding="utf-8", errors="strict") as f:
        for lineno, line in enumerate(f, start=1):
            parts = line.rstrip("\n\r").split(" ")
            while parts and parts[-1] == "":
                parts.pop()
            if not parts:
                continue
            if lineno == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                dim = int(parts[1])
                continue
            if dim is None:
                dim = len(parts) - 1
            if len(parts) != dim + 1 or dim < 1:
                raise ValueError(
                    f"{path}:{lineno}: expected a word and {dim} numbers (word2vec text format), "
                    f"got {len(parts)} fields"
                )
            file_words += 1
            word = parts[0]
            key = word
            if wanted is not None and key not in wanted:
                if word.isascii() and word.islower():
                    continue
                key = normalize_text(word)
                if key not in wanted:
                    continue
            if key in index:
                continue
            try:
                vec = np.asarray(parts[1:], dtype=np.float64)
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: non-numeric vector value for {word!r}: {e}") from None
            norm = float(np.linalg.norm(vec))
            if not np.isfinite(norm) or norm == 0.0:
                continue
            index[key] = len(rows)
            rows.append(vec / norm)
    vectors = np.stack(rows) if rows else np.zeros((0, dim or 1), np.float64)
    return WordVectors(index=index, vectors=vectors, path=path, file_words=file_words)


def _emd(a: np.ndarray, b: np.ndarray, cost: np.ndarray) -> float:
    """Exact optimal-transport cost between histograms ``a`` (n,) and ``b`` (m,) for ``cost`` (n, m)."""
    if _POT is not None:
        return float(_POT.emd2(a, b, cost))
    n, m = cost.shape
    # Variables T (n*m), row sums = a, column sums = b.
    a_eq = np.zeros((n + m, n * m))
    for i in range(n):
        a_eq[i, i * m : (i + 1) * m] = 1.0
    for j in range(m):
        a_eq[n + j, j::m] = 1.0
    from scipy.optimize import linprog  # imported here: 0.7 s of start-up the evaluate CLI does not need

    res = linprog(cost.ravel(), A_eq=a_eq, b_eq=np.concatenate([a, b]), bounds=(0, None), method="highs")
    if not res.success:
        raise RuntimeError(f"transport LP failed: {res.message}")
    return float(res.fun)


def wmd(hyp_tokens: Sequence[str], ref_tokens: Sequence[str], wv: WordVectors) -> float:
    """Word Mover's Distance between two token lists (both non-empty), in [0, 2].

    Args:
      hyp_tokens: the hypothesis tokens (duplicates weigh more, as in a normalized bag of words).
      ref_tokens: the reference tokens.
      wv: unit word vectors; unknown words are orthogonal to everything (see the module doc).

    Returns:
      The exact minimum transport cost.
    """
    hc, rc = Counter(hyp_tokens), Counter(ref_tokens)
    hw, rw = list(hc), list(rc)
    cost = np.full((len(hw), len(rw)), _SQRT2)
    hi = [wv.index.get(w, -1) for w in hw]
    ri = [wv.index.get(w, -1) for w in rw]
    hk = [k for k, x in enumerate(hi) if x >= 0]
    rk = [k for k, x in enumerate(ri) if x >= 0]
    if hk and rk:
        hv = wv.vectors[[hi[k] for k in hk]]
        rv = wv.vectors[[ri[k] for k in rk]]
        d2 = np.maximum(2.0 - 2.0 * (hv @ rv.T), 0.0)  # unit vectors: |u-v|^2 = 2 - 2 u.v
        cost[np.ix_(hk, rk)] = np.sqrt(d2)
    for i, w in enumerate(hw):
        if w in rc:
            cost[i, rw.index(w)] = 0.0
    n, m = len(hyp_tokens), len(ref_tokens)
    a = np.array([hc[w] for w in hw], np.float64) / n
    b = np.array([rc[w] for w in rw], np.float64) / m
    if len(hw) == 1:
        return float(cost[0] @ b)
    if len(rw) == 1:
        return float(a @ cost[:, 0])
    atoms = n * m // math.gcd(n, m)
    if atoms <= _ASSIGNMENT_MAX_ATOMS:
        rows = np.repeat(np.arange(len(hw)), [hc[w] * (atoms // n) for w in hw])
        cols = np.repeat(np.arange(len(rw)), [rc[w] * (atoms // m) for w in rw])
        big = cost[np.ix_(rows, cols)]
        from scipy.optimize import linear_sum_assignment  # lazy, as linprog

        r, c = linear_sum_assignment(big)
        return float(big[r, c].sum() / atoms)
    return _emd(a, b, cost)


def wmd_relevance(
    hyps: Sequence[str], refs: Sequence[Sequence[str]], wv: WordVectors
) -> tuple[np.ndarray, int, int]:
    """Per-question WMDRel = max over references of ``1 - wmd / 2``.

    Args:
      hyps: ``items`` sanitized hypotheses.
      refs: ``items`` non-empty lists of sanitized references.
      wv: the word vectors.

    Returns:
      ``((items,) float64 in [0, 1], unknown-token occurrences, total token occurrences)``.
    """
    out = np.zeros((len(hyps),), np.float64)
    unknown = total = 0
    for i, (hyp, item_refs) in enumerate(zip(hyps, refs)):
        h = hyp.split()
        for t in h:
            total += 1
            unknown += t not in wv.index
        best = 0.0
        for ref in item_refs:
            r = ref.split()
            for t in r:
                total += 1
                unknown += t not in wv.index
            if not h or not r:
                continue
            best = max(best, 1.0 - wmd(h, r, wv) / Z_NORM)
        out[i] = min(max(best, 0.0), 1.0)
    if total:
        logging.info("WMDRel: %d of %d tokens are not in %s", unknown, total, wv.path)
    return out, unknown, total
