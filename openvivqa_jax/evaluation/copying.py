"""Copy probes: does a model reproduce scene text it has never seen in training?

* :func:`shop_name_copy_rate`: on the synthetic set, every question asking for a shop's name has the
  reference ``"<subject> tên là <name>"`` (``tfds_builders/synthetic_openvivqa/generator.py``). The rate
  is the fraction of those questions whose prediction contains the full name as a contiguous word
  sequence. The test split's names never occur in train, so only OCR copying can produce them.
* :func:`ocr_word_recall`: dataset-agnostic; over reference words that are OCR tokens of the example,
  the fraction that the prediction contains.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from openvivqa_jax.text.normalize import normalize_text

__all__ = ["shop_name_copy_rate", "ocr_word_recall", "contains_words"]

_NAME_RE = re.compile(r"^.+ tên là (.+)$")


def contains_words(text: str, phrase: str) -> bool:
    """Whether ``phrase``'s whitespace words occur contiguously in ``text`` (both normalized)."""
    t, p = normalize_text(text).split(), normalize_text(phrase).split()
    if not p:
        return False
    return any(t[i:i + len(p)] == p for i in range(len(t) - len(p) + 1))


def shop_name_copy_rate(records: Sequence[Mapping[str, Any]]) -> dict:
    """Fraction of shop-name questions whose prediction contains the full name.

    Args:
      records: prediction records ``{question_id, prediction, references, qa_type}``.

    Returns:
      ``{"rate": float | None, "num_questions": int, "num_copied": int}``; ``rate`` is None when the
      split has no shop-name question.
    """
    n = hit = 0
    for r in records:
        if int(r.get("qa_type", -1)) != 1 or not r.get("references"):
            continue
        m = _NAME_RE.match(normalize_text(r["references"][0]))
        if not m:
            continue
        n += 1
        hit += contains_words(r.get("prediction") or "", m.group(1))
    return {"rate": (hit / n) if n else None, "num_questions": n, "num_copied": hit}


def ocr_word_recall(records: Sequence[Mapping[str, Any]], ocr_tokens: Mapping[str, Sequence[str]]) -> dict:
    """Recall of reference words that are OCR tokens.

    Args:
      records: prediction records.
      ocr_tokens: ``question_id -> normalized OCR tokens`` of the example.

    Returns:
      ``{"recall": float | None, "num_words": int}`` over all (question, reference-word-in-OCR) pairs
      of the first reference.
    """
    total = found = 0
    for r in records:
        toks = set(ocr_tokens.get(r["question_id"], ()))
        if not toks or not r.get("references"):
            continue
        pred = set(normalize_text(r.get("prediction") or "").split())
        for w in set(normalize_text(r["references"][0]).split()) & toks:
            total += 1
            found += w in pred
    return {"recall": (found / total) if total else None, "num_words": total}
