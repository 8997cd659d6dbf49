"""Dataset statistics of the OpenViVQA paper's §3.3 for any set of :class:`~openvivqa_jax.analysis.records.QA`.

:func:`statistics` gives, for one split (or all splits together):

* ``images``, ``questions``, ``answers`` (references; OpenViVQA has one per question) and QAs per image
  (paper Table 2);
* question and answer lengths in syllables (:func:`~openvivqa_jax.analysis.records.syllables`): histogram,
  min, mean, median, max, and for answers the share of lengths in [2, 10] (paper §3.3.1, Figures 4-5: "most
  of the answers have lengths that fall between 2 and 10");
* Text QA / Non-text QA / unknown counts (paper §3.2.3, Table 2);
* vocabulary sizes (distinct syllables of questions, of answers, of both);
* the linguistic level of the answers (paper Table 4) by :mod:`openvivqa_jax.analysis.linguistic`, and the
  min / mean / max syllables of questions and answers (the "Word" columns of Table 3);
* OCR coverage (:func:`ocr_coverage`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence

import numpy as np

from openvivqa_jax.analysis.linguistic import LEVELS, level_of_tokens
from openvivqa_jax.analysis.records import QA, syllables

__all__ = ["ANSWER_BAND", "length_summary", "ocr_coverage", "statistics", "answer_vocabulary"]

#: The answer-length band of paper §3.3.1, inclusive, in syllables.
ANSWER_BAND = (2, 10)


def length_summary(lengths: Sequence[int]) -> dict:
    """``{"count", "min", "mean", "median", "max", "histogram": {length: count}}`` of token counts.

    Empty input gives ``count`` 0 and None for the others.
    """
    if not lengths:
        return {"count": 0, "min": None, "mean": None, "median": None, "max": None, "histogram": {}}
    a = np.asarray(lengths)
    hist = collections.Counter(int(x) for x in a)
    return {
        "count": int(a.size),
        "min": int(a.min()),
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "max": int(a.max()),
        "histogram": {str(k): hist[k] for k in sorted(hist)},
    }


def answer_vocabulary(qas: Iterable[QA]) -> set[str]:
    """The distinct syllables of every answer of ``qas``."""
    return {t for q in qas for a in q.answers for t in syllables(a)}


def ocr_coverage(qas: Sequence[QA], known: set[str], reference_split: str | None = None) -> dict | None:
    """How many answers an OCR-copying model could produce at best.

    For each reference answer (its syllables ``w``) and the image's OCR tokens ``O`` (each split into
    whitespace words):

    * ``any_word_in_ocr``: share of answers with at least one ``w`` in ``O``;
    * *new words*: the ``w`` not in ``known`` (the answer vocabulary of the reference split, normally train:
      words a model can only produce by copying); ``answers_with_new_words`` counts answers that have any;
      ``all_new_words_in_ocr`` is the share of those whose new words are all in ``O``;
    * ``ceiling``: share of answers whose new words are all in ``O`` (an answer without new words counts as
      reachable): the best exact-match rate of a model that generates the known words and copies OCR tokens.

    The new-word fields leave out the answers of ``reference_split`` (all their words are known by
    definition); they are None when no other answer is left (``new_word_answers`` counts those used).

    Args:
      qas: the QAs; those with ``ocr`` None contribute nothing.
      known: the known words (empty when there is no reference split: every word is new).
      reference_split: the split ``known`` was taken from, or None.

    Returns:
      The dict above plus ``answers`` (answers of QAs with OCR information) and ``images_with_ocr_tokens``,
      or None when no QA has OCR information.
    """
    with_ocr = [q for q in qas if q.ocr is not None]
    if not with_ocr:
        return None
    n = any_hit = n_new = with_new = all_new = reachable = 0
    images_with_tokens = set()
    for q in with_ocr:
        ocr_words = {w for tok in q.ocr for w in tok.split()}
        if ocr_words:
            images_with_tokens.add((q.split, q.image_id))
        for a in q.answers:
            words = syllables(a)
            if not words:
                continue
            n += 1
            any_hit += any(w in ocr_words for w in words)
            if q.split != reference_split:
                n_new += 1
                new = [w for w in words if w not in known]
                covered = all(w in ocr_words for w in new)
                reachable += covered
                if new:
                    with_new += 1
                    all_new += covered
    share = (lambda x, d: x / d if d else None)
    return {
        "answers": n,
        "images_with_ocr_tokens": len(images_with_tokens),
        "any_word_in_ocr": share(any_hit, n),
        "new_word_answers": n_new,
        "answers_with_new_words": with_new if n_new else None,
        "all_new_words_in_ocr": share(all_new, with_new),
        "ceiling": share(reachable, n_new),
    }


def statistics(qas: Sequence[QA], known: set[str] = frozenset(), reference_split: str | None = None) -> dict:
    """The statistics of the module doc for ``qas`` (one split, or several together).

    Args:
      qas: the QAs (non-empty).
      known, reference_split: passed to :func:`ocr_coverage`.

    Returns:
      A JSON-ready dict: ``images`` (None when a QA has no image id), ``questions``, ``answers``,
      ``qas_per_image`` (:func:`length_summary` of QAs per image, or None), ``question_length``,
      ``answer_length`` (with ``share_2_to_10``), ``qa_types`` (``text``, ``non_text``, ``unknown``),
      ``vocabulary`` (``questions``, ``answers``, ``all``), ``linguistic_level`` (``counts`` and ``shares``
      of word/phrase/sentence over answers), ``ocr_coverage``.
    """
    q_lengths, a_lengths = [], []
    q_vocab, a_vocab = set(), set()
    levels = collections.Counter({lv: 0 for lv in LEVELS})
    for q in qas:
        qt = syllables(q.question)
        q_lengths.append(len(qt))
        q_vocab.update(qt)
        for a in q.answers:
            at = syllables(a)
            a_lengths.append(len(at))
            a_vocab.update(at)
            levels[level_of_tokens(at)] += 1
    has_images = all(q.image_id is not None for q in qas)
    # Images are (split, image_id): an id may be reused by another split of a multi-file source.
    per_image = collections.Counter((q.split, q.image_id) for q in qas) if has_images else None
    types = collections.Counter(q.qa_type for q in qas)
    answer_length = length_summary(a_lengths)
    lo, hi = ANSWER_BAND
    answer_length["share_2_to_10"] = (sum(lo <= x <= hi for x in a_lengths) / len(a_lengths)) if a_lengths else None
    n_answers = sum(levels.values())
    return {
        "images": len(per_image) if per_image is not None else None,
        "questions": len(qas),
        "answers": len(a_lengths),
        "qas_per_image": length_summary(list(per_image.values())) if per_image is not None else None,
        "question_length": length_summary(q_lengths),
        "answer_length": answer_length,
        "qa_types": {"text": types.get(1, 0), "non_text": types.get(0, 0), "unknown": types.get(-1, 0)},
        "vocabulary": {"questions": len(q_vocab), "answers": len(a_vocab), "all": len(q_vocab | a_vocab)},
        "linguistic_level": {
            "counts": {lv: levels[lv] for lv in LEVELS},
            "shares": {lv: (levels[lv] / n_answers if n_answers else None) for lv in LEVELS},
        },
        "ocr_coverage": ocr_coverage(qas, known, reference_split),
    }
