"""A built split's examples as records: the random-access data source of a TFDS split (images left encoded), an
example decoded into a :class:`Record` with every string normalized, the split's records read once, the counters
of what was cut or skipped, and the subsets of a split by the template kind of its questions. The first stage of
the input pipeline (:mod:`openvivqa_jax.data.pipeline`, which exports these names too).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Mapping, Sequence

import numpy as np
from absl import logging

from openvivqa_jax import jsonio
from openvivqa_jax.errors import UserError
from openvivqa_jax.jsonio import json_kind
from openvivqa_jax.text.normalize import normalize_text

__all__ = ["DatasetError", "Record", "SkipCounter", "load_source", "decode_record", "read_dictionary_file",
           "read_records", "kind_subset", "kind_weighted_indices", "as_str"]


class DatasetError(UserError, ValueError):
    """Bad input data; the message names the record, the file and what is wrong."""


@dataclasses.dataclass
class Record:
    """One decoded example (strings normalized).

    Attributes:
      index: position in the split; question_id, image_id, question, answers, qa_type as in the schema;
      ocr_texts: OCR token texts ``(n,)``; ocr_boxes: ``(n, 4)`` float32; image_bytes: encoded image
      or None; objects: optional ``{features, boxes}`` arrays; kind: the question's template kind
      (the synthetic set's ``kind`` feature; ``""`` for datasets without it).
    """

    index: int
    question_id: str
    image_id: str
    question: str
    answers: list[str]
    qa_type: int
    ocr_texts: list[str]
    ocr_boxes: np.ndarray
    image_bytes: bytes | None = None
    objects: dict | None = None
    extra: dict = dataclasses.field(default_factory=dict)
    kind: str = ""


class SkipCounter:
    """Thread-safe counters of everything truncated or skipped, logged in a summary (never silent)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.counts: collections.Counter = collections.Counter()

    def add(self, key: str, n: int = 1) -> None:
        """Adds ``n`` to counter ``key``."""
        with self._lock:
            self.counts[key] += n

    def log(self, prefix: str) -> None:
        """Logs non-zero counters."""
        if self.counts:
            logging.info("%s: %s", prefix, dict(self.counts))

    def truncation_rates(self) -> dict[str, float]:
        """Shares of the questions and answers :meth:`Preprocessor.features` encoded that were cut:
        ``question_truncation_rate`` (pieces beyond ``model.max_question_len``) and ``answer_truncation_rate``
        (target steps beyond ``model.max_answer_len``), each in [0, 1]; a rate whose count is 0 is left out."""
        out = {}
        for what, cut, total in (("question", "question_truncated", "questions_encoded"),
                                 ("answer", "answer_truncated", "answers_encoded")):
            if self.counts[total]:
                out[f"{what}_truncation_rate"] = self.counts[cut] / self.counts[total]
        return out


def as_str(x) -> str:
    """A TFDS ``Text`` value as a string: UTF-8 bytes decoded, anything else through ``str``."""
    return x.decode("utf-8") if isinstance(x, bytes) else str(x)


def load_source(builder, split: str):
    """Random-access data source of ``split`` with images left encoded (decoded by us, cached)."""
    import tensorflow_datasets as tfds  # heavy: imported when a source is opened, not with this module

    decoders = {"image": tfds.decode.SkipDecoding()} if "image" in builder.info.features else None
    try:
        return builder.as_data_source(split=split, decoders=decoders)
    except (KeyError, ValueError) as e:
        raise DatasetError(
            f"split {split!r} not found in {builder.name} at {builder.data_dir}; available: "
            f"{sorted(builder.info.splits)}") from e


def decode_record(ex: dict, index: int, source_name: str = "", counter: SkipCounter | None = None) -> Record:
    """Turns a data-source example into a :class:`Record`, normalizing every string.

    OCR tokens and answers that are empty after normalization are dropped and counted in ``counter``
    (``ocr_tokens_empty_after_normalization``, ``answers_empty_after_normalization``) when given.

    Raises:
      DatasetError: if the question is empty after normalization (names the question id and source).
    """
    qid = as_str(ex["question_id"])
    question = normalize_text(as_str(ex["question"]))
    if not question:
        raise DatasetError(f"{source_name}: question {qid!r} (example {index}) is empty after normalization")
    ocr = ex.get("ocr") or {}
    texts = [normalize_text(as_str(t)) for t in ocr.get("text", [])]
    boxes = np.asarray(ocr.get("box", np.zeros((0, 4))), np.float32).reshape(-1, 4)
    keep = [i for i, t in enumerate(texts) if t]
    if counter is not None and len(keep) < len(texts):
        counter.add("ocr_tokens_empty_after_normalization", len(texts) - len(keep))
    texts = [texts[i] for i in keep]
    boxes = boxes[keep] if len(keep) else np.zeros((0, 4), np.float32)
    objects = None
    if "objects" in ex:
        objects = {"features": np.asarray(ex["objects"]["features"], np.float32),
                   "boxes": np.asarray(ex["objects"]["boxes"], np.float32)}
    extra = {k: ex[k] for k in ("context", "dictionary") if k in ex}
    if "language" in ex:  # ISO 639-1 code (tfds_builders.common); datasets built before it have none
        extra["language"] = as_str(ex["language"])
    raw_answers = [normalize_text(as_str(a)) for a in ex.get("answers", [])]
    answers = [a for a in raw_answers if a]
    if counter is not None and len(answers) < len(raw_answers):
        counter.add("answers_empty_after_normalization", len(raw_answers) - len(answers))
    return Record(
        index=index, question_id=qid, image_id=as_str(ex.get("image_id", qid)), question=question,
        answers=answers,
        qa_type=int(ex.get("qa_type", -1)), ocr_texts=texts, ocr_boxes=boxes,
        image_bytes=ex.get("image"), objects=objects, extra=extra,
        kind=as_str(ex.get("kind", "")),
    )


def read_dictionary_file(path: str) -> tuple[str, ...]:
    """Reads a decoding dictionary (ST-VQA task 2's global dictionary): a JSON list of strings
    (``.json``) or UTF-8 text with one entry per line.

    Returns:
      The normalized non-empty entries in file order, duplicates removed.

    Raises:
      DatasetError: the file is missing or unreadable, invalid JSON, or not a list of strings
        (names the file, and the JSON line or list index).
    """
    if path.endswith(".json"):
        words = jsonio.read_json(path, what="decoding dictionary", error=DatasetError)
    else:
        try:
            with open(path, encoding="utf-8-sig") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise DatasetError(f"{path}: cannot read the decoding dictionary: {e}") from e
        words = text.splitlines()
    if path.endswith(".json"):
        if not isinstance(words, list):
            raise DatasetError(f"{path}: a JSON dictionary must be a list of strings, got {type(words).__name__}")
        for i, w in enumerate(words):
            if not isinstance(w, str):
                raise DatasetError(f"{path}: entry {i} is {json_kind(w)} ({w!r}), expected a string")
    return tuple(dict.fromkeys(w for w in (normalize_text(x) for x in words) if w))


def read_records(source, source_name: str = "", counter: SkipCounter | None = None, *,
                 keep_objects: bool = False) -> list[Record]:
    """All records of a split without image bytes, dictionaries or region features, in order: the text, OCR
    tokens and metadata (tokenizer and answer-list training, eval metadata, template kinds).

    What is left out is read again from the source where it is used, never held for the whole split: the
    ST-VQA task-2 examples' 30k-word global dictionary (:func:`openvivqa_jax.data.pipeline.eval_batches`), and
    the region features (``objects``: 50 x 2048 per question in the OpenViVQA release, about 12 GB for its train
    split).

    Args:
      source: random-access data source of one split.
      source_name: the split named in errors.
      counter: counts what decoding skips.
      keep_objects: keep ``objects`` (region features and boxes), one copy per image id shared by its questions.
    """
    out = []
    objects_of: dict[str, dict | None] = {}
    for i in range(len(source)):
        r = decode_record(source[i], i, source_name, counter)
        r.image_bytes = None
        r.extra.pop("dictionary", None)
        r.objects = objects_of.setdefault(r.image_id, r.objects) if keep_objects else None
        out.append(r)
    return out


def _check_kinds(records: Sequence[Record], field: str, named, source_name: str) -> None:
    """Raises DatasetError if the split has no kinds or ``named`` (a list or dict of kinds, the config
    ``field``'s value) names one the split does not have (names the split, the unknown kinds and the known ones)."""
    present = sorted({r.kind for r in records if r.kind})
    if not present:
        raise DatasetError(f"{source_name}: {field} {named} needs question kinds, and this split has none (the "
                           "synthetic_openvivqa builder stores them)")
    unknown = sorted(set(named) - set(present))
    if unknown:
        raise DatasetError(f"{source_name}: {field} names {unknown}, not among the split's kinds {present}")


def kind_subset(records: Sequence[Record], kinds: Sequence[str], source_name: str = "") -> list[int]:
    """Indices of the records whose template ``kind`` is one of ``kinds`` (``data.train_kinds``).

    Raises:
      DatasetError: the split has no kinds (only the synthetic builder stores them), or a kind in ``kinds``
        is not among the split's (names the split, the unknown kinds and the known ones).
    """
    _check_kinds(records, "data.train_kinds", list(kinds), source_name)
    return [r.index for r in records if r.kind in set(kinds)]


def kind_weighted_indices(records: Sequence[Record], weights: Mapping[str, int],
                          source_name: str = "") -> list[int]:
    """Training indices with each record repeated by its kind's weight (``data.train_kind_weights``).

    ``weights``: :func:`openvivqa_jax.vqa.config.parse_kind_weights` of the config string. Oversampling by
    repetition: a question of a kind with weight ``w`` appears ``w`` times per epoch of the
    shuffled stream (and its reference answer is drawn afresh at each visit); weight 0 leaves it out; kinds not
    in ``weights`` keep 1. Records stay in split order, each one's copies together (the stream shuffles them).

    Raises:
      DatasetError: the split has no kinds, ``weights`` names a kind the split does not have (names the split,
        the unknown kinds and the known ones), or every weight is 0.
    """
    _check_kinds(records, "data.train_kind_weights", dict(weights), source_name)
    out = [r.index for r in records for _ in range(int(weights.get(r.kind, 1)))]
    if not out:
        raise DatasetError(f"{source_name}: data.train_kind_weights {dict(weights)} leaves no training question")
    return out
