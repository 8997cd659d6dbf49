"""The evaluator: every metric of docs/design.md §9, overall and per QA type, with counted notes.

``score`` is what the trainer (through ``evaluate_split``) and ``python -m openvivqa_jax.evaluate``
both call, so the two give the same numbers for the same predictions.

``score`` prepares the corpus once (sanitizing, counting bad input, grouping) into a :class:`ScoringContext`
and calls each metric function of the registry :data:`METRIC_FUNCTIONS` one of whose names is requested
(:func:`register_metric` adds one); the functions write their values, per-question scores and notes there.

Metrics (names as in the contract; values in [0, 1] except CIDEr in [0, 10]):

=============  ===============================================================================
BLEU-1..4      corpus BLEU, closest reference length (pycocoevalcap 1.2), :mod:`.bleu`
ROUGE-L        beta 1.2, max precision/recall over references, mean over questions, :mod:`.rouge`
CIDEr          CIDEr-D, sigma 6, IDF over the scored references, x10, :mod:`.cider`
METEOR         Meteor 1.5 jar with ``-norm`` (as papers ran it), :mod:`.meteor`
METEOR-vi      Meteor 1.5 jar without ``-norm`` (keeps Vietnamese letters whole), :mod:`.meteor`
ANLS           ST-VQA, tau 0.5, RRC boundary rule (0.5 kept), :mod:`.anls`
VQA-accuracy   official leave-one-out min(n/3, 1) with 10 answers, :mod:`.vqa_accuracy`
EM, F1         SQuAD v1.1 style, max over references, :mod:`.squad`
EVJVQA-F1      EVJVQA's ranking metric, the challenge scorer's token-set F1 in every mode, :mod:`.evjvqa`
EVJVQA-BLEU    mean of corpus BLEU-1..4 on the challenge scorer's tokens in every mode, :mod:`.evjvqa`
WMDRel         1 - WMD/2 over unit word vectors from a user file (only with ``vectors``), :mod:`.wmd`
CLinRel        cosine of hypothesis and reference in a W2VV++ visual space (``relevance``), :mod:`.relevance`
CMedRel        cosine of hypothesis and image feature in that space (``relevance``), :mod:`.relevance`
=============  ===============================================================================

Group values: each group (``overall``, ``text_qa``, ``non_text_qa``) is scored as if it were the
whole corpus: corpus BLEU and Meteor's aggregate over the group's questions, CIDEr's IDF over the
group's references (what pycocoevalcap gives when run on that group alone), means for the rest.

Text modes (``text_mode``, :data:`TEXT_MODES`; which rule each metric used is recorded under ``rules`` and
printed under the table, :mod:`.rules`):

- ``"openvivqa"`` (default) sanitizes every string with the Vietnamese normalizer (:mod:`.sanitize`: NFC,
  lowercase, one tone-mark convention, prices, spaced punctuation), so that spellings of one answer
  (``toà``/``tòa``, ``20.000đ``/``20,000 đồng``) count as one. These are Vietnamese-normalized scores, not the
  official scripts' numbers.
- ``"official"``: each metric as its official script computes it. BLEU, ROUGE-L, CIDEr and METEOR on
  pycocoevalcap's strings (Stanford PTBTokenizer, punctuation tokens removed; :mod:`.ptb`, needs Java; without
  it they fall back to the normalized text, named so in ``rules`` and the notes); ANLS by the ST-VQA RRC rule
  (:mod:`.anls`); VQA-accuracy by EvalAI's TextVQA/ST-VQA rule (:mod:`.vqa_accuracy`); EM/F1 by SQuAD v1.1's
  ``evaluate-v1.1.py`` (:mod:`.squad`). These read the answers as given, empty references included.
- ``"pycocoevalcap"`` prepares strings exactly as the original toolkit does (the PTB tokens above, for every
  metric) to reproduce numbers computed with it; it needs Java.

EVJVQA-F1 and EVJVQA-BLEU follow the challenge's scorer in every mode (:mod:`.evjvqa`): the metric is defined by
it.

Answer rules (``answer_rules``, outside the official mode): ``"vietnamese"`` (default) or ``"english"``, the
official VQA answer processing for VQA-accuracy on TextVQA/ST-VQA (:mod:`.vqa_accuracy`). EM/F1 follow SQuAD
(punctuation deleted, :mod:`.squad`) on the normalized text without spaced punctuation.

Robustness (docs/design.md §9): inputs are sanitized (:mod:`.sanitize`); an empty prediction scores 0; a
question without any reference is excluded; a question whose references are all empty (``""``, only
whitespace or form feeds) stays in the corpus with one empty reference, and an empty prediction scores
the maximum there (1, CIDEr 10) on every per-question score, any other prediction 0 (corpus BLEU and
Meteor's aggregate take it as it is: no reference n-grams); a prediction holding the unknown piece ``⁇``
and decode drops passed in by :func:`evaluate_split` are counted in the notes; a one-question corpus gets a note that CIDEr's IDF is degenerate; a missing Java runtime or jar, a
crashed JVM or a Meteor timeout leaves METEOR/METEOR-vi ``None`` with a note while the rest is
computed. Everything skipped or changed is counted in ``counts`` and described in ``notes`` (and
logged with absl logging).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from absl import logging

import openvivqa_jax.evaluation.evjvqa as evjvqa_lib
import openvivqa_jax.evaluation.grouping as grouping
import openvivqa_jax.evaluation.meteor as meteor_lib
import openvivqa_jax.evaluation.vqa_accuracy as vqa_lib
import openvivqa_jax.evaluation.wmd as wmd_lib
from openvivqa_jax import outputs
from openvivqa_jax.evaluation.formats import QA_TYPE_NON_TEXT, QA_TYPE_TEXT, QA_TYPE_UNKNOWN, parse_qa_type
from openvivqa_jax.evaluation.registry import (ALL_METRICS, DEFAULT_METRICS, METRIC_FUNCTIONS, ScoringContext,
                                               register_metric, resolve_metrics)
from openvivqa_jax.evaluation.rules import format_rules, metric_rules
from openvivqa_jax.evaluation.sanitize import MAX_TOKENS
from openvivqa_jax.evaluation.selection import (PreparedText, Report, Selection, as_text, count_selection,
                                                prepare_text, select_questions)

__all__ = ["ALL_METRICS", "DEFAULT_METRICS", "GROUPS", "TEXT_MODES", "METRIC_FUNCTIONS", "ScoringContext",
           "register_metric", "resolve_metrics", "score", "evaluate_split", "format_table"]

#: Group name -> qa_type value.
GROUPS = {"text_qa": QA_TYPE_TEXT, "non_text_qa": QA_TYPE_NON_TEXT}
#: Record fields (besides ``qa_type``) whose values get their own scores under ``by_field`` (:mod:`.grouping`).
GROUP_BY_FIELDS = ("kind", "language")
#: Text preparation modes of :func:`score` (module doc).
TEXT_MODES = ("openvivqa", "official", "pycocoevalcap")


def score(
    predictions: Mapping[str, Any],
    references: Mapping[str, Sequence[Any] | str],
    qa_types: Mapping[str, Any] | None = None,
    metrics: Sequence[str] | None = None,
    *,
    java: str | os.PathLike | None = None,
    meteor_jar: str | os.PathLike | None = None,
    meteor_timeout: float = meteor_lib.DEFAULT_TIMEOUT_S,
    vectors: str | os.PathLike | wmd_lib.WordVectors | None = None,
    max_tokens: int = MAX_TOKENS,
    per_question: bool = False,
    fields: Mapping[str, Mapping[str, Any]] | None = None,
    answer_rules: str = "vietnamese",
    text_mode: str = "openvivqa",
    decode_notes: Mapping[str, Mapping[str, int]] | None = None,
    relevance: Any = None,
) -> dict[str, Any]:
    """Scores predictions against references with every requested metric.

    Args:
      predictions: question id -> predicted answer (str; None counts as an empty answer).
      references: question id -> reference answers (a list of str, or one str).
      qa_types: question id -> 1 (text QA), 0 (non-text QA), -1/None (unknown), or the names
        "text"/"non-text". Per-type groups appear only for known types.
      metrics: metric names (see :data:`ALL_METRICS`); None for :data:`DEFAULT_METRICS` (+ WMDRel
        when ``vectors`` is given).
      java: Java binary for METEOR (default ``$OPENVIVQA_JAVA`` or ``java`` on PATH).
      meteor_jar: Meteor 1.5 jar (default ``$OPENVIVQA_METEOR_JAR`` or pycocoevalcap's).
      meteor_timeout: seconds allowed for each Meteor mode.
      vectors: word2vec text-format file (or loaded :class:`~.wmd.WordVectors`) for WMDRel.
      max_tokens: tokens kept per string (longer strings are capped and counted).
      per_question: also return every question's scores under ``"per_question"``.
      fields: record field -> {question id: value}; ``fields["language"]`` (ISO 639-1 codes) decides which
        questions the ``openvivqa`` mode cuts per character (:mod:`.scripts`). Scores per value of ``qa_type`` and of the :data:`GROUP_BY_FIELDS` given here (``kind``,
        ``language``) are returned under ``by_field`` (:func:`.grouping.field_scores`: question count,
        exact match, CIDEr and the cheap metrics per value).
      answer_rules: ``"vietnamese"`` or ``"english"`` (VQA-accuracy's answer processing outside the official
        mode; module doc).
      text_mode: ``"openvivqa"``, ``"official"`` or ``"pycocoevalcap"`` (module doc; the latter two run Java).
      decode_notes: question id -> ``{"dropped_bytes": n, "unknown_pieces": n}`` from decoding
        (:class:`~openvivqa_jax.text.tokenizer.DecodeNotes`), counted in the notes.
      relevance: the encoders, image ids and image features of CLinRel / CMedRel
        (:class:`.relevance.RelevanceInputs`); None leaves them None with a note.

    Returns:
      ``{"overall": {metric: value}, "text_qa": {...}, "non_text_qa": {...}, "num_questions":
      {"overall": n, "text_qa": n1, "non_text_qa": n0}, "notes": [str], "counts": {str: int},
      "human_performance": {...}, "metrics": [names], "text_mode": mode, "rules": {metric: {"official": bool,
      "rule": str}}, "by_field": {field: {value: {...}}}, "per_question": {...}}``. A value is None when
      the metric is unavailable (the notes say why). ``human_performance`` (ViQuAD protocol) is
      present when EM or F1 is requested and some questions have two or more references.

    Raises:
      ValueError: unknown metric name, answer rules or text mode; ``max_tokens`` < 1; the
        ``pycocoevalcap`` mode without Java or its tokenizer jar.
      TypeError: a prediction or reference that is not a string/number (names the question).
      OSError, ValueError: an unreadable or malformed vectors file (names the file).
    """
    fields = {str(f): {str(k): v for k, v in vals.items()} for f, vals in (fields or {}).items()}
    lang_map = fields.get("language", {})
    names = resolve_metrics(
        metrics, have_vectors=vectors is not None, multilingual=any(v != "vi" for v in lang_map.values()))
    _check_options(max_tokens, answer_rules, text_mode)
    report, sel, text, groups, result = _prepare(predictions, references, qa_types, names, lang_map, text_mode,
                                                 java, max_tokens, decode_notes)
    result.update(text_mode=text_mode, rules=_rules(names, text_mode, answer_rules, text))
    if not sel.ids:
        report.notes.append("no question could be scored; every metric is None")
        result["overall"] = dict.fromkeys(names)
        return {**result, "notes": report.notes, "counts": report.counts, "metrics": names}

    ctx = _run_metrics(names, sel, text, groups, result, report, lang_map,
                       dict(java=java, meteor_jar=meteor_jar, meteor_timeout=meteor_timeout, vectors=vectors,
                            answer_rules=answer_rules, text_mode=text_mode, relevance=relevance,
                            ptb_unavailable=text.ptb_unavailable))
    by_field = _scores_by_field(sel, text, fields, names, ctx.per_q)
    if by_field:
        result["by_field"] = by_field
    return _finish(result, names, report, ctx, per_question)


#: The rule texts already logged by this process: a training run scores dev at every evaluation and then test,
#: with the same rules each time, and one copy in the log is enough (each metrics file keeps its own).
_LOGGED_RULES: set[tuple[str, ...]] = set()


def _rules(names: list[str], text_mode: str, answer_rules: str, text: PreparedText) -> dict[str, Any]:
    """Each metric's rule (:func:`.rules.metric_rules`), logged the first time this process scores with them."""
    rules = metric_rules(names, text_mode, answer_rules, text.ptb_unavailable)
    lines = (text_mode, *format_rules(rules))
    if lines not in _LOGGED_RULES:
        _LOGGED_RULES.add(lines)
        # One log record per rule: a record spanning lines would read as untagged messages to a log reader.
        logging.info("evaluation rules (text mode %s):", text_mode)
        for line in lines[1:]:
            logging.info("  %s", line)
    return rules


def _prepare(predictions: Mapping[str, Any], references: Mapping[str, Any], qa_types: Mapping[str, Any] | None,
             names: list[str], lang_map: Mapping[str, str], text_mode: str, java: Any, max_tokens: int,
             decode_notes: Mapping[str, Mapping[str, int]] | None):
    """``(report, selection, text, groups, result)`` of :func:`score`: the questions selected and counted, their
    strings in ``text_mode``, the QA-type groups and the result with its question counts."""
    report = Report()
    ref_map, pred_map = {str(k): v for k, v in references.items()}, {str(k): v for k, v in predictions.items()}
    sel = select_questions(pred_map, ref_map, {str(k): v for k, v in (qa_types or {}).items()}, max_tokens)
    count_selection(report, sel, pred_map, ref_map, max_tokens, decode_notes)
    text = prepare_text(report, sel, names, lang_map, text_mode, java, max_tokens)
    if text.ptb_unavailable:
        report.notes.append(f"official text mode: pycocoevalcap's PTB tokenizer is unavailable "
                            f"({text.ptb_unavailable}); the caption metrics were computed on the Vietnamese-"
                            "normalized text instead and are not the official numbers (see 'rules')")
        logging.warning("evaluation: %s", report.notes[-1])
    groups = _qa_groups(sel.types)
    result: dict[str, Any] = {g: {} for g in groups}
    result["num_questions"] = {g: int(idx.size) for g, idx in groups.items()}
    result["num_questions"]["unknown_qa_type"] = int(np.sum(np.asarray(sel.types, np.int64) == QA_TYPE_UNKNOWN))
    return report, sel, text, groups, result


def _run_metrics(names: list[str], sel: Selection, text: PreparedText, groups: dict[str, np.ndarray],
                 result: dict[str, Any], report: Report, lang_map: Mapping[str, str],
                 options: dict[str, Any]) -> ScoringContext:
    """Calls each function of :data:`METRIC_FUNCTIONS` one of whose names is requested on the prepared corpus
    (they fill ``result``, the report's notes and counts); returns their :class:`ScoringContext`."""
    empty_set = set(sel.empty_refs)
    ctx = ScoringContext(
        names=names, ids=sel.ids, hyps=text.hyps, refs=text.refs, raw_hyps=sel.raw_hyps, raw_refs=sel.raw_refs,
        given_refs=sel.given_refs, squad_hyps=text.squad_hyps, squad_refs=text.squad_refs, languages=[lang_map.get(q) for q in sel.ids],
        groups=groups, result=result, notes=report.notes, counts=report.counts,
        empty_idx=np.asarray([i for i, qid in enumerate(sel.ids) if qid in empty_set], np.int64),
        options=options, string_hyps=text.string_hyps, string_refs=text.string_refs)
    for metric_names, fn in METRIC_FUNCTIONS.items():
        if any(m in names for m in metric_names):
            fn(ctx)
    return ctx


def _finish(result: dict[str, Any], names: list[str], report: Report, ctx: ScoringContext,
            per_question: bool) -> dict[str, Any]:
    """``result`` of :func:`score` with each group's metrics in report order (None where missing), the notes,
    counts and metric names, and with ``per_question`` every question's scores."""
    for g in ctx.groups:
        result[g] = {m: result[g].get(m) for m in names}
    result.update(notes=report.notes, counts=report.counts, metrics=names)
    if per_question:
        result["per_question"] = {qid: {m: (float(ctx.per_q[m][i]) if m in ctx.per_q else None) for m in names}
                                  for i, qid in enumerate(ctx.ids)}
    return result


def _check_options(max_tokens: int, answer_rules: str, text_mode: str) -> None:
    """Raises ValueError for ``max_tokens`` < 1 or unknown answer rules or text mode (:func:`score`)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if answer_rules not in vqa_lib.ANSWER_RULES:
        raise ValueError(f"answer_rules must be one of {vqa_lib.ANSWER_RULES}, got {answer_rules!r}")
    if text_mode not in TEXT_MODES:
        raise ValueError(f"text_mode must be one of {TEXT_MODES}, got {text_mode!r}")


def _qa_groups(types: Sequence[int]) -> dict[str, np.ndarray]:
    """Group name (``overall`` and the :data:`GROUPS` that occur) -> question positions ``(n_g,)``."""
    type_arr = np.asarray(types, np.int64)
    groups: dict[str, np.ndarray] = {"overall": np.arange(len(types))}
    for g, t in GROUPS.items():
        idx = np.flatnonzero(type_arr == t)
        if idx.size:
            groups[g] = idx
    return groups


def _scores_by_field(sel: Selection, text: PreparedText, fields: Mapping[str, Mapping[str, Any]], names: Sequence[str],
                     per_q: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Scores per value of ``qa_type`` and of the :data:`GROUP_BY_FIELDS` given (:func:`.grouping.field_scores`),
    with EVJVQA-BLEU recomputed as a corpus value over each part."""
    labels: dict[str, list] = {"qa_type": grouping.qa_type_labels(sel.types)}
    for f in GROUP_BY_FIELDS:
        if fields.get(f):
            labels[f] = [fields[f].get(qid) for qid in sel.ids]
    by_field = grouping.field_scores(text.hyps, text.refs, labels, names, per_q)
    if by_field and "EVJVQA-BLEU" in names:  # a corpus value: recomputed over each part, like BLEU-1..4
        parts = {(f, v): np.asarray([i for i, x in enumerate(labels[f]) if x is not None and str(x) == v], np.int64)
                 for f, by_value in by_field.items() for v in by_value}
        part_bleu, _ = evjvqa_lib.bleu_mean(sel.raw_hyps, sel.given_refs,
                                            {f"{f}={v}": idx for (f, v), idx in parts.items()})
        for f, v in parts:
            by_field[f][v]["EVJVQA-BLEU"] = part_bleu[f"{f}={v}"]
    return by_field


def evaluate_split(
    records: Sequence[Mapping[str, Any]],
    out_dir: str | os.PathLike | None,
    split: str,
    metrics: Sequence[str] | None = None,
    **score_kwargs: Any,
) -> dict[str, Any]:
    """Scores a split's predictions and writes ``<split>_metrics.json`` and ``<split>_predictions.json``.

    Args:
      records: one per question: ``{question_id, question, prediction, references: list[str], qa_type}``
        and optionally ``language`` and ``kind`` (passed to :func:`score` as ``fields``; scores per value
        under ``by_field``), and ``decode_notes`` (``{"dropped_bytes", "unknown_pieces"}`` of the decode,
        counted in the notes).
      out_dir: directory for the two files (created if needed); None scores without writing.
      split: split name used in the file names.
      metrics: metric names (None: the defaults of :func:`score`).
      **score_kwargs: passed to :func:`score` (``java``, ``meteor_jar``, ``vectors``, ...).

    Returns:
      The metrics dict of :func:`score` (also written to ``<split>_metrics.json``).

    Raises:
      ValueError: a record without ``question_id``/``prediction``/``references``, a duplicate id or
        a bad QA type (the message names the record).
      TypeError: a prediction or reference that is not text (names the question).
    """
    preds: dict[str, Any] = {}
    refs: dict[str, Any] = {}
    types: dict[str, Any] = {}
    fields: dict[str, dict[str, str]] = {}
    decode_notes: dict[str, Any] = {}
    clean_records = []
    for i, rec in enumerate(records):
        clean = _clean_record(rec, i, split, preds)
        qid = clean["question_id"]
        preds[qid], refs[qid], types[qid] = clean["prediction"], clean["references"], clean["qa_type"]
        for f in GROUP_BY_FIELDS:
            if f in clean:
                fields.setdefault(f, {})[qid] = clean[f]
        if "decode_notes" in clean:
            decode_notes[qid] = clean["decode_notes"]
        clean_records.append(clean)
    if decode_notes:
        score_kwargs = dict(score_kwargs, decode_notes=decode_notes)
    if out_dir is None:  # e.g. non-zero JAX processes: score only
        result = score(preds, refs, types, metrics, fields=fields, **score_kwargs)
        logging.debug("%s metrics:\n%s", split, format_table(result))  # callers print or log the scores once
        return result
    os.makedirs(out_dir, exist_ok=True)
    pred_path = os.path.join(os.fspath(out_dir), f"{split}_predictions.json")
    outputs.write_json(pred_path, clean_records, indent=1)  # whole, then renamed: a failed write keeps the old
    result = score(preds, refs, types, metrics, fields=fields, **score_kwargs)
    metrics_path = os.path.join(os.fspath(out_dir), f"{split}_metrics.json")
    outputs.write_json(metrics_path, result, indent=2)
    logging.info("%s metrics written to %s", split, metrics_path)
    logging.debug("%s metrics:\n%s", split, format_table(result))  # callers print or log the scores once
    return result


def _clean_record(rec: Mapping[str, Any], i: int, split: str, seen: Mapping[str, Any]) -> dict[str, Any]:
    """Record ``i`` of :func:`evaluate_split` as written to ``<split>_predictions.json``: ids, question, prediction
    and references as text, the QA type parsed, the :data:`GROUP_BY_FIELDS`, ``image_id`` and ``decode_notes``
    it has; ``seen``: the question ids of the records before it.

    Raises:
      ValueError: a missing key, an empty or duplicate question id, or a bad QA type (names the record).
      TypeError: a prediction or reference that is not text (names the question).
    """
    for key in ("question_id", "prediction", "references"):
        if key not in rec:
            raise ValueError(f"split {split!r}: record {i} (question {rec.get('question_id')!r}) has no {key!r}")
    raw_id = rec["question_id"]
    qid = as_text(raw_id, str(raw_id), "question id") if raw_id is not None else None
    if not qid:
        raise ValueError(f"split {split!r}: record {i} has an empty question id")
    if qid in seen:
        raise ValueError(f"split {split!r}: record {i}: duplicate question id {qid!r}")
    raw_refs = rec["references"]
    if isinstance(raw_refs, np.ndarray):
        raw_refs = raw_refs.tolist()
    if isinstance(raw_refs, (str, bytes)) or raw_refs is None:
        raw_refs = [] if raw_refs is None else [raw_refs]
    prediction = as_text(rec["prediction"], qid, "prediction")
    references = [as_text(r, qid, "reference") for r in raw_refs]
    qa_type = parse_qa_type(rec.get("qa_type"), f"split {split!r}: question {qid!r}")
    clean = {
        "question_id": qid,
        "question": as_text(rec.get("question", ""), qid, "question") or "",
        "prediction": prediction,
        "references": references,
        "qa_type": qa_type,
    }
    for f in GROUP_BY_FIELDS:
        if rec.get(f) is not None:
            clean[f] = as_text(rec[f], qid, f)
    if rec.get("image_id") is not None:  # CMedRel scores the answer against its image
        clean["image_id"] = as_text(rec["image_id"], qid, "image id")
    if rec.get("decode_notes"):  # what decoding dropped, for the notes
        clean["decode_notes"] = dict(rec["decode_notes"])
    return clean


def format_table(metrics: Mapping[str, Any]) -> str:
    """Formats a :func:`score` result as a plain-text table (metrics x groups), then the tables per field value
    (``by_field``: questions, exact match, CIDEr; :func:`.grouping.format_field_tables`), then the notes.

    Args:
      metrics: the dict returned by :func:`score`.

    Returns:
      A multi-line string; unavailable values print as ``n/a``.
    """
    groups = [g for g in ("overall", *GROUPS) if g in metrics]
    names = list(metrics.get("metrics") or metrics.get("overall", {}).keys())
    width = max([len(m) for m in names] + [len("questions")])
    lines = [" ".join([" " * width] + [f"{g:>12}" for g in groups])]
    for m in names:
        cells = []
        for g in groups:
            v = metrics[g].get(m)
            cells.append(f"{'n/a':>12}" if v is None else f"{v:12.4f}")
        lines.append(" ".join([m.ljust(width)] + cells))
    nq = metrics.get("num_questions", {})
    lines.append(" ".join(["questions".ljust(width)] + [f"{nq.get(g, 0):>12d}" for g in groups]))
    hp = metrics.get("human_performance")
    if hp and "overall" in hp:
        lines.append(f"human performance (ViQuAD protocol): EM {hp['overall']['EM']:.4f}  F1 {hp['overall']['F1']:.4f}")
    if metrics.get("rules"):
        lines.extend(format_rules(metrics["rules"]))
    if metrics.get("by_field"):
        lines.append(grouping.format_field_tables(metrics["by_field"]))
    for note in metrics.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)
