"""The metric registry of the evaluator (:mod:`.evaluator`): the metric names, the :class:`ScoringContext` a metric
function reads the prepared corpus from and writes its values into, and one registered function per metric (or
group of metrics computed together), each calling its metric module (:mod:`.bleu`, :mod:`.rouge`, :mod:`.cider`,
:mod:`.meteor`, :mod:`.anls`, :mod:`.vqa_accuracy`, :mod:`.squad`, :mod:`.evjvqa`, :mod:`.wmd`, :mod:`.relevance`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from absl import logging

import openvivqa_jax.evaluation.anls as anls_lib
import openvivqa_jax.evaluation.bleu as bleu_lib
import openvivqa_jax.evaluation.cider as cider_lib
import openvivqa_jax.evaluation.evjvqa as evjvqa_lib
import openvivqa_jax.evaluation.meteor as meteor_lib
import openvivqa_jax.evaluation.relevance as relevance_lib
import openvivqa_jax.evaluation.rouge as rouge_lib
import openvivqa_jax.evaluation.squad as squad_lib
import openvivqa_jax.evaluation.vqa_accuracy as vqa_lib
import openvivqa_jax.evaluation.wmd as wmd_lib
from openvivqa_jax.evaluation.ngrams import build_ngram_corpus

__all__ = ["BLEU_METRICS", "EVJVQA_METRICS", "ALL_METRICS", "DEFAULT_METRICS", "METRIC_FUNCTIONS", "ScoringContext",
           "register_metric", "resolve_metrics"]

BLEU_METRICS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4")
EVJVQA_METRICS = ("EVJVQA-F1", "EVJVQA-BLEU")
#: Every metric name, in report order.
ALL_METRICS = (*BLEU_METRICS, "ROUGE-L", "CIDEr", "METEOR", "METEOR-vi", "ANLS", "VQA-accuracy", "EM", "F1",
               *EVJVQA_METRICS, "WMDRel", "CLinRel", "CMedRel")
#: Metrics computed when none are named (WMDRel is added when a vectors file is given, the EVJVQA metrics
#: when the questions carry languages other than Vietnamese; CLinRel and CMedRel only when named).
DEFAULT_METRICS = tuple(m for m in ALL_METRICS if m not in ("WMDRel", "CLinRel", "CMedRel", *EVJVQA_METRICS))
_ALIASES = {"BLEU": BLEU_METRICS, "METEOR-all": ("METEOR", "METEOR-vi"), "EVJVQA": EVJVQA_METRICS, "all": ALL_METRICS}
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


@dataclasses.dataclass
class ScoringContext:
    """What :func:`.evaluator.score` hands each metric function: the prepared corpus and the outputs to fill.

    Attributes:
      names: the requested metric names (:func:`resolve_metrics`).
      ids: the ``n`` scored question ids; ``hyps`` ``[n]`` and ``refs`` ``[n][>= 1]``: their prepared
        strings (text mode of :func:`.evaluator.score`); ``raw_hyps``/``raw_refs``: as given (non-empty references);
        ``given_refs``: every reference as given, empty ones included (what the official scripts read);
        ``squad_hyps``/``squad_refs``: EM/F1's strings (empty lists when neither is requested);
        ``languages``: ``[n]`` ISO 639-1 codes or None.
      groups: group name (``overall``, ``text_qa``, ``non_text_qa``) -> question positions ``(n_g,)``.
      result: the report being built; a metric writes ``result[group][name]`` (None when unavailable).
      notes, counts: the report's notes and counts, appended to.
      empty_idx: ``(n_e,)`` positions of the questions whose references are all empty (module doc).
      options: ``java``, ``meteor_jar``, ``meteor_timeout``, ``vectors``, ``answer_rules``, ``text_mode``,
        ``ptb_unavailable`` (why the official mode's caption metrics fell back to the normalized text, or None).
      per_q: metric name -> ``(n,)`` per-question values, filled by the metrics (``per_question`` output and
        :func:`.grouping.field_scores`).
    """

    names: list[str]
    ids: list[str]
    hyps: list[str]
    refs: list[list[str]]
    raw_hyps: list[str]
    raw_refs: list[list[str]]
    given_refs: list[list[str]]
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

    @property
    def official(self) -> bool:
        """Whether the official text mode is on (each metric by its official script's rule)."""
        return self.options.get("text_mode") == "official"

    def put_mean(self, name: str, values: np.ndarray, empty_rule: bool = True) -> None:
        """Stores per-question ``values`` ``(n,)`` and each group's mean; with ``empty_rule`` the empty-reference
        rule is applied first (an official script's own rule for empty answers is kept with ``False``)."""
        if empty_rule:
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


#: Metric names -> the function computing them from a :class:`ScoringContext`; :func:`.evaluator.score` calls each
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
    """ANLS (ST-VQA, tau 0.5), mean over questions: the RRC rule on the answers as given (lowercased, stripped) in
    the official mode, else on the mode's strings."""
    if ctx.official:
        hyps = [anls_lib.rrc_string(h) for h in ctx.raw_hyps]
        refs = [[anls_lib.rrc_string(r) for r in rs] for rs in ctx.given_refs]
        ctx.put_mean("ANLS", anls_lib.anls(hyps, refs), empty_rule=False)
        return
    ctx.put_mean("ANLS", anls_lib.anls(ctx.string_hyps or ctx.hyps, ctx.string_refs or ctx.refs))


@register_metric("VQA-accuracy")
def _vqa_accuracy(ctx: ScoringContext) -> None:
    """VQA accuracy (leave-one-out min(n/3, 1)); ``english`` answer rules (always in the official mode) on the raw
    strings; questions with too few references fall back on exact match (counted, with a note)."""
    if ctx.official:
        acc, fallback = vqa_lib.vqa_accuracy([vqa_lib.english_answer(t) for t in ctx.raw_hyps],
                                             [[vqa_lib.english_answer(r) for r in rs] for rs in ctx.given_refs],
                                             min_answers=vqa_lib.OFFICIAL_MIN_ANSWERS)
        ctx.put_mean("VQA-accuracy", acc, empty_rule=False)
        ctx.count("vqa_exact_match_fallback", fallback,
                  f"VQA-accuracy: {fallback} questions have fewer than {vqa_lib.OFFICIAL_MIN_ANSWERS} references; "
                  "scored by exact match with any processed reference, as MMF's ST-VQA accuracy does")
        return
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
    """SQuAD EM and F1 (max over references; SQuAD v1.1's script in the official mode), and human performance
    (ViQuAD protocol) where questions have two or more references."""
    rule = "squad" if ctx.official else "vietnamese"
    em, f1 = squad_lib.em_f1(ctx.squad_hyps, ctx.squad_refs, rule)
    if ctx.wants("EM"):
        ctx.put_mean("EM", em, empty_rule=not ctx.official)
    if ctx.wants("F1"):
        ctx.put_mean("F1", f1, empty_rule=not ctx.official)
    h_em, h_f1, several = squad_lib.human_performance(ctx.squad_refs, rule)
    if several.any():
        hp: dict[str, Any] = {"protocol": "ViQuAD 5.1: each answer in turn against the others, max over them, mean",
                              "rule": "SQuAD v1.1 evaluate-v1.1.py" if ctx.official else "Vietnamese EM/F1 rule"}
        for g, idx in ctx.groups.items():
            sel = idx[several[idx]]
            if sel.size:
                hp[g] = {"EM": float(h_em[sel].mean()), "F1": float(h_f1[sel].mean()), "num_questions": int(sel.size)}
        ctx.result["human_performance"] = hp


@register_metric(*EVJVQA_METRICS)
def _evjvqa(ctx: ScoringContext) -> None:
    """EVJVQA's F1 and BLEU by the challenge scorer's rule on the answers as given, in every text mode
    (:mod:`.evjvqa`)."""
    if ctx.wants("EVJVQA-F1"):
        ctx.put_mean("EVJVQA-F1", evjvqa_lib.f1_scores(ctx.raw_hyps, ctx.given_refs), empty_rule=False)
    if ctx.wants("EVJVQA-BLEU"):
        per_group_bleu, sent_bleu = evjvqa_lib.bleu_mean(ctx.raw_hyps, ctx.given_refs, ctx.groups)
        ctx.per_q["EVJVQA-BLEU"] = sent_bleu
        for g in ctx.groups:
            ctx.result[g]["EVJVQA-BLEU"] = per_group_bleu[g]


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
    are none (:mod:`.relevance`)."""
    relevance_lib.score_relevance(ctx)
