"""Exact match and token F1 in the SQuAD v1.1 style, and the ViQuAD human-performance protocol.

Model scores (``evaluate-v1.1.py`` of SQuAD, as used by ViQuAD, Nguyen et al. 2020, §5):

- ``normalize_answer``: lowercase, delete punctuation (SQuAD removes it without leaving a space:
  ``10.000`` → ``10000``, ``don't`` → ``dont``), collapse whitespace. The evaluator passes answers through
  :func:`~openvivqa_jax.text.normalize.normalize_text` first with ``spaced_punctuation=False`` (NFC, one
  tone-mark convention, prices, format characters), so Vietnamese spellings of one answer compare equal.
- Deviations from SQuAD v1.1, all deliberate:

  * punctuation is every Unicode character of category ``P*`` plus ASCII ``string.punctuation`` (which
    adds the symbols ``$+<=>^`|~``), instead of SQuAD's ASCII-only set, so Vietnamese/typographic quotes
    and dashes are deleted too;
  * English article removal (``a``, ``an``, ``the``) is **not** applied: ``an`` is a Vietnamese word
    (``an toàn``), and Vietnamese has no articles;
  * two empty answers (after normalization) get F1 1, as SQuAD v2.0's rule for no-answer questions; v1.1
    gives 0 there although their EM is 1.

- ``EM = max_j [norm(p) == norm(a_j)]``; ``F1 = max_j F1_tokens(p, a_j)`` with bag-of-token precision
  and recall; F1 is 0 when there is no common token;
- corpus scores are means over questions, in [0, 1] (SQuAD prints them times 100).

Human performance (ViQuAD §5.1, following Cui et al. 2019 rather than Rajpurkar et al. 2016): for
a question with several answers, each answer in turn is taken as the "human prediction" and scored
(max over the others, as above) against the remaining answers; the per-question human score is the
mean over these rotations, and the dataset score the mean over questions with at least two
answers. The paper's text says both "first, second and third answer" and "the average of four
results" for its four answers; we rotate over all answers, which gives the four results.

Arrays: ``(items,)`` per-question scores.
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence

import numpy as np

__all__ = ["normalize_answer", "exact_match", "f1", "em_f1", "human_performance"]

_ASCII_PUNCT = frozenset(string.punctuation)
_CANDIDATE_RE = re.compile(r"[^\w\s]|_")


def _is_punct(ch: str) -> bool:
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


@functools.lru_cache(maxsize=1 << 16)
def normalize_answer(s: str) -> str:
    """SQuAD v1.1 answer normalization (lowercase, punctuation deleted, whitespace collapsed) with Unicode
    punctuation and no article removal (module doc). Cached: answers repeat (human performance rotations)."""
    s = s.lower()
    # Punctuation is never a word character (\w) nor whitespace, except "_" (Pc): only those are visited.
    s = _CANDIDATE_RE.sub(lambda m: "" if _is_punct(m.group(0)) else m.group(0), s)
    return " ".join(s.split())


def exact_match(prediction: str, answer: str) -> float:
    """1.0 if the normalized strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(answer))


def _f1_tokens(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens and not gold_tokens:
        return 1.0  # both empty (SQuAD v2.0's no-answer rule)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def f1(prediction: str, answer: str) -> float:
    """SQuAD v1.1 token F1 between two answers (after :func:`normalize_answer`)."""
    return _f1_tokens(normalize_answer(prediction).split(), normalize_answer(answer).split())


def em_f1(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-question EM and F1, each the max over the question's references.

    Args:
      hyps: ``items`` predictions.
      refs: ``items`` non-empty lists of references.

    Returns:
      ``(em, f1)``, each ``(items,)`` float64 in [0, 1].
    """
    em = np.zeros((len(hyps),), np.float64)
    f = np.zeros((len(hyps),), np.float64)
    for i, (hyp, answers) in enumerate(zip(hyps, refs)):
        p = normalize_answer(hyp)
        p_tok = p.split()
        norm_refs = [normalize_answer(a) for a in answers]
        em[i] = max(float(p == a) for a in norm_refs)
        f[i] = max(_f1_tokens(p_tok, a.split()) for a in norm_refs)
    return em, f


def human_performance(refs: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-question human EM/F1 by the ViQuAD cross-validation protocol.

    Args:
      refs: ``items`` lists of answers.

    Returns:
      ``(em, f1, has_several)``: ``(items,)`` float64 human scores (0 where fewer than two answers)
      and the ``(items,)`` bool mask of questions with at least two answers, the only ones that count.
    """
    em = np.zeros((len(refs),), np.float64)
    f = np.zeros((len(refs),), np.float64)
    several = np.array([len(a) >= 2 for a in refs], bool)
    for i, answers in enumerate(refs):
        if len(answers) < 2:
            continue
        rot_em, rot_f1 = em_f1(
            [answers[j] for j in range(len(answers))],
            [[a for k, a in enumerate(answers) if k != j] for j in range(len(answers))],
        )
        em[i] = rot_em.mean()
        f[i] = rot_f1.mean()
    return em, f, several
