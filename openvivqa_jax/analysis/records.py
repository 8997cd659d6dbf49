"""The analysed unit (:class:`QA`) and the readers that produce it.

Sources:

* a built TFDS dataset, opened exactly as training opens it (:func:`openvivqa_jax.data.datasets.load_builder`
  and :func:`~openvivqa_jax.data.pipeline.load_source`, records decoded by
  :func:`~openvivqa_jax.data.pipeline.read_records`): :func:`read_tfds`;
* a reference file in any layout :func:`openvivqa_jax.evaluation.formats.load_references` reads (OpenViVQA
  public release ``vlsp2023_*_data.json``, the older list form, ViVQA CSV, TextVQA / ST-VQA, SQuAD v1.1,
  evaluator records), with image ids taken from the same file: :func:`read_reference_file`.

Text is kept as the source stores it (TFDS builders store normalized text; release files raw text). The
statistics normalize it with :func:`openvivqa_jax.text.normalize.normalize_text`
(:func:`syllables`); the guideline rules look at the form they need.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from openvivqa_jax import jsonio
from openvivqa_jax.evaluation import formats
from openvivqa_jax.text.counts import is_punctuation, syllables  # noqa: F401 - re-exported
from openvivqa_jax.text.normalize import normalize_text
from openvivqa_jax.errors import UserError

__all__ = [
    "AnalysisInputError",
    "EmptySplitError",
    "QA",
    "syllables",
    "is_punctuation",
    "order_splits",
    "read_tfds",
    "read_reference_file",
]


class AnalysisInputError(UserError, ValueError):
    """A dataset, file or option cannot be used; the one-line message names it and what is wrong."""


class EmptySplitError(AnalysisInputError):
    """A split has no question; the message names the split and its source."""


@dataclasses.dataclass(frozen=True)
class QA:
    """One question with its references.

    Attributes:
      split: the split name (``train``, ``validation``, a file stem, ...).
      question_id: id as in the source (a string).
      image_id: id of the image, or None when the source has none (SQuAD, a ViVQA CSV without ``img_id``).
      question: the question as stored.
      answers: the reference answers as stored, ``(num_answers,)``.
      qa_type: 1 Text QA, 0 Non-text QA, -1 unknown.
      ocr: the image's OCR tokens, normalized, ``(num_ocr,)``; None when the source has no OCR.
    """

    split: str
    question_id: str
    image_id: str | None
    question: str
    answers: tuple[str, ...]
    qa_type: int
    ocr: tuple[str, ...] | None = None


_SPLIT_ORDER = {"train": 0, "training": 0, "validation": 1, "dev": 1, "val": 1, "valid": 1, "test": 2}


def order_splits(names: Sequence[str]) -> list[str]:
    """Sorts split names train, validation/dev, test, then the others alphabetically."""
    return sorted(names, key=lambda s: (_SPLIT_ORDER.get(s, 3), s))


def read_tfds(data_cfg: Any, splits: Sequence[str] | None = None,
              prepare: bool = False) -> tuple[dict[str, list[QA]], dict]:
    """Reads the splits of a built TFDS dataset through the training data source.

    Args:
      data_cfg: the ``config.data`` fields :func:`openvivqa_jax.data.datasets.load_builder` reads
        (``builder``, ``builder_config``, ``data_dir``, ``manual_dir``, ``builder_kwargs``).
      splits: split names (default: every split of the dataset).
      prepare: build the dataset when it is not built yet (as training does); otherwise a dataset that is not
        built is an error.

    Returns:
      ``({split: [QA]}, info)``; info has ``builder``, ``data_dir`` and ``skipped`` (the counters of
      :class:`openvivqa_jax.data.pipeline.SkipCounter`: answers or OCR tokens empty after normalization).

    Raises:
      AnalysisInputError: no such builder, the dataset is not built in ``data_dir``, or an unknown split.
      EmptySplitError: a split has no example.
      openvivqa_jax.data.pipeline.DatasetError, tfds_builders.readers.DatasetInputError: bad records or source
        files (one-line messages naming the record), passed on.
    """
    # heavy (JAX, grain, TFDS): only to read a built dataset, not the release files
    from openvivqa_jax.data import pipeline
    from openvivqa_jax.data.datasets import load_builder

    builder = load_builder(data_cfg, prepare=prepare)
    full = builder.info.full_name
    if not builder.is_prepared():
        name = data_cfg.builder
        bc = data_cfg.get("builder_config") or ""
        root = os.path.expanduser(data_cfg.get("data_dir") or "~/tensorflow_datasets")
        raise AnalysisInputError(
            f"dataset {full} is not built in {root}: build it (`tfds build tfds_builders/{name}"
            f"{' --config=' + bc if bc and not bc.lstrip().startswith('{') else ''} --data_dir={root} "
            "--file_format=array_record`) or pass --prepare")
    available = list(builder.info.splits)
    names = list(splits) if splits else order_splits(available)
    out: dict[str, list[QA]] = {}
    counter = pipeline.SkipCounter()
    for split in names:
        if split not in available:
            raise AnalysisInputError(f"split {split!r} not found in {full} at {builder.data_dir}; available: "
                                     f"{order_splits(available)}")
        source = pipeline.load_source(builder, split)
        if len(source) == 0:
            raise EmptySplitError(f"split {split!r} of {full} at {builder.data_dir} has no examples")
        records = pipeline.read_records(source, f"{full}/{split}", counter)
        has_ocr = "ocr" in builder.info.features
        out[split] = [QA(split, r.question_id, r.image_id, r.question, tuple(r.answers), int(r.qa_type),
                         tuple(r.ocr_texts) if has_ocr else None) for r in records]
    return out, {"builder": full, "data_dir": str(builder.data_dir), "skipped": dict(counter.counts)}


def _image_ids_json(data: Any, fmt: str) -> list[Any]:
    """Image ids in the order :func:`formats.references_from_json` adds the records (None where absent)."""
    if fmt == "openvivqa-public":
        return [rec.get("image_id") for rec in data["annotations"].values()]
    if fmt == "openvivqa-list":
        return [rec.get("image_id") for rec in data["annotations"]]
    if fmt == "records":
        return [rec.get("image_id") for rec in data]
    if fmt == "squad-v1.1" or fmt == "mapping":
        return []
    return [rec.get("image_id") for rec in data["data"]]  # TextVQA / ST-VQA


def _image_ids_csv(path: str) -> list[Any]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        if "img_id" not in (reader.fieldnames or []):
            return []
        return [row.get("img_id") for row in reader]


def read_reference_file(path: str | os.PathLike, split: str,
                        ocr: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> list[QA]:
    """Reads a release / reference file (any layout :func:`formats.load_references` reads).

    Args:
      path: the file (``.csv``: ViVQA CSV; otherwise JSON).
      split: the split name given to its records.
      ocr: optional ``{image_id: [{"text": ...}, ...]}`` (:func:`openvivqa_jax.data.ocr.load_ocr_file`); an
        image absent from it gets no tokens.

    Returns:
      The records in file order.

    Raises:
      AnalysisInputError: the file is missing or unreadable, its layout unknown, a record malformed (named), a
        record has no question, or the file has no record at all (:class:`EmptySplitError`).
    """
    path = os.fspath(path)
    try:
        refs = formats.load_references(path)
    except formats.InputError as e:
        raise AnalysisInputError(str(e)) from None
    if not refs.answers:
        raise EmptySplitError(f"split {split!r} ({path}) has no questions")
    if path.lower().endswith(".csv"):
        image_ids = _image_ids_csv(path)
    else:
        # already parsed once by load_references
        image_ids = _image_ids_json(jsonio.read_json(path, error=AnalysisInputError), refs.format)
    qids = list(refs.answers)
    if len(image_ids) != len(qids):
        image_ids = [None] * len(qids)
    out = []
    for qid, image_id in zip(qids, image_ids):
        question = refs.questions.get(qid)
        if not isinstance(question, str) or not question.strip():
            raise AnalysisInputError(f"{path}: question {qid!r}: no question text (the analysis needs questions)")
        answers = tuple(str(a) for a in refs.answers[qid] if a is not None)
        image = None if image_id is None or isinstance(image_id, (dict, list)) else str(image_id)
        tokens = None
        if ocr is not None:
            tokens = tuple(t for t in (normalize_text(str(tok.get("text", ""))) for tok in ocr.get(image, ()) ) if t) \
                if image is not None else ()
        out.append(QA(split, qid, image, question, answers, refs.qa_types.get(qid, -1), tokens))
    return out
