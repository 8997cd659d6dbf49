"""EVJVQA's metrics (VLSP 2022 EVJVQA challenge): token F1, the ranking metric, and BLEU as the mean of
BLEU-1..4, computed by the challenge's own rule in every text mode of the evaluator.

The metric is defined by the challenge's scorer, ``evaluate_metrics.py`` of github ``phanxuanphucnd/EVJVQA``
(``compute_f1`` and ``compute_avg_bleu``). Its rule, reproduced here on the strings as given (no Vietnamese
normalization, no use of a ``language`` field):

* **Japanese or not** (:func:`is_japanese`) is decided from the *reference*'s characters: a reference holding
  a character of :data:`JAPANESE_RANGES` (CJK punctuation, kana, full-width forms, the common kanji block, and
  the stars, arrows and reference mark the scorer lists) makes the question Japanese, and the prediction is
  cut the same way.
* **Tokens** (:func:`answer_tokens`): a Japanese answer is the list of its characters as written (spaces and
  punctuation included, no lowercasing); any other answer is lowercased, its ASCII punctuation
  (``string.punctuation``) deleted without leaving a space (``t-shirt`` -> ``tshirt``), then split on
  whitespace.
* **F1** (:func:`token_f1`): on token *sets*, ``p = |H ∩ R| / |H|``, ``r = |H ∩ R| / |R|``,
  ``F1 = 2pr / (p + r)``, 0 when nothing is shared; when the prediction or the reference has no token, 1 if
  both have none, else 0. The corpus value is the mean over questions.
* **BLEU** (:func:`bleu_mean`): the tokens joined by spaces and split on whitespace again (so a space inside a
  Japanese answer is no token here), corpus BLEU-1..4 of pycocoevalcap 1.2 (:mod:`.bleu`: clipped n-gram
  precision, closest reference length, brevity penalty), and their mean ``(B1 + B2 + B3 + B4) / 4``. Per
  question: the mean of the sentence BLEU-1..4 (the scorer's ``bleu_list``).

The challenge's files give one reference per question. With several references the evaluator takes the
maximum F1 over them (each reference decides for itself whether it is Japanese), and BLEU's usual
multi-reference counts; a question is cut as Japanese for BLEU when any of its references is Japanese.

Example: reference ``2人`` against the prediction ``女性の右側に人が2人います`` (13 characters, ``人`` twice, 12
distinct): ``p = 2/12, r = 1, F1 = 2/7``; a prediction ``t-shirt`` equals the reference ``T-shirt`` and ``tshirt``.

Arrays: ``(items,)`` per-question values in [0, 1].
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

import numpy as np

import openvivqa_jax.evaluation.bleu as bleu_lib
from openvivqa_jax.evaluation.ngrams import build_ngram_corpus

__all__ = ["JAPANESE_RANGES", "is_japanese", "answer_tokens", "token_f1", "f1_scores", "bleu_mean",
           "evjvqa_scores"]

#: Code point ranges whose presence in a reference makes a question Japanese (the scorer's
#: ``is_japanese_sentence``): CJK symbols and punctuation, hiragana, katakana, full-width forms and half-width
#: katakana, the common and uncommon kanji, two stars, six arrows and the reference mark.
JAPANESE_RANGES = (
    (0x3000, 0x303F),
    (0x3040, 0x309F),
    (0x30A0, 0x30FF),
    (0xFF00, 0xFFEF),
    (0x4E00, 0x9FAF),
    (0x2605, 0x2606),
    (0x2190, 0x2195),
    (0x203B, 0x203B),
)
_JAPANESE_RE = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in JAPANESE_RANGES) + "]")
_ASCII_PUNCT = str.maketrans("", "", string.punctuation)


def is_japanese(text: str) -> bool:
    """Whether ``text`` holds a character of :data:`JAPANESE_RANGES` (the scorer's test of a reference)."""
    return _JAPANESE_RE.search(text) is not None


def answer_tokens(text: str, japanese: bool) -> list[str]:
    """The scorer's tokens of one answer (module doc).

    Args:
      text: the answer as given.
      japanese: whether the question is Japanese (:func:`is_japanese` of its reference).

    Returns:
      Every character of ``text`` when ``japanese``; else the whitespace tokens of the lowercased text with
      ASCII punctuation deleted.
    """
    if japanese:
        return list(text)
    return text.lower().translate(_ASCII_PUNCT).split()


def token_f1(hyp_tokens: Sequence[str], ref_tokens: Sequence[str]) -> float:
    """The scorer's F1 of one prediction against one reference, on token sets (module doc).

    Returns:
      A value in [0, 1]: 1 or 0 when either side has no token (1 when both have none), else ``2pr / (p + r)``
      with the set precision and recall (0 when nothing is shared).
    """
    if not hyp_tokens or not ref_tokens:
        return float(list(hyp_tokens) == list(ref_tokens))
    hyp_set, ref_set = set(hyp_tokens), set(ref_tokens)
    common = len(hyp_set & ref_set)
    precision = common / len(hyp_set)
    recall = common / len(ref_set)
    if precision == 0 or recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def f1_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> np.ndarray:
    """Per-question F1, the maximum over the question's references (each decides whether it is Japanese).

    Args:
      hyps: ``(items,)`` predictions as given.
      refs: ``(items, refs_i)`` references as given (each question has at least one).

    Returns:
      ``(items,)`` float64.
    """
    out = np.zeros((len(hyps),), np.float64)
    for i, (h, rs) in enumerate(zip(hyps, refs)):
        out[i] = max((token_f1(answer_tokens(h, is_japanese(r)), answer_tokens(r, is_japanese(r))) for r in rs),
                     default=0.0)
    return out


def _bleu_strings(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[list[str], list[list[str]]]:
    """The scorer's BLEU strings: each answer's tokens joined by single spaces and re-split on whitespace."""
    h, r = [], []
    for hyp, rs in zip(hyps, refs):
        japanese = any(is_japanese(x) for x in rs)
        h.append(" ".join(" ".join(answer_tokens(hyp, japanese)).split()))
        r.append([" ".join(" ".join(answer_tokens(x, is_japanese(x))).split()) for x in rs])
    return h, r


def bleu_mean(
    hyps: Sequence[str], refs: Sequence[Sequence[str]], groups: dict[str, np.ndarray] | None = None,
) -> tuple[dict[str, float], np.ndarray]:
    """Mean of corpus BLEU-1..4 on the scorer's tokens, per group, and the per-question mean of sentence BLEU-1..4.

    Args:
      hyps, refs: as in :func:`f1_scores`.
      groups: group name -> ``(k,)`` non-empty indices; None = ``{"overall": all}``.

    Returns:
      ``({group: mean BLEU}, (items,) per-question mean sentence BLEU)``.
    """
    h, r = _bleu_strings(hyps, refs)
    stats = bleu_lib.bleu_stats(build_ngram_corpus(h, r))
    groups = {"overall": np.arange(len(hyps))} if groups is None else groups
    per_group = {g: float(np.mean(bleu_lib.corpus_bleu(stats, idx))) for g, idx in groups.items()}
    return per_group, bleu_lib.sentence_bleu(stats).mean(axis=1)


def evjvqa_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> dict[str, float]:
    """Both corpus metrics of a set of questions: ``{"F1": mean F1, "BLEU": mean of BLEU-1..4}`` (module doc)."""
    bleu, _ = bleu_mean(hyps, refs)
    return {"F1": float(f1_scores(hyps, refs).mean()), "BLEU": bleu["overall"]}
