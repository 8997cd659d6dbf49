"""EVJVQA's metrics (VLSP 2022 EVJVQA challenge): token F1, the ranking metric, and BLEU as the mean of
BLEU-1..4, on tokens that respect each answer's language.

Japanese is written without spaces, so a whitespace tokenizer turns a whole Japanese answer into one token
and a prediction one character off scores 0 with every n-gram metric. Here:

* **Tokens** (:func:`tokenize`): the text is first sanitized by the evaluator (:mod:`.sanitize`:
  normalization, lowercase, spaced punctuation). Japanese (``ja``) text is cut into single characters;
  Vietnamese and English text into whitespace tokens (a Vietnamese token is a syllable). Punctuation
  (Unicode category ``P*``) is dropped in every language, as in SQuAD's answer normalization, so a
  trailing ``.`` or ``。`` neither matches nor counts.
* **F1** (:func:`token_f1`): bag-of-tokens precision ``p = |h ∩ r| / |h|`` and recall ``r = |h ∩ r| / |r|``
  with multiset intersection, ``F1 = 2pr / (p + r)``, 0 when nothing is shared; the maximum over the
  references; the corpus value is the mean over questions.
* **BLEU** (:func:`bleu_mean`): corpus BLEU-1..4 of the evaluator's BLEU (:mod:`.bleu`, pycocoevalcap 1.2:
  clipped n-gram precision, closest reference length, brevity penalty) computed on the same tokens, and
  their mean ``(B1 + B2 + B3 + B4) / 4``. Per question: the mean of the sentence BLEU-1..4.

Example: reference ``フォーを売っています`` (10 characters) against ``フォーを売っていま`` (9, all shared) gives
``p = 1, r = 0.9, F1 = 0.947``.

Arrays: ``(items,)`` per-question values in [0, 1].
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Sequence

import numpy as np

import openvivqa_jax.evaluation.bleu as bleu_lib
from openvivqa_jax.evaluation.ngrams import build_ngram_corpus

__all__ = ["CHARACTER_LANGUAGES", "tokenize", "token_f1", "f1_scores", "bleu_mean", "evjvqa_scores"]

#: Languages written without spaces between words, tokenized per character.
CHARACTER_LANGUAGES = frozenset({"ja"})


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def tokenize(text: str, language: str | None) -> list[str]:
    """Splits a (sanitized) answer into EVJVQA's scoring tokens.

    Args:
      text: the answer, already sanitized by the evaluator (lowercase, spaced punctuation).
      language: ISO 639-1 code; ``ja`` (:data:`CHARACTER_LANGUAGES`) is cut per character, anything else
        (``vi``, ``en``, None) on whitespace.

    Returns:
      The tokens in order; punctuation characters and whitespace are dropped.
    """
    if language in CHARACTER_LANGUAGES:
        return [ch for ch in text if not ch.isspace() and not _is_punct(ch)]
    out = []
    for word in text.split():
        if all(_is_punct(ch) for ch in word):
            continue
        out.append(word)
    return out


def token_f1(hyp_tokens: Sequence[str], ref_tokens: Sequence[str]) -> float:
    """Bag-of-tokens F1 of one hypothesis against one reference (0 when they share no token).

    Returns:
      ``2pr / (p + r)`` in [0, 1].
    """
    common = sum((Counter(hyp_tokens) & Counter(ref_tokens)).values())
    if common == 0:
        return 0.0
    p = common / len(hyp_tokens)
    r = common / len(ref_tokens)
    return 2 * p * r / (p + r)


def f1_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]], languages: Sequence[str | None]) -> np.ndarray:
    """Per-question token F1, the maximum over the question's references.

    Args:
      hyps: ``(items,)`` sanitized predictions.
      refs: ``(items, refs_i)`` sanitized references (each question has at least one).
      languages: ``(items,)`` language codes (None: whitespace tokens).

    Returns:
      ``(items,)`` float64.
    """
    out = np.zeros((len(hyps),), np.float64)
    for i, (h, rs, lang) in enumerate(zip(hyps, refs, languages)):
        ht = tokenize(h, lang)
        out[i] = max((token_f1(ht, tokenize(r, lang)) for r in rs), default=0.0)
    return out


def _token_strings(hyps, refs, languages) -> tuple[list[str], list[list[str]]]:
    """The texts re-joined with single spaces around EVJVQA's tokens (so the n-gram code splits them)."""
    h = [" ".join(tokenize(x, lang)) for x, lang in zip(hyps, languages)]
    r = [[" ".join(tokenize(x, lang)) for x in rs] for rs, lang in zip(refs, languages)]
    return h, r


def bleu_mean(
    hyps: Sequence[str], refs: Sequence[Sequence[str]], languages: Sequence[str | None],
    groups: dict[str, np.ndarray] | None = None,
) -> tuple[dict[str, float], np.ndarray]:
    """Mean of corpus BLEU-1..4 on EVJVQA's tokens, per group, and the per-question mean of sentence BLEU-1..4.

    Args:
      hyps, refs, languages: as in :func:`f1_scores`.
      groups: group name -> ``(k,)`` non-empty indices; None = ``{"overall": all}``.

    Returns:
      ``({group: mean BLEU}, (items,) per-question mean sentence BLEU)``.
    """
    h, r = _token_strings(hyps, refs, languages)
    stats = bleu_lib.bleu_stats(build_ngram_corpus(h, r))
    groups = {"overall": np.arange(len(hyps))} if groups is None else groups
    per_group = {g: float(np.mean(bleu_lib.corpus_bleu(stats, idx))) for g, idx in groups.items()}
    return per_group, bleu_lib.sentence_bleu(stats).mean(axis=1)


def evjvqa_scores(
    hyps: Sequence[str], refs: Sequence[Sequence[str]], languages: Sequence[str | None],
) -> dict[str, float]:
    """Both corpus metrics of a set of questions: ``{"F1": mean token F1, "BLEU": mean of BLEU-1..4}``."""
    bleu, _ = bleu_mean(hyps, refs, languages)
    return {"F1": float(f1_scores(hyps, refs, languages).mean()), "BLEU": bleu["overall"]}
