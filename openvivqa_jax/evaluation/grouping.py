"""Scores per value of a record field: per QA type, per template kind (synthetic set), per language.

A corpus-level average hides a model that answers one kind of question from the question alone (all colour
questions wrong, all shop names right). :func:`field_scores` splits the scored questions by each field's value
and scores every part as if it were the whole corpus, the rule of the evaluator's ``text_qa`` / ``non_text_qa``
groups (:mod:`.evaluator`): CIDEr-D with the IDF over that part's references, corpus BLEU over that part, the
mean of the per-question values for the rest.

Per value (``by_field[field][value]``):

==================  ================================================================================
``num_questions``   questions with that value
``exact_match``     share of questions whose prediction equals one reference token for token, after
                    the evaluator's sanitizing (:mod:`.sanitize`: normalized, lowercased, punctuation
                    spaced) and with punctuation-only tokens dropped (SQuAD v1.1's answer normalization
                    without its English article rule); in [0, 1]
``CIDEr``           CIDEr-D x10 over the part (:mod:`.cider`); None for a one-question part (its IDF
                    is log(1) = 0 for every n-gram, so the value would be 0 by construction)
``BLEU-1..4``       corpus BLEU over the part, when requested (:mod:`.bleu`)
others              mean over the part of the per-question values of ROUGE-L, ANLS, VQA-accuracy, EM,
                    F1, EVJVQA-F1, WMDRel, when requested (METEOR is left out: one JVM run per part)
``EVJVQA-BLEU``     mean of corpus BLEU-1..4 on EVJVQA's tokens over the part, when requested (added by
                    the evaluator, which knows each question's language; :mod:`.evjvqa`)
==================  ================================================================================

Fields: ``qa_type`` (values ``text``, ``non_text``; unknown types are left out), and every field given in
``labels`` such as ``kind`` (the synthetic set's template kinds: ``name``, ``price``, ``colour``,
``position``, ``count``, ...) and ``language`` (ISO 639-1). Questions whose value is empty or missing are
not in any part of that field; a field with no value at all is not reported.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import openvivqa_jax.evaluation.bleu as bleu_lib
import openvivqa_jax.evaluation.cider as cider_lib
from openvivqa_jax.evaluation.formats import QA_TYPE_NON_TEXT, QA_TYPE_TEXT
from openvivqa_jax.evaluation.ngrams import build_ngram_corpus

__all__ = ["MEAN_METRICS", "QA_TYPE_NAMES", "exact_match", "qa_type_labels", "field_scores", "field_scalars",
           "format_field_tables"]

#: Metrics whose part value is the mean of the per-question values.
MEAN_METRICS = ("ROUGE-L", "ANLS", "VQA-accuracy", "EM", "F1", "EVJVQA-F1", "WMDRel", "CLinRel", "CMedRel")
#: ``qa_type`` value -> the label used in ``by_field["qa_type"]``.
QA_TYPE_NAMES = {QA_TYPE_TEXT: "text", QA_TYPE_NON_TEXT: "non_text"}
_BLEU = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4")


def _words(text: str) -> tuple[str, ...]:
    return tuple(t for t in text.split() if not all(unicodedata.category(c).startswith("P") for c in t))


def exact_match(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> np.ndarray:
    """Per-question exact match: ``(questions,)`` float64, 1.0 where the (sanitized) prediction equals one of
    the question's (sanitized) references token for token, punctuation-only tokens ignored; else 0.0."""
    return np.asarray([float(_words(h) in {_words(r) for r in rs}) for h, rs in zip(hyps, refs)], np.float64)


def qa_type_labels(types: Sequence[int]) -> list[str | None]:
    """QA types (1, 0, -1) -> labels ``text``, ``non_text``, None (unknown: in no part)."""
    return [QA_TYPE_NAMES.get(int(t)) for t in types]


def field_scores(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    labels: Mapping[str, Sequence[str | None]],
    names: Sequence[str],
    per_question: Mapping[str, np.ndarray] | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Scores every value of every field (module doc).

    Args:
      hyps: ``(questions,)`` sanitized predictions.
      refs: ``(questions,)`` lists of sanitized, non-empty references.
      labels: field -> ``(questions,)`` value per question (None or ``""``: in no part).
      names: the requested metric names (:data:`.evaluator.ALL_METRICS`); BLEU-1..4 and the
        :data:`MEAN_METRICS` among them are added per part.
      per_question: metric -> ``(questions,)`` per-question values computed by the evaluator; the
        :data:`MEAN_METRICS` are averaged from it.

    Returns:
      ``{field: {value: {"num_questions": n, "exact_match": x, "CIDEr": x | None, ...}}}``; values in
      sorted order; fields without any value are left out.

    Raises:
      ValueError: a label list whose length is not the number of questions.
    """
    n = len(hyps)
    per_question = per_question or {}
    parts: dict[str, dict[str, np.ndarray]] = {}
    for field, values in labels.items():
        if len(values) != n:
            raise ValueError(f"field {field!r}: {len(values)} values for {n} questions")
        by_value: dict[str, list[int]] = {}
        for i, v in enumerate(values):
            if v is not None and str(v) != "":
                by_value.setdefault(str(v), []).append(i)
        if by_value:
            parts[field] = {v: np.asarray(idx, np.int64) for v, idx in sorted(by_value.items())}
    if not parts:
        return {}
    em = exact_match(hyps, refs)
    corpus = build_ngram_corpus(list(hyps), [list(r) for r in refs])
    bleu_names = [m for m in _BLEU if m in names]
    bstats = bleu_lib.bleu_stats(corpus) if bleu_names else None
    means = [m for m in MEAN_METRICS if m in names and m in per_question]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for field, by_value in parts.items():
        out[field] = {}
        for value, idx in by_value.items():
            row: dict[str, Any] = {"num_questions": int(idx.size), "exact_match": float(em[idx].mean())}
            row["CIDEr"] = float(cider_lib.cider_d(corpus, idx).mean()) if idx.size > 1 else None
            if bstats is not None:
                b = bleu_lib.corpus_bleu(bstats, idx)
                for k, m in enumerate(_BLEU):
                    if m in bleu_names:
                        row[m] = float(b[k])
            for m in means:
                row[m] = float(np.asarray(per_question[m], np.float64)[idx].mean())
            out[field][value] = row
    return out


def field_scalars(by_field: Mapping[str, Mapping[str, Mapping[str, Any]]], prefix: str) -> dict[str, float]:
    """Flat scalars of :func:`field_scores`' result for TensorBoard and ``metrics.jsonl``:
    ``{f"{prefix}/{field}/{value}/exact_match": share in [0, 1]}``, one per field value (e.g.
    ``dev/kind/colour/exact_match``), so that a kind learned late shows as its own curve."""
    return {f"{prefix}/{field}/{value}/exact_match": float(r["exact_match"])
            for field, by_value in by_field.items() for value, r in by_value.items()}


def format_field_tables(by_field: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """Plain-text tables of :func:`field_scores`' result: per field, one row per value with the question
    count, exact match (%) and CIDEr, plus EVJVQA-F1 / EVJVQA-BLEU when present. Empty string for no fields."""
    blocks = []
    for field, by_value in by_field.items():
        extra = [m for m in ("EVJVQA-F1", "EVJVQA-BLEU") if any(m in r for r in by_value.values())]
        width = max([len(v) for v in by_value] + [len(f"by {field}")])
        head = f"{'by ' + field:<{width}}  {'questions':>9} {'exact match':>17} {'CIDEr':>8}" + "".join(
            f" {m:>10}" for m in extra)
        lines = [head]
        for value, r in by_value.items():
            n = r["num_questions"]
            hits = int(round(r["exact_match"] * n))
            em = f"{r['exact_match']:6.1%} ({hits}/{n})"
            cider = "n/a" if r.get("CIDEr") is None else f"{r['CIDEr']:.3f}"
            cells = "".join(f" {r[m]:10.4f}" if r.get(m) is not None else f" {'n/a':>10}" for m in extra)
            lines.append(f"{value:<{width}}  {n:>9d} {em:>17} {cider:>8}{cells}")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)
