"""Readers for prediction and reference files in the published formats.

References (``load_references``), detected from the content:

============================  =================================================================  =========
format                        layout                                                             qa_type
============================  =================================================================  =========
OpenViVQA public release      ``{"images": {id: file}, "annotations": {qid: {image_id,           from
                              question, answer}}}`` (``vlsp2023_*_data.json``)                   QA-type
OpenViVQA list form (older)   ``{"images": [{id, filename}], "annotations": [{id, image_id,      if present
                              question, answers, QA-type}]}``
ViVQA CSV                     header ``,question,answer,img_id,type``; question id = the row      unknown
                              index (first column, else the data-row number); ``type`` is the
                              question category (0-3), not text/non-text
SQuAD v1.1                    ``{"data": [{"paragraphs": [{"qas": [{id, answers: [{text}]}]}]}]}``  unknown
TextVQA / ST-VQA              ``{"data": [{question_id, question, answers: [...]}]}``             text QA
plain mapping                 ``{qid: [answers]}`` or ``{qid: answer}``                           unknown
evaluator records             ``[{question_id, question, prediction, references, qa_type}]``      as given
============================  =================================================================  =========

A question id repeated in a list of records (UIT-ViQuAD 1.0's dev and test files repeat 7 and 2) follows the
builders' rule (:mod:`openvivqa_jax.data.repairs`): a repeat carrying another question is renamed ``<id>#<n>``
(:attr:`ReferenceSet.renamed`), an exact duplicate is dropped, a repeat of the same question with other
answers is an error; each is counted in :attr:`ReferenceSet.repairs`. A renamed question without a prediction
of its own is scored with the prediction of its original id (:func:`fill_renamed`), as SQuAD's
``evaluate-v1.1.py`` scores every record of an id with the one prediction of that id.

Records that carry ``language`` (EVJVQA: ``vi``/``en``/``ja``) or ``kind`` keep them in
:attr:`ReferenceSet.fields`, so scores can be grouped by them. A key repeated in a JSON object (a
duplicated question id of the public-release form, which ``json.load`` would silently overwrite) is an
error naming the key and the file.

Predictions (``load_predictions``): ``{qid: answer}`` (also the public release's Codalab
submission), the evaluator's predictions file (records as above; it also carries references), or a
list of ``{question_id, answer}`` records (TextVQA/ST-VQA submission style).

All ids become strings. Answers and predictions must be JSON strings (or null: no answer): a number or
true/false is refused as the dataset builders refuse it (:func:`answer_text`), since the file's spelling of a
number is lost in parsing. Every error is an :class:`InputError` whose one-line message names the file and,
where it applies, the record, and names JSON's kinds ("an object", "a list", "a number").
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any
from openvivqa_jax.errors import UserError

from openvivqa_jax import jsonio
from openvivqa_jax.data import repairs
from openvivqa_jax.jsonio import json_kind
from openvivqa_jax.text.normalize import normalize_text

__all__ = [
    "QA_TYPE_TEXT",
    "QA_TYPE_NON_TEXT",
    "QA_TYPE_UNKNOWN",
    "InputError",
    "ReferenceSet",
    "PredictionSet",
    "parse_qa_type",
    "load_references",
    "load_predictions",
    "references_from_json",
    "predictions_from_json",
    "GROUP_FIELDS",
    "fill_renamed",
]

# Same values as tfds_builders.common (not imported: it pulls in TensorFlow Datasets).
QA_TYPE_TEXT = 1
QA_TYPE_NON_TEXT = 0
QA_TYPE_UNKNOWN = -1

_QA_TYPE_NAMES = {
    "1": QA_TYPE_TEXT,
    "text": QA_TYPE_TEXT,
    "text_qa": QA_TYPE_TEXT,
    "text-qa": QA_TYPE_TEXT,
    "0": QA_TYPE_NON_TEXT,
    "non-text": QA_TYPE_NON_TEXT,
    "non_text": QA_TYPE_NON_TEXT,
    "nontext": QA_TYPE_NON_TEXT,
    "non_text_qa": QA_TYPE_NON_TEXT,
    "non-text-qa": QA_TYPE_NON_TEXT,
    "-1": QA_TYPE_UNKNOWN,
    "unknown": QA_TYPE_UNKNOWN,
    "": QA_TYPE_UNKNOWN,
}


class InputError(UserError, ValueError):
    """A prediction or reference file cannot be used; the message names the file and record."""


@dataclasses.dataclass
class ReferenceSet:
    """References of a split.

    Attributes:
      answers: question id -> reference answers (possibly empty: the evaluator excludes and counts it).
      qa_types: question id -> 1 (text QA), 0 (non-text QA) or -1 (unknown).
      questions: question id -> question text, where the file has it.
      format: the detected format name.
      path: the file.
      fields: record field -> {question id: value} for the grouping fields of :data:`GROUP_FIELDS`
        (``language``, ``kind``) where the file's records carry them (EVJVQA's ``language``).
      renamed: new id -> the id as in the file, for the repeated ids renamed ``<id>#<n>`` (module doc).
      repairs: repair kind (:data:`openvivqa_jax.data.repairs.KINDS`) -> ``{"count", "first"}`` of the file.
    """

    answers: dict[str, list[Any]]
    qa_types: dict[str, int]
    questions: dict[str, str]
    format: str
    path: str = ""
    fields: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    renamed: dict[str, str] = dataclasses.field(default_factory=dict)
    repairs: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class PredictionSet:
    """Predictions of a split.

    Attributes:
      predictions: question id -> predicted answer.
      references: the references the file carries (evaluator records), else None.
      format: the detected format name.
      path: the file.
    """

    predictions: dict[str, Any]
    references: ReferenceSet | None
    format: str
    path: str = ""


def parse_qa_type(value: Any, where: str = "") -> int:
    """Maps a QA-type field (1/0/-1, "text"/"non-text", None) to 1, 0 or -1.

    Raises:
      InputError: for any other value (the message includes ``where``).
    """
    if value is None:
        return QA_TYPE_UNKNOWN
    if hasattr(value, "item") and callable(value.item) and getattr(value, "shape", None) == ():
        value = value.item()  # numpy scalar (e.g. int32 from a TFDS example)
    if isinstance(value, bool):
        raise InputError(f"{where}: QA type must be 1 (text), 0 (non-text) or -1, got {value!r}")
    if isinstance(value, (int, float)) and float(value).is_integer():
        value = str(int(value))
    if isinstance(value, str) and value.strip().lower() in _QA_TYPE_NAMES:
        return _QA_TYPE_NAMES[value.strip().lower()]
    raise InputError(f"{where}: QA type must be 1 (text), 0 (non-text) or -1, got {value!r}")


def _read_json(path: str, what: str) -> Any:
    """Reads a JSON file (:func:`openvivqa_jax.jsonio.read_json`: a byte-order mark accepted); a key repeated in
    any object (a duplicated question id in the public-release form ``{"annotations": {qid: ...}}`` or a
    ``{qid: answer}`` file) is an :class:`InputError` naming the key and its line."""
    return jsonio.read_json(path, what=f"{what} file", error=InputError, repeated_keys="error")


def answer_text(value: Any, where: str, what: str = "answer") -> str | None:
    """``value`` when it is a string (or None: no answer), as the dataset builders read an answer.

    A JSON number is refused as the builders refuse it (``tfds_builders/readers.py``): its text is not kept
    (``1e2``, ``100.0`` and ``100.00`` all read as the number 100.0), so no conversion could give the string the
    file meant, and ``"100.0"`` would score 0 against a reference ``"100"``.

    Raises:
      InputError: a number, true/false, a list or an object (the message starts with ``where``).
    """
    if value is None or isinstance(value, str):
        return value
    shown = json.dumps(value, ensure_ascii=False) if isinstance(value, (bool, int, float)) else None
    hint = (f"; write it in quotes as it should be scored, e.g. \"{int(value) if float(value).is_integer() else value}\""
            " (a number's own spelling is not kept: 1e2 and 100.0 both read as 100.0)"
            if isinstance(value, (int, float)) and not isinstance(value, bool) else "")
    raise InputError(f"{where}: {what} is {json_kind(value)}{f' ({shown})' if shown else ''}, expected a string{hint}")


def _answers_list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        if isinstance(value, dict):
            raise InputError(f"{where}: answers must be a string or a list of strings, got {json_kind(value)}")
        return [answer_text(value, where)]
    out = []
    for i, a in enumerate(value):
        if isinstance(a, dict) and "text" in a:  # SQuAD-style {text, answer_start}
            a = a["text"]
        elif isinstance(a, dict) and "answer" in a:  # VQA-style {answer, answer_id}
            a = a["answer"]
        out.append(answer_text(a, where, f"answer {i}"))
    return out


#: Record fields kept in :attr:`ReferenceSet.fields` (scores can be grouped by them).
GROUP_FIELDS = ("language", "kind")


def _refuse(path: Any, record: str, what: str, reason: str) -> None:
    """The repair rule's error hook: one :class:`InputError` line naming the file and the record."""
    raise InputError(f"{path}: {record}: {what}")


class _RepeatedIds:
    """The builders' rule for ids repeated in a reference file's list of records (module doc), filling
    :attr:`ReferenceSet.renamed` and :attr:`ReferenceSet.repairs`."""

    def __init__(self, ref: ReferenceSet):
        self.ref = ref
        self.log = repairs.RepairLog(ref.path, _refuse)
        self.ids = repairs.RepeatedIds(self.log)

    def resolve(self, qid: str, same: Any, answers: list[Any], where: str) -> str | None:
        """The id to keep the record under (``qid`` or ``<qid>#<n>``), or None for an exact duplicate."""
        new = self.ids.resolve(qid, same, answers, path=self.ref.path, record=where.split(": ", 1)[-1])
        if new is not None and new != qid:
            self.ref.renamed[new] = qid
        self.ref.repairs = {k: {"count": v["count"], "first": [i for e in v["files"].values() for i in e["first"]]}
                            for k, v in self.log.as_dict().items()}
        return new


def _add(
    ref: ReferenceSet, qid: Any, answers: list[Any], qa_type: int, question: Any, where: str,
    rec: Mapping[str, Any] | None = None, ids: _RepeatedIds | None = None, same: Any = None,
) -> None:
    """Stores one record's references under its id.

    Args:
      ids, same: the repeated-id rule of a list of records and what makes two records the same question
        (the question and its passage or image); None: a repeated id is an error (a JSON object's keys).

    Raises:
      InputError: a missing id, a repeated one that the rule cannot resolve, or a malformed field.
    """
    if qid is None or isinstance(qid, (dict, list)):
        raise InputError(f"{where}: missing or invalid question id {qid!r}")
    qid = str(qid)
    if ids is not None:
        qid = ids.resolve(qid, question if same is None else same, answers, where)
        if qid is None:
            return
    if qid in ref.answers:
        raise InputError(f"{where}: duplicate question id {qid!r}")
    ref.answers[qid] = answers
    ref.qa_types[qid] = qa_type
    if isinstance(question, str):
        ref.questions[qid] = question
    for name in GROUP_FIELDS:
        value = rec.get(name) if isinstance(rec, Mapping) else None
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{where}: {name} must be a non-empty string, got {value!r}")
        ref.fields.setdefault(name, {})[qid] = value.strip().lower() if name == "language" else value.strip()


def _qa_type_of(rec: Mapping[str, Any], where: str, default: int = QA_TYPE_UNKNOWN) -> int:
    for key in ("QA-type", "qa_type", "QA_type", "qa-type"):
        if key in rec:
            return parse_qa_type(rec[key], where)
    return default


def _squad_references(items: list, path: str) -> ReferenceSet:
    """The references of a SQuAD v1.1 file's ``data`` (:func:`references_from_json`)."""
    ref = ReferenceSet({}, {}, {}, "squad-v1.1", path)
    ids = _RepeatedIds(ref)
    for a_i, article in enumerate(items):
        for p_i, para in enumerate(article.get("paragraphs", [])):
            for q_i, qa in enumerate(para.get("qas", [])):
                where = f"{path}: data[{a_i}].paragraphs[{p_i}].qas[{q_i}]"
                if not isinstance(qa, dict) or "id" not in qa:
                    raise InputError(f"{where}: no 'id' field")
                answers = _answers_list(qa.get("answers"), f"{where} (id {qa['id']!r})")
                _add(ref, qa["id"], answers, QA_TYPE_UNKNOWN, qa.get("question"), where, None, ids,
                     [qa.get("question"), para.get("context")])
    return ref


def references_from_json(data: Any, path: str = "<json>") -> ReferenceSet:
    """Parses references already loaded from JSON (any supported JSON format; see the module doc).

    Raises:
      InputError: unknown layout or a malformed record (named in the message).
    """
    if isinstance(data, dict) and "annotations" in data:
        anns = data["annotations"]
        if isinstance(anns, dict):  # public release
            ref = ReferenceSet({}, {}, {}, "openvivqa-public", path)
            for qid, rec in anns.items():
                where = f"{path}: annotation {qid!r}"
                if not isinstance(rec, dict):
                    raise InputError(f"{where}: expected an object, got {json_kind(rec)}")
                if "answer" not in rec and "answers" not in rec:
                    raise InputError(f"{where}: no 'answer' field")
                answers = _answers_list(rec.get("answer", rec.get("answers")), where)
                _add(ref, qid, answers, _qa_type_of(rec, where), rec.get("question"), where, rec)
            return ref
        if isinstance(anns, list):  # older list form
            ref = ReferenceSet({}, {}, {}, "openvivqa-list", path)
            ids = _RepeatedIds(ref)
            for i, rec in enumerate(anns):
                where = f"{path}: annotations[{i}]"
                if not isinstance(rec, dict):
                    raise InputError(f"{where}: expected an object, got {json_kind(rec)}")
                qid = rec.get("id", rec.get("question_id"))
                where = f"{path}: annotation {qid!r} (annotations[{i}])"
                if "answers" not in rec and "answer" not in rec:
                    raise InputError(f"{where}: no 'answers' field")
                answers = _answers_list(rec.get("answers", rec.get("answer")), where)
                _add(ref, qid, answers, _qa_type_of(rec, where), rec.get("question"), where, rec, ids,
                     [rec.get("image_id"), rec.get("question")])
            return ref
        raise InputError(f"{path}: 'annotations' must be an object or a list")
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        items = data["data"]
        if items and isinstance(items[0], dict) and "paragraphs" in items[0]:  # SQuAD v1.1
            return _squad_references(items, path)
        name = str(data.get("dataset_name", "textvqa/st-vqa")).lower()
        ref = ReferenceSet({}, {}, {}, name, path)
        ids = _RepeatedIds(ref)
        # TextVQA v0.1 has no question ids at all: its questions are named by their position, as the parity
        # scripts index them; a file where only some records lack one is an error.
        by_position = bool(items) and not any(isinstance(r, dict) and "question_id" in r for r in items)
        for i, rec in enumerate(items):
            where = f"{path}: data[{i}]"
            if not isinstance(rec, dict) or ("question_id" not in rec and not by_position):
                raise InputError(f"{where}: no 'question_id' field (other records of the file have one)")
            qid = str(i) if by_position else rec["question_id"]
            where = f"{path}: question {qid!r} (data[{i}])"
            answers = _answers_list(rec.get("answers"), where)
            # Every TextVQA / ST-VQA question needs the image text to be answered.
            _add(ref, qid, answers, _qa_type_of(rec, where, QA_TYPE_TEXT), rec.get("question"), where, rec,
                 ids, [rec.get("image_id"), rec.get("question")])
        if by_position:
            ref.repairs["question_id_from_position"] = {"count": len(items), "first": [str(i) for i in range(
                min(len(items), repairs.FIRST_IDS))]}
        return ref
    if isinstance(data, list):  # evaluator records
        ref = ReferenceSet({}, {}, {}, "records", path)
        for i, rec in enumerate(data):
            where = f"{path}: record {i}"
            if not isinstance(rec, dict) or "question_id" not in rec:
                raise InputError(f"{where}: expected an object with 'question_id'")
            where = f"{path}: question {rec['question_id']!r} (record {i})"
            key = next((k for k in ("references", "answers", "answer") if k in rec), None)
            if key is None:
                raise InputError(f"{where}: no 'references' field")
            _add(ref, rec["question_id"], _answers_list(rec[key], where), _qa_type_of(rec, where), rec.get("question"),
                 where, rec)
        return ref
    if isinstance(data, dict):  # plain mapping
        ref = ReferenceSet({}, {}, {}, "mapping", path)
        for qid, value in data.items():
            _add(ref, qid, _answers_list(value, f"{path}: question {qid!r}"), QA_TYPE_UNKNOWN, None, path)
        return ref
    raise InputError(f"{path}: unrecognized reference format (top level is {json_kind(data)})")


def _load_csv(path: str) -> ReferenceSet:
    ref = ReferenceSet({}, {}, {}, "vivqa-csv", path)
    ids = _RepeatedIds(ref)
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames or []
            if "answer" not in fields:
                raise InputError(f"{path}: CSV has no 'answer' column (columns: {fields})")
            index_col = fields[0] if fields and fields[0] not in ("question", "answer", "img_id", "type") else None
            for row_no, row in enumerate(reader):
                where = f"{path}: row {row_no} (line {reader.line_num})"
                qid = row.get(index_col) if index_col is not None else None
                qid = qid if qid not in (None, "") else str(row_no)
                answer = row.get("answer")
                _add(ref, qid, [] if answer is None else [answer], QA_TYPE_UNKNOWN, row.get("question"), where, None,
                     ids, [row.get("img_id"), row.get("question")])
    except FileNotFoundError:
        raise InputError(f"cannot read references file {path!r}: no such file") from None
    except UnicodeDecodeError as e:
        raise InputError(f"cannot read references file {path!r}: not UTF-8 text ({e.reason})") from None
    except csv.Error as e:
        raise InputError(f"cannot read references file {path!r}: malformed CSV: {e}") from None
    except OSError as e:
        raise InputError(f"cannot read references file {path!r}: {e.strerror or e}") from None
    return ref


def load_references(path: str | os.PathLike) -> ReferenceSet:
    """Reads a reference file in any supported format (``.csv`` is ViVQA CSV, anything else JSON).

    Raises:
      InputError: unreadable file, invalid JSON/CSV, unknown layout or malformed record.
    """
    path = os.fspath(path)
    if path.lower().endswith(".csv"):
        return _load_csv(path)
    return references_from_json(_read_json(path, "references"), path)


def predictions_from_json(data: Any, path: str = "<json>") -> PredictionSet:
    """Parses predictions already loaded from JSON (see the module doc).

    Raises:
      InputError: unknown layout, duplicate ids or a malformed record (named in the message).
    """
    if isinstance(data, dict):
        if "annotations" in data or "data" in data:
            raise InputError(f"{path}: this looks like a reference file (has 'annotations'/'data'), not predictions")
        preds = {}
        for qid, value in data.items():
            if isinstance(value, (list, dict)):
                raise InputError(
                    f"{path}: question {qid!r}: prediction must be a string, got {json_kind(value)} "
                    "(a file of {question_id: [answers]} holds references: give it as --references)"
                )
            preds[str(qid)] = answer_text(value, f"{path}: question {qid!r}", "prediction")
        return PredictionSet(preds, None, "mapping", path)
    if isinstance(data, list):
        preds: dict[str, Any] = {}
        has_refs = bool(data) and all(isinstance(r, dict) and "references" in r for r in data)
        for i, rec in enumerate(data):
            if not isinstance(rec, dict) or "question_id" not in rec:
                raise InputError(f"{path}: record {i}: expected an object with 'question_id'")
            qid = str(rec["question_id"])
            key = "prediction" if "prediction" in rec else "answer" if "answer" in rec else None
            if key is None:
                raise InputError(f"{path}: question {qid!r} (record {i}): no 'prediction' or 'answer' field")
            if qid in preds:
                raise InputError(f"{path}: question {qid!r} (record {i}): duplicate question id")
            preds[qid] = answer_text(rec[key], f"{path}: question {qid!r} (record {i})", key)
        refs = references_from_json(data, path) if has_refs else None
        return PredictionSet(preds, refs, "records" if has_refs else "answer-records", path)
    raise InputError(f"{path}: unrecognized predictions format (top level is {json_kind(data)})")


def fill_renamed(predictions: Mapping[str, Any], refs: ReferenceSet) -> tuple[dict[str, Any], list[str]]:
    """The predictions with each renamed reference question (``<id>#<n>``, :attr:`ReferenceSet.renamed`) that has
    no prediction of its own given the prediction of its original id, as SQuAD's ``evaluate-v1.1.py`` scores
    every record of a repeated id with that id's one prediction.

    Returns:
      ``(predictions, filled)``: a new mapping, and the renamed ids that were filled.
    """
    out = dict(predictions)
    filled = [new for new, old in refs.renamed.items() if new not in out and old in out]
    for new in filled:
        out[new] = out[refs.renamed[new]]
    return out, filled


def load_predictions(path: str | os.PathLike) -> PredictionSet:
    """Reads a predictions file (JSON).

    Raises:
      InputError: unreadable file, invalid JSON, unknown layout or malformed record.
    """
    path = os.fspath(path)
    return predictions_from_json(_read_json(path, "predictions"), path)
