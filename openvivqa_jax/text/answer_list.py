"""The answer classes of the classifiers (SAAA, MCAN, LoRRA): top-K training answers (+ OCR slots).

Usage (the train split's records; every string passes through
:func:`~openvivqa_jax.text.normalize.normalize_text`)::

    alist = AnswerList.build((a for r in train_records for a in r.answers), top_k=cfg.model.num_answers)
    alist.save(os.path.join(workdir, "answers.json"))          # AnswerList.load(path) restores it
    cfg.model.num_answers = len(alist)                          # K, may be < top_k on small data
    scores = alist.scores(rec.answers, rec.ocr_texts, num_ocr)  # (K + num_ocr,) float32 -> "answer_scores"
    text = alist.decode(class_id, rec.ocr_texts)                # prediction -> evaluator

Classes: ``[0, K)`` are answers sorted by descending training frequency (ties broken by the answer
string, so the list is deterministic); class 0 is the most frequent answer and a real class. With
``num_ocr = N > 0`` (LoRRA), class ``K + j`` means "OCR token ``j``".

Soft scores (the VQA targets; Antol et al. 2015, as used by MCAN and LoRRA): a class matched by ``n``
references scores ``min(n / full_score_count, 1)`` with ``full_score_count = 3``. OCR slot ``j`` is matched
by a reference equal to that token's text, so multi-word answers cannot match a single slot (as in LoRRA).
A reference both in the list and among the OCR tokens scores on both classes.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from absl import logging

from openvivqa_jax import outputs
from openvivqa_jax import jsonio
from openvivqa_jax.text.answer_vocab import ocr_words
from openvivqa_jax.text.normalize import normalize_text

__all__ = ["AnswerList", "FULL_SCORE_COUNT"]

#: References needed for a full soft score (VQA: ``min(#humans that said it / 3, 1)``).
FULL_SCORE_COUNT = 3


class AnswerList:
    """An ordered list of ``K`` normalized answers (the classifier's classes).

    Args:
      answers: the answers in class order (normalized here).
      counts: their training frequencies (optional, kept for inspection).
      full_score_count: references needed for a soft score of 1.

    Raises:
      ValueError: if an answer is empty or repeated after normalization, if ``counts`` has another
        length, or if ``full_score_count < 1``.
    """

    def __init__(self, answers: Sequence[str], counts: Sequence[int] | None = None,
                 full_score_count: int = FULL_SCORE_COUNT):
        norm = [normalize_text(a) for a in answers]
        for i, a in enumerate(norm):
            if not a:
                raise ValueError(f"answer class {i} ({answers[i]!r}) is empty after normalization")
        dup = [a for a, c in collections.Counter(norm).items() if c > 1]
        if dup:
            raise ValueError(f"answers repeated after normalization: {dup[:5]}")
        if counts is not None and len(counts) != len(norm):
            raise ValueError(f"{len(counts)} counts for {len(norm)} answers")
        if full_score_count < 1:
            raise ValueError(f"full_score_count must be >= 1, got {full_score_count}")
        self.answers = norm
        self.counts = list(counts) if counts is not None else None
        self.full_score_count = int(full_score_count)
        #: How many distinct answers the list was chosen from (None: not known, e.g. a file of older versions).
        self.distinct_answers: int | None = None
        self._index = {a: i for i, a in enumerate(norm)}

    @classmethod
    def build(cls, answers: Iterable[str], top_k: int, full_score_count: int = FULL_SCORE_COUNT) -> AnswerList:
        """The ``top_k`` most frequent normalized answers (ties: lexicographic order of the answer).

        Args:
          answers: every reference answer of the training split (one string each; repeats count).
          top_k: ``K``; fewer classes result when there are fewer distinct answers (logged).

        Returns:
          The list. Empty answers are skipped, counted and logged.

        Raises:
          ValueError: if ``top_k < 1`` or no non-empty answer is given.
        """
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        counter: collections.Counter = collections.Counter()
        empty = 0
        for a in answers:
            n = normalize_text(a)
            if n:
                counter[n] += 1
            else:
                empty += 1
        if empty:
            logging.info("AnswerList.build: skipped %d empty answers", empty)
        if not counter:
            raise ValueError("AnswerList.build: no non-empty answer given")
        ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k]
        total = sum(counter.values())
        covered = sum(c for _, c in ranked)
        logging.info("AnswerList.build: %d distinct answers, kept %d (top_k=%d) covering %.1f%% of %d answers",
                     len(counter), len(ranked), top_k, 100.0 * covered / total, total)
        alist = cls([a for a, _ in ranked], [c for _, c in ranked], full_score_count)
        alist.distinct_answers = len(counter)
        return alist

    def __len__(self) -> int:
        return len(self.answers)

    def index(self, answer: str) -> int | None:
        """Class id of ``answer`` (normalized first), or None when it is not in the list."""
        return self._index.get(normalize_text(answer))

    def save(self, path: str) -> None:
        """Writes ``{"answers": [...], "counts": [...] | null, "full_score_count": int, "distinct_answers": int |
        null}`` as UTF-8 JSON (``distinct_answers`` tells whether another ``top_k`` would give another list)."""
        outputs.write_json(path, {"answers": self.answers, "counts": self.counts,
                                  "full_score_count": self.full_score_count,
                                  "distinct_answers": self.distinct_answers}, indent=0)

    @classmethod
    def load(cls, path: str) -> AnswerList:
        """Reads a file written by :meth:`save`.

        Raises:
          FileNotFoundError: if ``path`` does not exist.
          ValueError: for malformed content (names the file).
        """
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        d = jsonio.read_json(path, error=ValueError, repeated_keys="error")
        if not isinstance(d, dict) or not isinstance(d.get("answers"), list) or \
                not all(isinstance(a, str) for a in d["answers"]):
            raise ValueError(f"{path}: expected {{'answers': [str, ...], ...}}")
        try:
            alist = cls(d["answers"], d.get("counts"), d.get("full_score_count", FULL_SCORE_COUNT))
            distinct = d.get("distinct_answers")
            alist.distinct_answers = distinct if isinstance(distinct, int) and not isinstance(distinct, bool) else None
            return alist
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from e

    def scores(self, references: Sequence[str], ocr_tokens: Sequence[str] = (), num_ocr: int = 0) -> np.ndarray:
        """Soft target scores of one question.

        Args:
          references: the question's reference answers.
          ocr_tokens: the example's OCR token texts in slot order (only the first ``num_ocr`` are slots).
          num_ocr: ``N`` OCR classes (0 for classifiers without OCR classes).

        Returns:
          ``(K + num_ocr,)`` float32 in [0, 1]: ``min(n / full_score_count, 1)`` where ``n`` counts the
          references equal to the class's answer (or to the slot's OCR token); empty slots score 0.
        """
        refs = collections.Counter(r for r in (normalize_text(x) for x in references) if r)
        out = np.zeros((len(self.answers) + num_ocr,), np.float32)
        full = float(self.full_score_count)
        for ref, n in refs.items():
            i = self._index.get(ref)
            if i is not None:
                out[i] = min(n / full, 1.0)
        for j, tok in enumerate(list(ocr_tokens)[:num_ocr]):
            n = refs.get(normalize_text(tok), 0)
            out[len(self.answers) + j] = min(n / full, 1.0)
        return out

    def decode(self, class_id: int, ocr_tokens: Sequence[str] = ()) -> str:
        """Answer text of a predicted class: ``answers[id]``, or OCR token ``id - K`` (``""`` for an empty slot).

        Raises:
          ValueError: for a negative id.
        """
        class_id = int(class_id)
        if class_id < 0:
            raise ValueError(f"class id must be >= 0, got {class_id}")
        if class_id < len(self.answers):
            return self.answers[class_id]
        j = class_id - len(self.answers)
        return normalize_text(ocr_tokens[j]) if j < len(ocr_tokens) else ""

    def word_provenance(self, class_id: int, ocr_tokens: Sequence[Mapping[str, Any]]) -> list[dict]:
        """Where the words of class ``class_id``'s answer come from: ``{"word", "source": "answer_class",
        "class_id"}`` per word of an answer class, or the words of OCR token ``class_id - K``
        (:func:`openvivqa_jax.text.answer_vocab.ocr_words`; none for an empty slot).

        Args:
          ocr_tokens: the example's OCR tokens in slot order (``{"text", "box", "score"}``).
        """
        class_id = int(class_id)
        if class_id < len(self.answers):
            return [{"word": w, "source": "answer_class", "class_id": class_id}
                    for w in self.decode(class_id).split()]
        j = class_id - len(self.answers)
        return ocr_words(j, ocr_tokens[j]) if j < len(ocr_tokens) else []

    def __repr__(self) -> str:
        return f"AnswerList(K={len(self)}, head={self.answers[:3]})"

