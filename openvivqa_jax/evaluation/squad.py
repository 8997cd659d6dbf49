"""Exact match and token F1 of SQuAD v1.1, and the ViQuAD human-performance protocol, under two rules.

``rule="squad"`` (:data:`RULES`; the evaluator's official text mode) is SQuAD v1.1's ``evaluate-v1.1.py`` exactly,
the script ViQuAD's paper (Nguyen et al. 2020, §5) scores with:

- ``normalize_answer``: lowercase (``str.lower``); delete ASCII punctuation (``string.punctuation``) without
  leaving a space (``10.000`` → ``10000``, ``don't`` → ``dont``); replace the words ``a``, ``an``, ``the``
  (regular-expression word boundaries) by a space; collapse whitespace;
- ``EM = max_j [norm(p) == norm(a_j)]``; ``F1 = max_j F1_tokens(p, a_j)`` with bag-of-token precision and
  recall (multiset intersection), 0 when there is no common token, so two empty answers have EM 1 and F1 0;
- answers are read as given: no Unicode normalization, no cut of Chinese or Japanese characters.

``rule="vietnamese"`` (the ``openvivqa`` text mode) deliberately deviates, for Vietnamese answers; the
evaluator passes the answers through :func:`~openvivqa_jax.text.normalize.normalize_text` first (with
``spaced_punctuation=False``: NFC, one tone-mark convention, prices, format characters), so Vietnamese
spellings of one answer compare equal, and cuts scripts written without spaces per character
(:mod:`.scripts`). Then, against SQuAD v1.1:

  * punctuation is every Unicode character of category ``P*`` plus ASCII ``string.punctuation`` (which
    adds the symbols ``$+<=>^`|~``), instead of SQuAD's ASCII-only set, so Vietnamese/typographic quotes
    and dashes are deleted too;
  * English article removal (``a``, ``an``, ``the``) is **not** applied: ``an`` is a Vietnamese word
    (``an toàn``), and Vietnamese has no articles;
  * two empty answers (after normalization) get F1 1, as SQuAD v2.0's rule for no-answer questions; v1.1
    gives 0 there although their EM is 1.

Corpus scores are means over questions, in [0, 1] (SQuAD prints them times 100).

Human performance (ViQuAD §5.1, following Cui et al. 2019 rather than Rajpurkar et al. 2016): for
a question with several answers, each answer in turn is taken as the "human prediction" and scored
(max over the others, as above) against the remaining answers; the per-question human score is the
mean over these rotations, and the dataset score the mean over questions with at least two
answers. The paper's text says both "first, second and third answer" and "the average of four
results" for its four answers; we rotate over all answers, which gives the four results. Both rules reproduce
the paper's Table 5 (human EM 85.65 / F1 95.19 on dev, 85.59 / 94.69 on test) on the official files, all
2,285 and 2,210 questions counted (tests/unit/test_official_parity.py).

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

__all__ = ["RULES", "normalize_answer", "squad_normalize_answer", "exact_match", "f1", "em_f1",
           "human_performance"]

#: EM/F1 rules (module doc).
RULES = ("vietnamese", "squad")

_ASCII_PUNCT = frozenset(string.punctuation)
_CANDIDATE_RE = re.compile(r"[^\w\s]|_")
_ASCII_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")


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


@functools.lru_cache(maxsize=1 << 16)
def squad_normalize_answer(s: str) -> str:
    """SQuAD v1.1's ``normalize_answer`` (module doc, ``rule="squad"``): lowercase, ASCII punctuation deleted,
    the words ``a``/``an``/``the`` replaced by a space, whitespace collapsed."""
    s = s.lower().translate(_ASCII_PUNCT_TABLE)
    return " ".join(_ARTICLES_RE.sub(" ", s).split())


def _normalizer(rule: str):
    if rule not in RULES:
        raise ValueError(f"EM/F1 rule must be one of {RULES}, got {rule!r}")
    return squad_normalize_answer if rule == "squad" else normalize_answer


def exact_match(prediction: str, answer: str, rule: str = "vietnamese") -> float:
    """1.0 if the normalized strings are equal under ``rule`` (:data:`RULES`), else 0.0."""
    norm = _normalizer(rule)
    return float(norm(prediction) == norm(answer))


def _f1_tokens(pred_tokens: list[str], gold_tokens: list[str], rule: str) -> float:
    if not pred_tokens and not gold_tokens and rule == "vietnamese":
        return 1.0  # both empty (SQuAD v2.0's no-answer rule)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = 1.0 * num_same / len(pred_tokens)
    recall = 1.0 * num_same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def f1(prediction: str, answer: str, rule: str = "vietnamese") -> float:
    """Token F1 between two answers under ``rule`` (:data:`RULES`)."""
    norm = _normalizer(rule)
    return _f1_tokens(norm(prediction).split(), norm(answer).split(), rule)


def em_f1(hyps: Sequence[str], refs: Sequence[Sequence[str]],
          rule: str = "vietnamese") -> tuple[np.ndarray, np.ndarray]:
    """Per-question EM and F1, each the max over the question's references.

    Args:
      hyps: ``items`` predictions.
      refs: ``items`` non-empty lists of references.
      rule: ``"vietnamese"`` or ``"squad"`` (:data:`RULES`, module doc).

    Returns:
      ``(em, f1)``, each ``(items,)`` float64 in [0, 1].

    Raises:
      ValueError: an unknown rule.
    """
    norm = _normalizer(rule)
    em = np.zeros((len(hyps),), np.float64)
    f = np.zeros((len(hyps),), np.float64)
    for i, (hyp, answers) in enumerate(zip(hyps, refs)):
        p = norm(hyp)
        p_tok = p.split()
        norm_refs = [norm(a) for a in answers]
        em[i] = max(float(p == a) for a in norm_refs)
        f[i] = max(_f1_tokens(p_tok, a.split(), rule) for a in norm_refs)
    return em, f


def human_performance(refs: Sequence[Sequence[str]],
                      rule: str = "vietnamese") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-question human EM/F1 by the ViQuAD cross-validation protocol.

    Args:
      refs: ``items`` lists of answers.
      rule: the EM/F1 rule (:data:`RULES`).

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
            rule,
        )
        em[i] = rot_em.mean()
        f[i] = rot_f1.mean()
    return em, f, several
