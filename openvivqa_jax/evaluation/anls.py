"""ANLS, the Average Normalized Levenshtein Similarity of ST-VQA (Biten et al., ICCV 2019, eq. 1).

``ANLS = 1/N sum_i max_j s(a_ij, o_i)`` with ``s = 1 - NL(a_ij, o_i)`` when ``NL < tau`` and 0 otherwise,
``NL`` = Levenshtein distance / max(len(a), len(o)) on characters, tau = 0.5.

The paper leaves ``NL == tau`` open ("0 if NL > tau"). We follow the official Robust Reading
Competition (RRC) evaluation script for ST-VQA: it takes ``1 - min_j NL_j`` and sets it to 0 only
when it is **strictly below** the threshold (``if question_result < 0.5: question_result = 0``), so a
similarity of exactly 0.5 (NL == 0.5) **is kept as 0.5**. Two empty strings have NL = 0 (the
script's ``0.0 if length == 0``), i.e. similarity 1.

Strings: the official rule (the evaluator's ``official`` text mode) compares the answers as given, lowercased and
stripped of surrounding whitespace (:func:`rrc_string`), as the RRC script and MMF's ``STVQAANLSEvaluator``
(``mmf/utils/m4c_evaluators.py``) do. The ``openvivqa`` text mode compares the Vietnamese-normalized strings of
:func:`~openvivqa_jax.evaluation.sanitize.sanitize_text` instead (NFC, one tone-mark convention, spaced
punctuation), which is not the official number: on TextVQA v0.1 val with perturbed human answers it gives 0.623
where the official rule gives 0.649 (docs/evaluation.md). Edit distances are on characters (code points), from
rapidfuzz (C++).

Arrays: ``(items,)`` per-question scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rapidfuzz.distance import Levenshtein

__all__ = ["THRESHOLD", "rrc_string", "anls", "nls"]

#: ST-VQA threshold tau; similarities strictly below it score 0 (RRC rule).
THRESHOLD = 0.5


def rrc_string(text: str) -> str:
    """An answer as the ST-VQA RRC script compares it: lowercased (``str.lower``), surrounding whitespace stripped."""
    return text.lower().strip()


def nls(prediction: str, answer: str) -> float:
    """Normalized Levenshtein similarity ``1 - dist / max(len)`` (1.0 for two empty strings)."""
    length = max(len(prediction), len(answer))
    if length == 0:
        return 1.0
    return 1.0 - Levenshtein.distance(prediction, answer) / float(length)


def anls(hyps: Sequence[str], refs: Sequence[Sequence[str]], threshold: float = THRESHOLD) -> np.ndarray:
    """Per-question ANLS: max over references of the thresholded similarity.

    Args:
      hyps: ``items`` predictions, prepared (:func:`rrc_string` or sanitized).
      refs: ``items`` non-empty lists of references, prepared the same way.
      threshold: tau; a best similarity strictly below it gives 0.

    Returns:
      ``(items,)`` float64 in {0} U [threshold, 1].
    """
    out = np.zeros((len(hyps),), np.float64)
    for i, (hyp, item_refs) in enumerate(zip(hyps, refs)):
        best = max(nls(hyp, ref) for ref in item_refs)
        out[i] = 0.0 if best < threshold else best
    return out
