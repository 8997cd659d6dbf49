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
EVJVQA-F1      EVJVQA's ranking metric: token F1 with Japanese cut per character, :mod:`.evjvqa`
EVJVQA-BLEU    mean of corpus BLEU-1..4 on EVJVQA's tokens, :mod:`.evjvqa`
WMDRel         1 - WMD/2 over unit word vectors from a user file (only with ``vectors``), :mod:`.wmd`
CLinRel        cosine of hypothesis and reference in a W2VV++ visual space (``relevance``), :mod:`.relevance`
CMedRel        cosine of hypothesis and image feature in that space (``relevance``), :mod:`.relevance`
=============  ===============================================================================

Group values: each group (``overall``, ``text_qa``, ``non_text_qa``) is scored as if it were the
whole corpus: corpus BLEU and Meteor's aggregate over the group's questions, CIDEr's IDF over the
group's references (what pycocoevalcap gives when run on that group alone), means for the rest.

Text modes (``text_mode``): ``"openvivqa"`` (default) sanitizes every string with the Vietnamese
normalizer (:mod:`.sanitize`: NFC, lowercase, one tone-mark convention, prices, spaced punctuation), so
that spellings of one answer (``toà``/``tòa``, ``20.000đ``/``20,000 đồng``) count as one; ``"pycocoevalcap"``
prepares strings exactly as the original toolkit does (Stanford PTBTokenizer, punctuation tokens removed,
no other normalization; :mod:`.ptb`, needs Java) to reproduce numbers computed with it.

Answer rules (``answer_rules``): ``"vietnamese"`` (default) or ``"english"``, the official VQA answer
processing for VQA-accuracy on TextVQA/ST-VQA (:mod:`.vqa_accuracy`). EM/F1 follow SQuAD (punctuation
deleted, :mod:`.squad`) on the normalized text without spaced punctuation.

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

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from absl import logging

from openvivqa_jax.evaluation import anls as anls_lib
from openvivqa_jax.evaluation import bleu as bleu_lib
from openvivqa_jax.evaluation import cider as cider_lib
from openvivqa_jax.evaluation import evjvqa as evjvqa_lib
from openvivqa_jax.evaluation import grouping
from openvivqa_jax.evaluation import meteor as meteor_lib
from openvivqa_jax.evaluation import rouge as rouge_lib
from openvivqa_jax.evaluation import squad as squad_lib
from openvivqa_jax.evaluation import scripts as scripts_lib
from openvivqa_jax.evaluation import vqa_accuracy as vqa_lib
from openvivqa_jax.evaluation import wmd as wmd_lib
from openvivqa_jax.evaluation.formats import (
    QA_TYPE_NON_TEXT,
    QA_TYPE_TEXT,
    QA_TYPE_UNKNOWN,
    InputError,
    parse_qa_type,
)
from openvivqa_jax.evaluation.ngrams import build_ngram_corpus
from openvivqa_jax.evaluation.sanitize import (
    MAX_TOKENS,
    METEOR_SEPARATOR,
    SanitizeStats,
    remove_control_characters,
    sanitize_text,
)
from openvivqa_jax.text.normalize import normalize_text

__all__ = ["ALL_METRICS", "DEFAULT_METRICS", "GROUPS", "TEXT_MODES", "METRIC_FUNCTIONS", "ScoringContext",
           "register_metric", "resolve_metrics", "score", "evaluate_split", "format_table"]

BLEU_METRICS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4")
EVJVQA_METRICS = ("EVJVQA-F1", "EVJVQA-BLEU")
#: Every metric name, in report order.
ALL_METRICS = (*BLEU_METRICS, "ROUGE-L", "CIDEr", "METEOR", "METEOR-vi", "ANLS", "VQA-accuracy", "EM", "F1",
               *EVJVQA_METRICS, "WMDRel", "CLinRel", "CMedRel")
#: Metrics computed when none are named (WMDRel is added when a vectors file is given, the EVJVQA metrics
#: when the questions carry languages other than Vietnamese; CLinRel and CMedRel only when named).
DEFAULT_METRICS = tuple(m for m in ALL_METRICS if m not in ("WMDRel", "CLinRel", "CMedRel", *EVJVQA_METRICS))
_ALIASES = {"BLEU": BLEU_METRICS, "METEOR-all": ("METEOR", "METEOR-vi"), "EVJVQA": EVJVQA_METRICS, "all": ALL_METRICS}
#: Group name -> qa_type value.
GROUPS = {"text_qa": QA_TYPE_TEXT, "non_text_qa": QA_TYPE_NON_TEXT}
#: Record fields (besides ``qa_type``) whose values get their own scores under ``by_field`` (:mod:`.grouping`).
GROUP_BY_FIELDS = ("kind", "language")
_MAX_IDS_IN_NOTE = 5
#: Text preparation modes of :func:`score` (module doc).
TEXT_MODES = ("openvivqa", "pycocoevalcap")
#: SentencePiece's rendering of the unknown piece.
UNKNOWN_PIECE = "\u2047"
# Per-question value of a metric for an exact match with an empty reference (the metric's maximum).
_EMPTY_MATCH_VALUE = {"CIDEr": 10.0}


def resolve_metrics(
    metrics: Sequence[str] | str | None, have_vectors: bool = False, multilingual: bool = False
) -> list[str]:
    """Expands and checks metric names (case-insensitive; ``BLEU`` = BLEU-1..4, ``EVJVQA`` = EVJVQA-F1 and
    EVJVQA-BLEU, ``all`` = every one).

    Args:
      metrics: names (or one comma-separated string); None for the defaults.
      have_vectors: whether a vectors file was given (adds WMDRel to the defaults).
      multilingual: whether the questions carry a language other than ``vi`` (adds the EVJVQA metrics
        to the defaults).

    Returns:
      The metric names in report order, without duplicates.

    Raises:
      ValueError: for an unknown name (the message lists the valid ones).
    """
    if metrics is None:
        wanted = list(DEFAULT_METRICS) + (["WMDRel"] if have_vectors else []) + (
            list(EVJVQA_METRICS) if multilingual else [])
    else:
        if isinstance(metrics, str):
            metrics = [metrics]
        names = [p.strip() for m in metrics for p in str(m).split(",") if p.strip()]
        lookup = {m.lower(): (m,) for m in ALL_METRICS}
        lookup.update({k.lower(): v for k, v in _ALIASES.items()})
        wanted = []
        for name in names:
            if name.lower() not in lookup:
                raise ValueError(
                    f"unknown metric {name!r}; valid: {', '.join(ALL_METRICS)} (or BLEU, METEOR-all, EVJVQA, all)")
            wanted.extend(lookup[name.lower()])
    return [m for m in ALL_METRICS if m in set(wanted)]


def _ids_text(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in list(ids)[:_MAX_IDS_IN_NOTE])
    return shown + (", ..." if len(ids) > _MAX_IDS_IN_NOTE else "")


def _as_text(value: Any, qid: str, what: str) -> str | None:
    """Returns ``value`` as a string, None for None; UTF-8 bytes (TFDS ``Text``) and numbers are
    converted; other types raise ``TypeError`` naming the question."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise TypeError(f"question {qid!r}: {what} is not UTF-8 bytes ({e.reason})") from None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"question {qid!r}: {what} must be a string, got {type(value).__name__}: {value!r}")


@dataclasses.dataclass
class ScoringContext:
    """What :func:`score` hands each metric function: the prepared corpus and the outputs to fill.

    Attributes:
      names: the requested metric names (:func:`resolve_metrics`).
      ids: the ``n`` scored question ids; ``hyps`` ``[n]`` and ``refs`` ``[n][>= 1]``: their prepared
        strings (text mode of :func:`score`); ``raw_hyps``/``raw_refs``: as given (non-empty references);
        ``squad_hyps``/``squad_refs``: EM/F1's strings (empty lists when neither is requested);
        ``languages``: ``[n]`` ISO 639-1 codes or None.
      groups: group name (``overall``, ``text_qa``, ``non_text_qa``) -> question positions ``(n_g,)``.
      result: the report being built; a metric writes ``result[group][name]`` (None when unavailable).
      notes, counts: the report's notes and counts, appended to.
      empty_idx: ``(n_e,)`` positions of the questions whose references are all empty (module doc).
      options: ``java``, ``meteor_jar``, ``meteor_timeout``, ``vectors``, ``answer_rules``, ``have_languages``.
      per_q: metric name -> ``(n,)`` per-question values, filled by the metrics (``per_question`` output and
        :func:`.grouping.field_scores`).
    """

    names: list[str]
    ids: list[str]
    hyps: list[str]
    refs: list[list[str]]
    raw_hyps: list[str]
    raw_refs: list[list[str]]
    squad_hyps: list[str]
    squad_refs: list[list[str]]
    languages: list[str | None]
    groups: dict[str, np.ndarray]
    result: dict[str, Any]
    notes: list[str]
    counts: dict[str, int]
    empty_idx: np.ndarray
    options: dict[str, Any]
    per_q: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    _ngrams: Any = None
    #: ``hyps``/``refs`` before the per-character cut of :mod:`.scripts` (ANLS's character edit distance); None:
    #: nothing was cut.
    string_hyps: list[str] | None = None
    string_refs: list[list[str]] | None = None

    def wants(self, name: str) -> bool:
        """Whether ``name`` was requested."""
        return name in self.names

    def ngram_corpus(self):
        """The n-gram counts of ``hyps``/``refs`` (:func:`.ngrams.build_ngram_corpus`), built once for BLEU
        and CIDEr."""
        if self._ngrams is None:
            self._ngrams = build_ngram_corpus(self.hyps, self.refs)
        return self._ngrams

    def empty_override(self, name: str, values: np.ndarray, positions: np.ndarray | None = None) -> np.ndarray:
        """Per-question ``values`` (of the questions ``positions``, default all) with the empty-reference rule:
        on a question whose references are all empty an empty prediction scores the metric's maximum
        (1, CIDEr 10), any other 0."""
        if not self.empty_idx.size:
            return values
        empty_hit = np.asarray([not self.hyps[i] for i in self.empty_idx], np.float64)
        values = np.array(values, np.float64)
        top = _EMPTY_MATCH_VALUE.get(name, 1.0)
        if positions is None:
            values[self.empty_idx] = top * empty_hit
        else:
            where = {int(p): k for k, p in enumerate(positions)}
            for i, hit in zip(self.empty_idx, empty_hit):
                if int(i) in where:
                    values[where[int(i)]] = top * hit
        return values

    def put_mean(self, name: str, values: np.ndarray) -> None:
        """Stores per-question ``values`` ``(n,)`` (empty-reference rule applied) and each group's mean."""
        values = self.empty_override(name, values)
        self.per_q[name] = values
        for g, idx in self.groups.items():
            self.result[g][name] = float(np.mean(values[idx]))

    def note(self, text: str) -> None:
        """Adds a note to the report and logs it as a warning."""
        self.notes.append(text)
        logging.warning("evaluation: %s", text)

    def count(self, name: str, n: int, note: str) -> None:
        """Reports ``n`` under ``counts[name]``, and when ``n`` is not 0 adds ``note`` (what those ``n`` mean
        for the scores) to the report's notes."""
        self.counts[name] = n
        if n:
            self.notes.append(note)


#: Metric names -> the function computing them from a :class:`ScoringContext`; :func:`score` calls each
#: function one of whose names is requested, in this order (big_vision's evaluators loop over a registry
#: the same way). Together the names are :data:`ALL_METRICS`.
METRIC_FUNCTIONS: dict[tuple[str, ...], Callable[[ScoringContext], None]] = {}


def register_metric(*names: str):
    """Decorator: registers ``fn(ctx: ScoringContext) -> None`` as the function computing ``names``.

    Raises:
      ValueError: if a name is already registered.
    """
    def deco(fn):
        taken = [n for n in names if any(n in k for k in METRIC_FUNCTIONS)]
        if taken:
            raise ValueError(f"metric(s) {taken} are already registered")
        METRIC_FUNCTIONS[tuple(names)] = fn
        return fn

    return deco


@register_metric(*BLEU_METRICS)
def _bleu(ctx: ScoringContext) -> None:
    """Corpus BLEU-1..4 per group (closest reference length, pycocoevalcap 1.2), sentence BLEU per question."""
    bstats = bleu_lib.bleu_stats(ctx.ngram_corpus())
    sent = bleu_lib.sentence_bleu(bstats)
    for g, idx in ctx.groups.items():
        values = bleu_lib.corpus_bleu(bstats, idx)
        for k, m in enumerate(BLEU_METRICS):
            if ctx.wants(m):
                ctx.result[g][m] = float(values[k])
    for k, m in enumerate(BLEU_METRICS):
        if ctx.wants(m):
            ctx.per_q[m] = ctx.empty_override(m, sent[:, k])


@register_metric("ROUGE-L")
def _rouge_l(ctx: ScoringContext) -> None:
    """ROUGE-L (beta 1.2), mean over questions."""
    ctx.put_mean("ROUGE-L", rouge_lib.rouge_l(ctx.hyps, ctx.refs))


@register_metric("CIDEr")
def _cider(ctx: ScoringContext) -> None:
    """CIDEr-D with each group's own IDF (as pycocoevalcap run on that group alone); a note for a
    one-question group."""
    for g, idx in ctx.groups.items():
        values = ctx.empty_override("CIDEr", cider_lib.cider_d(ctx.ngram_corpus(), idx), idx)
        ctx.result[g]["CIDEr"] = float(values.mean())
        if g == "overall":
            ctx.per_q["CIDEr"] = values
        if idx.size == 1:
            ctx.notes.append(
                f"CIDEr ({g}): only one question, so the IDF is degenerate (log(1) = 0 gives every "
                "n-gram weight 0) and CIDEr is 0 by construction; it says nothing about this answer"
            )


@register_metric("METEOR", "METEOR-vi")
def _meteor(ctx: ScoringContext) -> None:
    """Meteor 1.5 (``-norm`` and without) in one JVM run; an unavailable mode is None with a note."""
    modes = [m for m in ("METEOR", "METEOR-vi") if ctx.wants(m)]
    opts, ids, groups = ctx.options, ctx.ids, ctx.groups
    outcomes = meteor_lib.meteor_scores_all_modes(
        ctx.hyps,
        ctx.refs,
        {g: idx.tolist() for g, idx in groups.items() if g != "overall"},
        modes=modes,
        java=opts["java"],
        meteor_jar=opts["meteor_jar"],
        timeout=opts["meteor_timeout"],
    )
    for mode, outcome in outcomes.items():
        if isinstance(outcome, meteor_lib.MeteorUnavailable):
            for g in groups:
                ctx.result[g][mode] = None
            text = f"{mode} unavailable: {outcome}"
            if getattr(outcome, "item", None) is not None and 0 <= outcome.item < len(ids):
                text = (f"{mode} unavailable: no score from question {ids[outcome.item]!r} on "
                        f"({len(ids) - outcome.item} of {len(ids)} questions): {outcome}")
            ctx.note(text)
            continue
        per_item, per_group, _ = outcome
        ctx.per_q[mode] = ctx.empty_override(mode, np.asarray(per_item, np.float64))
        for g in groups:
            ctx.result[g][mode] = per_group[g]


@register_metric("ANLS")
def _anls(ctx: ScoringContext) -> None:
    """ANLS (ST-VQA, tau 0.5), mean over questions."""
    ctx.put_mean("ANLS", anls_lib.anls(ctx.string_hyps or ctx.hyps, ctx.string_refs or ctx.refs))


@register_metric("VQA-accuracy")
def _vqa_accuracy(ctx: ScoringContext) -> None:
    """VQA accuracy (leave-one-out min(n/3, 1)); ``english`` answer rules on the raw strings; questions with
    fewer than 3 references fall back on exact match (counted, with a note)."""
    if ctx.options["answer_rules"] == "english":
        acc, fallback = vqa_lib.vqa_accuracy([vqa_lib.english_answer(t) for t in ctx.raw_hyps],
                                             [[vqa_lib.english_answer(r) for r in rs] for rs in ctx.raw_refs])
    else:
        acc, fallback = vqa_lib.vqa_accuracy(ctx.hyps, ctx.refs)
    ctx.put_mean("VQA-accuracy", acc)
    ctx.count("vqa_exact_match_fallback", fallback,
              f"VQA-accuracy: {fallback} questions have fewer than {vqa_lib.MIN_ANSWERS} references; "
              "scored by exact match with any reference instead of the leave-one-out rule")


@register_metric("EM", "F1")
def _squad(ctx: ScoringContext) -> None:
    """SQuAD EM and F1 (max over references), and human performance (ViQuAD protocol) where questions have
    two or more references."""
    em, f1 = squad_lib.em_f1(ctx.squad_hyps, ctx.squad_refs)
    if ctx.wants("EM"):
        ctx.put_mean("EM", em)
    if ctx.wants("F1"):
        ctx.put_mean("F1", f1)
    h_em, h_f1, several = squad_lib.human_performance(ctx.squad_refs)
    if several.any():
        hp: dict[str, Any] = {"protocol": "ViQuAD 5.1: each answer in turn against the others, max over them, mean"}
        for g, idx in ctx.groups.items():
            sel = idx[several[idx]]
            if sel.size:
                hp[g] = {"EM": float(h_em[sel].mean()), "F1": float(h_f1[sel].mean()), "num_questions": int(sel.size)}
        ctx.result["human_performance"] = hp


@register_metric(*EVJVQA_METRICS)
def _evjvqa(ctx: ScoringContext) -> None:
    """EVJVQA's token F1 and BLEU (Japanese cut per character, :mod:`.evjvqa`)."""
    if ctx.wants("EVJVQA-F1"):
        ctx.put_mean("EVJVQA-F1", evjvqa_lib.f1_scores(ctx.hyps, ctx.refs, ctx.languages))
    if ctx.wants("EVJVQA-BLEU"):
        per_group_bleu, sent_bleu = evjvqa_lib.bleu_mean(ctx.hyps, ctx.refs, ctx.languages, ctx.groups)
        ctx.per_q["EVJVQA-BLEU"] = sent_bleu
        for g in ctx.groups:
            ctx.result[g]["EVJVQA-BLEU"] = per_group_bleu[g]
    if not ctx.options["have_languages"]:
        ctx.notes.append("EVJVQA metrics: no question carries a language; every answer was tokenized on whitespace")


@register_metric("WMDRel")
def _wmd_relevance(ctx: ScoringContext) -> None:
    """WMDRel over the word vectors of ``options["vectors"]``; None with a note when there are none."""
    vectors = ctx.options["vectors"]
    if vectors is None:
        for g in ctx.groups:
            ctx.result[g]["WMDRel"] = None
        ctx.notes.append("WMDRel unavailable: no word-vectors file given (--vectors)")
        return
    wv = vectors
    if not isinstance(wv, wmd_lib.WordVectors):
        needed = {t for h in ctx.hyps for t in h.split()} | {t for rs in ctx.refs for r in rs for t in r.split()}
        wv = wmd_lib.load_word_vectors(vectors, needed)
    values, unknown, total = wmd_lib.wmd_relevance(ctx.hyps, ctx.refs, wv)
    ctx.put_mean("WMDRel", values)
    ctx.count("wmd_unknown_tokens", unknown,
              f"WMDRel: {unknown} of {total} tokens have no vector in {wv.path}; each counts as its own "
              "direction (distance 0 to itself, sqrt(2) to other words)")


@register_metric("CLinRel", "CMedRel")
def _visual_relevance(ctx: ScoringContext) -> None:
    """CLinRel and CMedRel with the W2VV++ encoders of ``options["relevance"]``; None with a note when there
    are none (:mod:`.relevance`, imported here: it loads JAX)."""
    from openvivqa_jax.evaluation import relevance as relevance_lib

    relevance_lib.score_relevance(ctx)


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
      fields: record field -> {question id: value}; ``fields["language"]`` (ISO 639-1 codes) selects the
        EVJVQA tokenization (``ja`` per character); a question without one is tokenized on whitespace.
        Scores per value of ``qa_type`` and of the :data:`GROUP_BY_FIELDS` given here (``kind``,
        ``language``) are returned under ``by_field`` (:func:`.grouping.field_scores`: question count,
        exact match, CIDEr and the cheap metrics per value).
      answer_rules: ``"vietnamese"`` or ``"english"`` (VQA-accuracy's answer processing; module doc).
      text_mode: ``"openvivqa"`` or ``"pycocoevalcap"`` (module doc; the latter needs Java).
      decode_notes: question id -> ``{"dropped_bytes": n, "unknown_pieces": n}`` from decoding
        (:class:`~openvivqa_jax.text.tokenizer.DecodeNotes`), counted in the notes.
      relevance: the encoders, image ids and image features of CLinRel / CMedRel
        (:class:`.relevance.RelevanceInputs`); None leaves them None with a note.

    Returns:
      ``{"overall": {metric: value}, "text_qa": {...}, "non_text_qa": {...}, "num_questions":
      {"overall": n, "text_qa": n1, "non_text_qa": n0}, "notes": [str], "counts": {str: int},
      "human_performance": {...}, "metrics": [names], "by_field": {field: {value: {...}}},
      "per_question": {...}}``. A value is None when
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
    report = _Report()
    ref_map, pred_map = {str(k): v for k, v in references.items()}, {str(k): v for k, v in predictions.items()}
    sel = _select_questions(pred_map, ref_map, {str(k): v for k, v in (qa_types or {}).items()}, max_tokens)
    _count_selection(report, sel, pred_map, ref_map, max_tokens, decode_notes)
    text = _prepare_text(report, sel, names, lang_map, text_mode, java, max_tokens)
    groups = _qa_groups(sel.types)
    result: dict[str, Any] = {g: {} for g in groups}
    result["num_questions"] = {g: int(idx.size) for g, idx in groups.items()}
    result["num_questions"]["unknown_qa_type"] = int(np.sum(np.asarray(sel.types, np.int64) == QA_TYPE_UNKNOWN))
    if not sel.ids:
        report.notes.append("no question could be scored; every metric is None")
        result["overall"] = dict.fromkeys(names)
        return {**result, "notes": report.notes, "counts": report.counts, "metrics": names}

    empty_set = set(sel.empty_refs)
    ctx = ScoringContext(
        names=names, ids=sel.ids, hyps=text.hyps, refs=text.refs, raw_hyps=sel.raw_hyps, raw_refs=sel.raw_refs,
        squad_hyps=text.squad_hyps, squad_refs=text.squad_refs, languages=[lang_map.get(q) for q in sel.ids],
        groups=groups, result=result, notes=report.notes, counts=report.counts,
        empty_idx=np.asarray([i for i, qid in enumerate(sel.ids) if qid in empty_set], np.int64),
        options=dict(java=java, meteor_jar=meteor_jar, meteor_timeout=meteor_timeout, vectors=vectors,
                     answer_rules=answer_rules, have_languages=bool(lang_map), relevance=relevance),
        string_hyps=text.string_hyps, string_refs=text.string_refs)
    for metric_names, fn in METRIC_FUNCTIONS.items():
        if any(m in names for m in metric_names):
            fn(ctx)
    by_field = _scores_by_field(sel, text, fields, names, ctx.per_q)
    if by_field:
        result["by_field"] = by_field
    for g in groups:
        result[g] = {m: result[g].get(m) for m in names}
    result.update(notes=report.notes, counts=report.counts, metrics=names)
    if per_question:
        result["per_question"] = {qid: {m: (float(ctx.per_q[m][i]) if m in ctx.per_q else None) for m in names}
                                  for i, qid in enumerate(sel.ids)}
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


@dataclasses.dataclass
class _Report:
    """The notes and counts of a :func:`score` call, filled stage by stage."""

    notes: list[str] = dataclasses.field(default_factory=list)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def count(self, key: str, n_or_ids: Sequence[str] | int, message: str, ids_: Sequence[str] = ()) -> None:
        """Records ``counts[key]``; when it is not 0, a note (``message`` with ``{n}``, and the ids) logged as a
        warning."""
        n = n_or_ids if isinstance(n_or_ids, int) else len(n_or_ids)
        ids_ = ids_ if isinstance(n_or_ids, int) else n_or_ids
        self.counts[key] = n
        if n:
            text = message.format(n=n) + (f" (ids: {_ids_text(ids_)})" if ids_ else "")
            self.notes.append(text)
            logging.warning("evaluation: %s", text)


@dataclasses.dataclass
class _Selection:
    """The questions :func:`score` scores, sanitized (:func:`_select_questions`), and what was set aside.

    ``ids``, ``hyps``, ``refs`` (non-empty lists; ``[""]`` for only-empty references), ``types``,
    ``raw_hyps`` and ``raw_refs`` (the kept references as given) are parallel lists of the scored questions.
    """

    ids: list[str] = dataclasses.field(default_factory=list)
    hyps: list[str] = dataclasses.field(default_factory=list)
    refs: list[list[str]] = dataclasses.field(default_factory=list)
    types: list[int] = dataclasses.field(default_factory=list)
    raw_hyps: list[str] = dataclasses.field(default_factory=list)
    raw_refs: list[list[str]] = dataclasses.field(default_factory=list)
    none_pred: list[str] = dataclasses.field(default_factory=list)
    empty_hyp: list[str] = dataclasses.field(default_factory=list)
    empty_both: list[str] = dataclasses.field(default_factory=list)
    excluded: list[str] = dataclasses.field(default_factory=list)
    empty_refs: list[str] = dataclasses.field(default_factory=list)
    unknown_piece: list[str] = dataclasses.field(default_factory=list)
    dropped_refs: int = 0
    stats: SanitizeStats = dataclasses.field(default_factory=SanitizeStats)


def _reference_list(raw_refs: Any, qid: str) -> list[Any]:
    """A question's references as a list (one string, None, a numpy array or a list/tuple accepted).

    Raises:
      TypeError: references of another type (names the question).
    """
    if isinstance(raw_refs, np.ndarray):
        raw_refs = raw_refs.tolist()
    if raw_refs is None:
        return []
    if isinstance(raw_refs, (str, bytes, int, float)) and not isinstance(raw_refs, bool):
        return [raw_refs]
    if not isinstance(raw_refs, (list, tuple)):
        raise TypeError(f"question {qid!r}: references must be a list of strings, got {type(raw_refs).__name__}")
    return list(raw_refs)


def _select_questions(pred_map: Mapping[str, Any], ref_map: Mapping[str, Any], type_map: Mapping[str, Any],
                      max_tokens: int) -> _Selection:
    """The predicted questions that have references, sanitized (module doc: empty references, capped strings).

    Raises:
      TypeError: a prediction, reference or QA type of the wrong type (names the question).
    """
    sel = _Selection()
    stats = sel.stats
    for qid, raw_pred in pred_map.items():
        if qid not in ref_map:
            continue
        pred = _as_text(raw_pred, qid, "prediction")
        if pred is None:
            sel.none_pred.append(qid)
            pred = ""
        hyp = sanitize_text(pred, max_tokens=max_tokens, stats=stats, qid=qid)
        if UNKNOWN_PIECE in pred:
            sel.unknown_piece.append(qid)
        raw_refs = _reference_list(ref_map[qid], qid)
        clean, raw_clean = [], []
        for raw_r in raw_refs:
            raw_r = _as_text(raw_r, qid, "reference")
            raw_r = "" if raw_r is None else raw_r
            r = sanitize_text(raw_r, max_tokens=max_tokens, stats=stats, qid=qid)
            if r:
                clean.append(r)
                raw_clean.append(raw_r)
            else:
                sel.dropped_refs += 1
        if not raw_refs:
            sel.excluded.append(qid)
            continue
        if not clean:  # only empty references: the expected answer is empty (module doc)
            sel.empty_refs.append(qid)
            sel.dropped_refs -= len(raw_refs)
            clean, raw_clean = [""], [""]
        if not hyp:
            # Against only empty references an empty prediction is right: it scores the maximum there.
            (sel.empty_both if clean == [""] and qid in sel.empty_refs else sel.empty_hyp).append(qid)
        try:
            q_type = parse_qa_type(type_map.get(qid), f"question {qid!r}")
        except InputError as e:
            raise TypeError(str(e)) from None
        sel.ids.append(qid)
        sel.hyps.append(hyp)
        sel.refs.append(clean)
        sel.types.append(q_type)
        sel.raw_hyps.append(pred)
        sel.raw_refs.append(raw_clean)
    return sel


def _count_selection(report: _Report, sel: _Selection, pred_map: Mapping[str, Any], ref_map: Mapping[str, Any],
                     max_tokens: int, decode_notes: Mapping[str, Mapping[str, int]] | None) -> None:
    """The counts and notes of what :func:`_select_questions` set aside or changed, and of the decoding notes."""
    count, stats = report.count, sel.stats
    count("missing_in_references", [q for q in pred_map if q not in ref_map],
          "{n} predictions have no reference entry and were not scored")
    count("references_without_prediction", [q for q in ref_map if q not in pred_map],
          "{n} reference questions have no prediction and were not scored")
    count("excluded_empty_references", sel.excluded, "{n} questions have an empty reference list and were excluded")
    count("empty_references", sel.empty_refs, "{n} questions have only empty references; an empty prediction "
          "scores the maximum there, any other 0 (kept in the corpus)")
    count("dropped_empty_reference_strings", sel.dropped_refs, "{n} empty reference strings beside non-empty ones "
          "were dropped")
    count("none_predictions", sel.none_pred, "{n} predictions were None and scored as empty answers")
    count("empty_predictions", sel.empty_hyp, "{n} predictions are empty after normalization and score 0 (their "
          "references are not empty)")
    count("empty_predictions_on_empty_references", sel.empty_both, "{n} empty predictions against only empty "
          "references score the maximum (ANLS 1: two empty strings have NL 0, as in the ST-VQA evaluation script)")
    count("capped_strings", stats.capped, f"{{n}} strings were capped at {max_tokens} tokens", stats.capped_ids)
    count("separator_strings", stats.separators, "{n} strings contained '|||' (Meteor's separator), removed",
          stats.separator_ids)
    count("control_char_strings", stats.control_chars, "{n} strings contained control characters, replaced by spaces")
    count("unknown_piece_predictions", sel.unknown_piece, f"{{n}} predictions hold the unknown piece "
          f"{UNKNOWN_PIECE!r} (a word the tokenizer could not encode), scored as written")
    dn = {str(k): v for k, v in (decode_notes or {}).items() if str(k) in ref_map}
    byte_ids = [q for q, v in dn.items() if v.get("dropped_bytes")]
    count("decode_dropped_byte_predictions", byte_ids, "{n} predictions lost "
          f"{sum(int(dn[q]['dropped_bytes']) for q in byte_ids)} bytes of incomplete UTF-8 byte-fallback runs in "
          "decoding (dropped, never U+FFFD)")
    unk_ids = [q for q, v in dn.items() if v.get("unknown_pieces")]
    count("decode_unknown_piece_predictions", unk_ids, "{n} predictions decoded "
          f"{sum(int(dn[q]['unknown_pieces']) for q in unk_ids)} unknown pieces (skipped)")


@dataclasses.dataclass
class _Text:
    """The strings the metrics read (:func:`_prepare_text`): ``hyps``/``refs`` for the n-gram metrics,
    ``squad_hyps``/``squad_refs`` for EM/F1, ``string_hyps``/``string_refs`` before a per-character cut
    (None when nothing was cut)."""

    hyps: list[str]
    refs: list[list[str]]
    squad_hyps: list[str]
    squad_refs: list[list[str]]
    string_hyps: list[str] | None = None
    string_refs: list[list[str]] | None = None


def _prepare_text(report: _Report, sel: _Selection, names: Sequence[str], lang_map: Mapping[str, str],
                  text_mode: str, java: Any, max_tokens: int) -> _Text:
    """The metrics' strings in ``text_mode`` (module doc): the original toolkit's PTB tokens, or the
    normalizer's, with scripts written without spaces cut per character (:mod:`.scripts`).

    Raises:
      ValueError: the ``pycocoevalcap`` mode without its tokenizer (Java or the jar).
    """
    ids, raw_hyps, raw_refs_kept = sel.ids, sel.raw_hyps, sel.raw_refs
    if text_mode == "pycocoevalcap" and ids:
        # The original toolkit's strings: PTB tokens, punctuation tokens removed, nothing else (module doc).
        from openvivqa_jax.evaluation import ptb as ptb_lib

        flat = [remove_control_characters(t).replace(METEOR_SEPARATOR, " ")
                for t in [*raw_hyps, *(r for rs in raw_refs_kept for r in rs)]]
        try:
            tokens = ptb_lib.ptb_tokenize(flat, java=java)
        except meteor_lib.MeteorUnavailable as e:
            raise ValueError(f"text_mode 'pycocoevalcap' needs the PTB tokenizer: {e}") from None
        tokens = [" ".join(t.split(" ")[:max_tokens]) for t in tokens]
        hyps = tokens[: len(ids)]
        pos = len(ids)
        refs = []
        for rs in raw_refs_kept:
            refs.append(tokens[pos : pos + len(rs)])
            pos += len(rs)
        return _Text(hyps, refs, hyps, refs)
    hyps, refs = list(sel.hyps), [list(rs) for rs in sel.refs]

    def squad_text(t: str) -> str:
        # As sanitize_text, without spaced punctuation: SQuAD deletes punctuation, "10.000" == "10000".
        t = remove_control_characters(t).replace(METEOR_SEPARATOR, " ")
        return " ".join(normalize_text(t, spaced_punctuation=False).split(" ")[:max_tokens])

    want_squad = "EM" in names or "F1" in names
    squad_hyps = [squad_text(t) for t in raw_hyps] if want_squad else []
    squad_refs = [[squad_text(r) for r in rs] for rs in raw_refs_kept] if want_squad else []
    text = _Text(hyps, refs, squad_hyps, squad_refs)
    # Scripts without word spaces: one token per character (scripts module doc).
    cut = [i for i, qid in enumerate(ids) if scripts_lib.applies(lang_map.get(qid), [hyps[i], *refs[i]])]
    if cut:
        text.string_hyps, text.string_refs = list(hyps), [list(rs) for rs in refs]
        for i in cut:
            hyps[i] = scripts_lib.split_spaceless(hyps[i])
            refs[i] = [scripts_lib.split_spaceless(r) for r in refs[i]]
            if want_squad:
                squad_hyps[i] = scripts_lib.split_spaceless(squad_hyps[i])
                squad_refs[i] = [scripts_lib.split_spaceless(r) for r in squad_refs[i]]
    report.count("per_character_questions", [ids[i] for i in cut], "{n} questions in a script written without "
                 "spaces between words (Chinese, Japanese, Thai, ...) were tokenized per character for BLEU, "
                 "ROUGE-L, CIDEr, METEOR, WMDRel and F1, as the EVJVQA scorer does for Japanese")
    return text


def _scores_by_field(sel: _Selection, text: _Text, fields: Mapping[str, Mapping[str, Any]], names: Sequence[str],
                     per_q: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Scores per value of ``qa_type`` and of the :data:`GROUP_BY_FIELDS` given (:func:`.grouping.field_scores`),
    with EVJVQA-BLEU recomputed as a corpus value over each part."""
    lang_map = fields.get("language", {})
    labels: dict[str, list] = {"qa_type": grouping.qa_type_labels(sel.types)}
    for f in GROUP_BY_FIELDS:
        if fields.get(f):
            labels[f] = [fields[f].get(qid) for qid in sel.ids]
    by_field = grouping.field_scores(text.hyps, text.refs, labels, names, per_q)
    if by_field and "EVJVQA-BLEU" in names:  # a corpus value: recomputed over each part, like BLEU-1..4
        parts = {(f, v): np.asarray([i for i, x in enumerate(labels[f]) if x is not None and str(x) == v], np.int64)
                 for f, by_value in by_field.items() for v in by_value}
        part_bleu, _ = evjvqa_lib.bleu_mean(text.hyps, text.refs, [lang_map.get(qid) for qid in sel.ids],
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
        for key in ("question_id", "prediction", "references"):
            if key not in rec:
                raise ValueError(f"split {split!r}: record {i} (question {rec.get('question_id')!r}) has no {key!r}")
        raw_id = rec["question_id"]
        qid = _as_text(raw_id, str(raw_id), "question id") if raw_id is not None else None
        if not qid:
            raise ValueError(f"split {split!r}: record {i} has an empty question id")
        if qid in preds:
            raise ValueError(f"split {split!r}: record {i}: duplicate question id {qid!r}")
        raw_refs = rec["references"]
        if isinstance(raw_refs, np.ndarray):
            raw_refs = raw_refs.tolist()
        if isinstance(raw_refs, (str, bytes)) or raw_refs is None:
            raw_refs = [] if raw_refs is None else [raw_refs]
        preds[qid] = _as_text(rec["prediction"], qid, "prediction")
        refs[qid] = [_as_text(r, qid, "reference") for r in raw_refs]
        types[qid] = parse_qa_type(rec.get("qa_type"), f"split {split!r}: question {qid!r}")
        clean = {
            "question_id": qid,
            "question": _as_text(rec.get("question", ""), qid, "question") or "",
            "prediction": preds[qid],
            "references": refs[qid],
            "qa_type": types[qid],
        }
        for f in GROUP_BY_FIELDS:
            if rec.get(f) is not None:
                clean[f] = fields.setdefault(f, {})[qid] = _as_text(rec[f], qid, f)
        if rec.get("image_id") is not None:  # CMedRel scores the answer against its image
            clean["image_id"] = _as_text(rec["image_id"], qid, "image id")
        if rec.get("decode_notes"):  # what decoding dropped (train.py), for the notes
            clean["decode_notes"] = decode_notes[qid] = dict(rec["decode_notes"])
        clean_records.append(clean)
    if decode_notes:
        score_kwargs = dict(score_kwargs, decode_notes=decode_notes)
    if out_dir is None:  # e.g. non-zero JAX processes: score only
        result = score(preds, refs, types, metrics, fields=fields, **score_kwargs)
        logging.debug("%s metrics:\n%s", split, format_table(result))  # callers print or log the scores once
        return result
    os.makedirs(out_dir, exist_ok=True)
    pred_path = os.path.join(os.fspath(out_dir), f"{split}_predictions.json")
    with open(pred_path, "w", encoding="utf-8") as f:
        json.dump(clean_records, f, ensure_ascii=False, indent=1)
    result = score(preds, refs, types, metrics, fields=fields, **score_kwargs)
    metrics_path = os.path.join(os.fspath(out_dir), f"{split}_metrics.json")
    with open(metrics_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=2)
    logging.info("%s metrics written to %s", split, metrics_path)
    logging.debug("%s metrics:\n%s", split, format_table(result))  # callers print or log the scores once
    return result


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
    if metrics.get("by_field"):
        lines.append(grouping.format_field_tables(metrics["by_field"]))
    for note in metrics.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)
