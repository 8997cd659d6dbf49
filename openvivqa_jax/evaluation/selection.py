"""The questions :func:`.evaluator.score` scores and the strings its metrics read: predictions matched with
their references, sanitized (:mod:`.sanitize`), what was set aside or changed counted in the report's notes
(:class:`Report`), and the text of the chosen text mode (:func:`prepare_text`).
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from absl import logging

import openvivqa_jax.evaluation.meteor as meteor_lib
import openvivqa_jax.evaluation.ptb as ptb_lib
import openvivqa_jax.evaluation.scripts as scripts_lib
from openvivqa_jax.evaluation.formats import InputError, parse_qa_type
from openvivqa_jax.evaluation.sanitize import METEOR_SEPARATOR, SanitizeStats, remove_control_characters, sanitize_text
from openvivqa_jax.text.normalize import normalize_text

__all__ = ["UNKNOWN_PIECE", "PTB_METRICS", "as_text", "Report", "Selection", "select_questions", "count_selection",
           "PreparedText", "prepare_text"]

_MAX_IDS_IN_NOTE = 5
#: The metrics that read pycocoevalcap's PTB tokens in the ``pycocoevalcap`` and ``official`` text modes.
PTB_METRICS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr", "METEOR", "METEOR-vi", "WMDRel")
#: SentencePiece's rendering of the unknown piece.
UNKNOWN_PIECE = "\u2047"


def _ids_text(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in list(ids)[:_MAX_IDS_IN_NOTE])
    return shown + (", ..." if len(ids) > _MAX_IDS_IN_NOTE else "")


def as_text(value: Any, qid: str, what: str) -> str | None:
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
class Report:
    """The notes and counts of a :func:`.evaluator.score` call, filled stage by stage."""

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
class Selection:
    """The questions :func:`.evaluator.score` scores, sanitized (:func:`select_questions`), and what was set aside.

    ``ids``, ``hyps``, ``refs`` (non-empty lists; ``[""]`` for only-empty references), ``types``,
    ``raw_hyps``, ``raw_refs`` (the kept references as given) and ``given_refs`` (every reference as given, empty
    ones included, None as ``""``: what the official scripts read) are parallel lists of the scored questions.
    """

    ids: list[str] = dataclasses.field(default_factory=list)
    hyps: list[str] = dataclasses.field(default_factory=list)
    refs: list[list[str]] = dataclasses.field(default_factory=list)
    types: list[int] = dataclasses.field(default_factory=list)
    raw_hyps: list[str] = dataclasses.field(default_factory=list)
    raw_refs: list[list[str]] = dataclasses.field(default_factory=list)
    given_refs: list[list[str]] = dataclasses.field(default_factory=list)
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


def select_questions(pred_map: Mapping[str, Any], ref_map: Mapping[str, Any], type_map: Mapping[str, Any],
                      max_tokens: int) -> Selection:
    """The predicted questions that have references, sanitized (module doc: empty references, capped strings).

    Raises:
      TypeError: a prediction, reference or QA type of the wrong type (names the question).
    """
    sel = Selection()
    stats = sel.stats
    for qid, raw_pred in pred_map.items():
        if qid not in ref_map:
            continue
        pred = as_text(raw_pred, qid, "prediction")
        if pred is None:
            sel.none_pred.append(qid)
            pred = ""
        hyp = sanitize_text(pred, max_tokens=max_tokens, stats=stats, qid=qid)
        if UNKNOWN_PIECE in pred:
            sel.unknown_piece.append(qid)
        raw_refs = _reference_list(ref_map[qid], qid)
        clean, raw_clean, given = [], [], []
        for raw_r in raw_refs:
            raw_r = as_text(raw_r, qid, "reference")
            raw_r = "" if raw_r is None else raw_r
            given.append(raw_r)
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
        sel.given_refs.append(given)
    return sel


def count_selection(report: Report, sel: Selection, pred_map: Mapping[str, Any], ref_map: Mapping[str, Any],
                     max_tokens: int, decode_notes: Mapping[str, Mapping[str, int]] | None) -> None:
    """The counts and notes of what :func:`select_questions` set aside or changed, and of the decoding notes."""
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


def _unicode_form(text: str) -> str | None:
    """``"NFC"`` when ``text`` holds composed characters that NFD would split (``ố`` as one code point),
    ``"NFD"`` when it holds decomposed ones that NFC would join (``o`` + U+0302 + U+0301), None for neither
    (plain ASCII) or both."""
    nfc, nfd = unicodedata.normalize("NFC", text), unicodedata.normalize("NFD", text)
    if nfc == nfd or text not in (nfc, nfd):
        return None
    return "NFC" if text == nfc else "NFD"


def count_unicode_form_mismatch(report: Report, sel: Selection, text_mode: str) -> None:
    """Counts the questions whose prediction and references are in different Unicode normalization forms (one
    NFC, the other NFD): a mode that compares the text as written (``text_mode`` other than ``openvivqa``) never
    matches their accented words, and the scores fall near 0 with nothing else to say why."""
    odd = []
    for qid, hyp, refs in zip(sel.ids, sel.raw_hyps, sel.raw_refs):
        h = _unicode_form(hyp)
        forms = {f for f in map(_unicode_form, refs) if f}
        if h and forms and h not in forms:
            odd.append(qid)
    report.count("unicode_form_mismatch", odd, "{n} predictions are in another Unicode normalization form than their "
                 "references (NFD: a letter, then its accent marks; NFC: one code point each), so text mode "
                 f"{text_mode!r}, which compares the characters as written, matches none of their accented words; "
                 "--text_mode openvivqa composes both (NFC) before scoring")


@dataclasses.dataclass
class PreparedText:
    """The strings the metrics read (:func:`prepare_text`): ``hyps``/``refs`` for the n-gram metrics,
    ``squad_hyps``/``squad_refs`` for EM/F1, ``string_hyps``/``string_refs`` before a per-character cut
    (None when nothing was cut); ``ptb_unavailable``: why the official mode could not run pycocoevalcap's
    tokenizer (None when it ran or was not needed), in which case ``hyps``/``refs`` are the normalizer's."""

    hyps: list[str]
    refs: list[list[str]]
    squad_hyps: list[str]
    squad_refs: list[list[str]]
    string_hyps: list[str] | None = None
    string_refs: list[list[str]] | None = None
    ptb_unavailable: str | None = None


def _ptb_text(sel: Selection, java: Any, max_tokens: int) -> tuple[list[str], list[list[str]]]:
    """pycocoevalcap's strings of the predictions and kept references: PTB tokens, punctuation tokens removed,
    nothing else (module doc).

    Raises:
      MeteorUnavailable: no Java or tokenizer jar, or the jar failed.
    """
    flat = [remove_control_characters(t).replace(METEOR_SEPARATOR, " ")
            for t in [*sel.raw_hyps, *(r for rs in sel.raw_refs for r in rs)]]
    tokens = [" ".join(t.split(" ")[:max_tokens]) for t in ptb_lib.ptb_tokenize(flat, java=java)]
    n = len(sel.ids)
    refs, pos = [], n
    for rs in sel.raw_refs:
        refs.append(tokens[pos : pos + len(rs)])
        pos += len(rs)
    return tokens[:n], refs


def prepare_text(report: Report, sel: Selection, names: Sequence[str], lang_map: Mapping[str, str],
                  text_mode: str, java: Any, max_tokens: int) -> PreparedText:
    """The metrics' strings in ``text_mode`` (module doc): the original toolkit's PTB tokens (``pycocoevalcap``, and
    ``official`` when one of :data:`PTB_METRICS` is requested, with the answers as given for EM/F1), or the
    normalizer's, with scripts written without spaces cut per character (:mod:`.scripts`) in the ``openvivqa``
    mode.

    Raises:
      ValueError: the ``pycocoevalcap`` mode without its tokenizer (Java or the jar).
    """
    ids = sel.ids
    if text_mode != "openvivqa":  # the text is compared as written
        count_unicode_form_mismatch(report, sel, text_mode)
    if text_mode == "official" and not any(m in PTB_METRICS for m in names):
        # No caption metric: the other metrics read the answers as given; hyps/refs serve the per-field tables only.
        text = _normalized_text(report, sel, names, lang_map, max_tokens, cut=False)
        text.squad_hyps, text.squad_refs = list(sel.raw_hyps), [list(rs) for rs in sel.given_refs]
        return text
    if text_mode in ("pycocoevalcap", "official") and ids:
        try:
            hyps, refs = _ptb_text(sel, java, max_tokens)
        except meteor_lib.MeteorUnavailable as e:
            if text_mode == "pycocoevalcap":
                raise ValueError(f"text_mode 'pycocoevalcap' needs the PTB tokenizer: {e}") from None
            text = _normalized_text(report, sel, names, lang_map, max_tokens, cut=False)
            text.squad_hyps, text.squad_refs = list(sel.raw_hyps), [list(rs) for rs in sel.given_refs]
            text.ptb_unavailable = str(e)
            return text
        if text_mode == "official":  # EM/F1 read the answers as given (SQuAD's script normalizes them itself)
            return PreparedText(hyps, refs, list(sel.raw_hyps), [list(rs) for rs in sel.given_refs])
        return PreparedText(hyps, refs, hyps, refs)
    return _normalized_text(report, sel, names, lang_map, max_tokens, cut=True)


def _normalized_text(report: Report, sel: Selection, names: Sequence[str], lang_map: Mapping[str, str],
                     max_tokens: int, cut: bool) -> PreparedText:
    """The ``openvivqa`` mode's strings: the sanitized text, and EM/F1's (without spaced punctuation); with ``cut``
    the questions in a script without word spaces cut per character (counted in the report)."""
    ids, raw_hyps, raw_refs_kept = sel.ids, sel.raw_hyps, sel.raw_refs
    hyps, refs = list(sel.hyps), [list(rs) for rs in sel.refs]

    def squad_text(t: str) -> str:
        # As sanitize_text, without spaced punctuation: SQuAD deletes punctuation, "10.000" == "10000".
        t = remove_control_characters(t).replace(METEOR_SEPARATOR, " ")
        return " ".join(normalize_text(t, spaced_punctuation=False).split(" ")[:max_tokens])

    want_squad = "EM" in names or "F1" in names
    squad_hyps = [squad_text(t) for t in raw_hyps] if want_squad else []
    squad_refs = [[squad_text(r) for r in rs] for rs in raw_refs_kept] if want_squad else []
    text = PreparedText(hyps, refs, squad_hyps, squad_refs)
    if not cut:
        return text
    # Scripts without word spaces: one token per character (scripts module doc).
    cut_ids = [i for i, qid in enumerate(ids) if scripts_lib.applies(lang_map.get(qid), [hyps[i], *refs[i]])]
    if cut_ids:
        text.string_hyps, text.string_refs = list(hyps), [list(rs) for rs in refs]
        for i in cut_ids:
            hyps[i] = scripts_lib.split_spaceless(hyps[i])
            refs[i] = [scripts_lib.split_spaceless(r) for r in refs[i]]
            if want_squad:
                squad_hyps[i] = scripts_lib.split_spaceless(squad_hyps[i])
                squad_refs[i] = [scripts_lib.split_spaceless(r) for r in squad_refs[i]]
    report.count("per_character_questions", [ids[i] for i in cut_ids], "{n} questions in a script written without "
                 "spaces between words (Chinese, Japanese, Thai, ...) were tokenized per character for BLEU, "
                 "ROUGE-L, CIDEr, METEOR, WMDRel and F1 (Vietnamese-normalized text mode)")
    return text
