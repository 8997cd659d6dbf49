"""Parsing helpers shared by the VQA dataset builders (docs/design.md §3): errors, skips, splits, images, OCR.

House rule for bad input: a clear error naming the file, the record (question id or CSV row) and what is
wrong (:class:`DatasetInputError`); or, where the builder config asks for it, the record is skipped and the
skip is counted per reason (:class:`SkipCounter`) and logged with absl logging. Nothing is dropped silently.
A known annotation flaw of a release is repaired where the repair is unambiguous, counted and logged
(:func:`repair_log`, :mod:`openvivqa_jax.data.repairs`; ``BuildCounts.repairs``, the build's notes), unless the
config's ``strict`` refuses it.

The builders import this module as ``tfds_builders.readers``; when they are loaded by ``tfds build
tfds_builders/<name>`` (which imports ``<name>.<name>_dataset_builder`` with ``tfds_builders/`` on
``sys.path``), each builder first puts the repository root on ``sys.path``.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from absl import logging
from PIL import Image

from openvivqa_jax.cli import install_tfds_cli_handler
from openvivqa_jax import jsonio
from openvivqa_jax.jsonio import json_kind
from openvivqa_jax.data import images as images_lib
from openvivqa_jax.data import ocr as ocr_lib
from openvivqa_jax.data import repairs
from openvivqa_jax.text.normalize import normalize_text
from tfds_builders import common
from openvivqa_jax.errors import UserError

__all__ = [
    "DatasetInputError",
    "ImageFileError",
    "record_error",
    "ReaderConfig",
    "ReleaseConfig",
    "ReleaseRecord",
    "BuildCounts",
    "repair_log",
    "SkipCounter",
    "ErrorPolicy",
    "JsonObject",
    "read_json",
    "duplicate_keys",
    "UnknownFields",
    "split_from_filename",
    "assign_split_files",
    "release_image_dirs",
    "clean_question",
    "clean_answers",
    "find_file",
    "LoadedImage",
    "ImageCache",
    "load_image",
    "OcrSource",
    "ocr_feature",
    "boxes_to_unit",
]


class DatasetInputError(UserError, ValueError):
    """A source file has bad input; the message names the file, the record and what is wrong."""


class ImageFileError(DatasetInputError):
    """An image (or per-image feature file) is missing or cannot be decoded."""


def record_error(
    path: Any, record: str, what: str, cls: type[DatasetInputError] = DatasetInputError
) -> DatasetInputError:
    """Builds (does not raise) ``cls(f"{path}: {record}: {what}")``, the house error format: file, record
    (question id, CSV line/row, or JSON index) and what is wrong."""
    return cls(f"{path}: {record}: {what}")


@dataclasses.dataclass(eq=False)
class ReaderConfig(tfds.core.BuilderConfig):
    """Builder config fields every VQA builder here understands.

    Attributes:
        skip_missing_images: skip (count and log) questions whose image file is missing or cannot be
            decoded, or whose per-image feature file is missing/unreadable, instead of raising.
        skip_invalid_records: skip (count and log) malformed records (bad CSV row, empty question,
            empty answer list where answers are required, bad field types) instead of raising.
        num_workers: processes that decode images and run OCR at build time
            (:func:`tfds_builders.image_work.map_images`); None = the CPUs this process may use. The
            examples and their OCR tokens do not depend on it.
        strict: refuse the known annotation flaws that a build otherwise repairs (an ``answer_start`` off its
            text, a repeated id with another question, an exact duplicate: :mod:`openvivqa_jax.data.repairs`),
            each with one line naming the file and the record.
    """

    skip_missing_images: bool = False
    skip_invalid_records: bool = False
    num_workers: int | None = None
    strict: bool = False


@dataclasses.dataclass(eq=False)
class ReleaseConfig(ReaderConfig):
    """Builder config fields of the release-format builders (OpenViVQA and EVJVQA: JSON files with an
    ``images`` table and ``annotations``, :func:`tfds_builders.release_files.read_release_file`; images in folders, :func:`release_image_dirs`).

    Attributes:
        ocr_engine: ``auto`` (the OCR file if present, else the builder's fallback), ``file``, ``none`` or an
            engine (:class:`OcrSource`; each builder's docs list the ones it accepts).
        ocr_file: OCR JSON file name relative to manual_dir.
        ocr_lang: Tesseract language(s) for an OCR engine; a builder may set another default.
        split_files: ``{split: file name or list of names}`` relative to manual_dir; None = by file name.
        default_split: split of a single annotation file whose name names none.
        answers_required_splits: splits where a question without answers is an error.
        images_dir: image folder relative to manual_dir; None = search (:func:`release_image_dirs`).
    """

    ocr_engine: str = "auto"
    ocr_file: str = "ocr.json"
    ocr_lang: str = "vie"
    split_files: dict | None = None
    default_split: str = "train"
    answers_required_splits: tuple = ("train", "dev")
    images_dir: str | None = None


@dataclasses.dataclass
class ReleaseRecord:
    """One question parsed from a release annotation file (question and answers normalized); each builder's
    record adds its own fields after these.

    Attributes:
        question_id, image_id: ids as in the source file.
        filename: the image's file name from the file's ``images`` table.
        question: the normalized question.
        answers: the normalized answers, source order (``[]`` where the split has none).
    """

    question_id: str
    image_id: str
    filename: str
    question: str
    answers: list

    def missing_image(self, path: Any, record: str, image_dirs: Sequence[Path]) -> ImageFileError:
        """Builds (does not raise) the error for an image file found in none of ``image_dirs``, naming the
        annotation file ``path`` and the ``record``."""
        return record_error(path, record, f"image file {self.filename!r} (image_id {self.image_id}) not found in "
                            f"{[str(d) for d in image_dirs]}", ImageFileError)


class BuildCounts:
    """Mixin for a ``GeneratorBasedBuilder``: the per-split counts a build leaves on the builder for its logs and
    tests, empty until the split generators fill them.

    Attributes:
        skip_counts: ``{split: Counter(reason -> skipped records)}`` (:class:`SkipCounter`).
        unknown_fields: ``{split: {file: Counter(field -> records)}}`` of fields not stored
            (:class:`UnknownFields`).
        ocr_stats: counts of the OCR step (:class:`OcrSource`, dropped tokens).
        repairs: ``{split: RepairLog}`` of the annotation flaws repaired (:mod:`openvivqa_jax.data.repairs`).
    """

    def __init__(self, **kwargs):
        """Same arguments as ``tfds.core.GeneratorBasedBuilder``."""
        super().__init__(**kwargs)
        self.skip_counts: dict[str, dict[str, int]] = {}
        self.unknown_fields: dict[str, dict[str, collections.Counter]] = {}
        self.ocr_stats: dict[str, int] = {}
        self.repairs: dict[str, repairs.RepairLog] = {}

    def _repair_log(self, split: str, name: str, policy: ErrorPolicy) -> repairs.RepairLog:
        """``split``'s :class:`~openvivqa_jax.data.repairs.RepairLog` (kept in ``repairs[split]``): the config's
        ``strict``, and errors raised or skipped by ``policy``; ``name`` is shown in the log lines."""
        log = repair_log(name, policy, strict=bool(getattr(self.builder_config, "strict", False)))
        self.repairs[split] = log
        return log

    def build_notes(self) -> dict:
        """What the build repaired, skipped and did not store, per split, for the notes file beside the dataset
        (:func:`openvivqa_jax.data.build_check.write_notes`)."""
        splits = sorted(set(self.repairs) | set(self.skip_counts) | set(self.unknown_fields))
        return {split: {"repairs": self.repairs[split].as_dict() if split in self.repairs else {},
                        "skipped": dict(self.skip_counts.get(split) or {}),
                        "fields_not_stored": {f: dict(c) for f, c in (self.unknown_fields.get(split) or {}).items()}}
                for split in splits}

    def _skip_policy(self, split: str, name: str) -> tuple[SkipCounter, ErrorPolicy]:
        """``split``'s :class:`SkipCounter` (its counts kept in ``skip_counts[split]``) and the config's
        :class:`ErrorPolicy` over it; ``name`` (e.g. ``"vivqa/train"``) is shown in the log lines."""
        counter = SkipCounter(name)
        self.skip_counts[split] = counter.counts
        cfg = self.builder_config
        return counter, ErrorPolicy(counter, cfg.skip_missing_images, cfg.skip_invalid_records)

    def _field_counter(self, split: str, name: str) -> UnknownFields:
        """``split``'s :class:`UnknownFields` (its counts kept in ``unknown_fields[split]``); ``name`` is shown in
        the log lines."""
        unknown = UnknownFields(name)
        self.unknown_fields[split] = unknown.counts
        return unknown


def repair_log(name: str, policy: "ErrorPolicy", strict: bool = False) -> repairs.RepairLog:
    """A :class:`~openvivqa_jax.data.repairs.RepairLog` whose errors (a flaw refused under ``strict``, an ambiguous
    repeat) are ``policy``'s: raised, or counted and skipped; ``name`` is shown in the log lines."""
    def error(path: Any, record: str, what: str, reason: str) -> None:
        policy.handle(reason, record_error(path, record, what))

    return repairs.RepairLog(name, error, strict=strict)


class SkipCounter:
    """Counts skipped records per reason and logs the first :attr:`LOGGED` skips of each reason (warning; then
    one line saying the others are counted) and a summary (info).

    Attributes:
        counts: ``collections.Counter`` reason -> number of skipped records.
    """

    #: Skips logged one by one per reason (a folder with a tenth of a release's images skips thousands).
    LOGGED = 20

    def __init__(self, name: str):
        """Args: name: shown in log lines, e.g. ``"openvivqa/train"``."""
        self.name = name
        self.counts: collections.Counter[str] = collections.Counter()

    def skip(self, reason: str, error: Exception | str) -> None:
        """Records one skipped record and logs why (the first :attr:`LOGGED` of its reason)."""
        self.counts[reason] += 1
        if self.counts[reason] <= self.LOGGED:
            logging.warning("%s: skipped (%s): %s", self.name, reason, error)
        elif self.counts[reason] == self.LOGGED + 1:
            logging.warning("%s: more skips (%s) from here on are counted, not logged one by one (the summary gives "
                            "the total)", self.name, reason)

    def log_summary(self, total_kept: int) -> None:
        """Logs the number of kept examples and the skips per reason."""
        if self.counts:
            logging.warning("%s: kept %d examples, skipped %s", self.name, total_kept, dict(self.counts))
        else:
            logging.info("%s: kept %d examples, skipped none", self.name, total_kept)


class ErrorPolicy:
    """Raises a :class:`DatasetInputError` or, when skipping is enabled for its kind, counts it."""

    def __init__(self, counter: SkipCounter, skip_missing_images: bool, skip_invalid_records: bool):
        self.counter = counter
        self.skip_missing_images = skip_missing_images
        self.skip_invalid_records = skip_invalid_records

    def handle(self, reason: str, error: DatasetInputError) -> None:
        """Raises ``error`` unless its kind is skippable; then counts it under ``reason`` and returns.

        Raises:
            DatasetInputError: ``error`` itself when skipping is off for its kind.
        """
        skippable = self.skip_missing_images if isinstance(error, ImageFileError) else self.skip_invalid_records
        if not skippable:
            raise error
        self.counter.skip(reason, error)

    def first_time(self, seen: dict[str, Any], key: str, where: Any, *, path: Any, record: str,
                   message: str) -> bool:
        """Whether the question ``key`` (an id or a row index) is met for the first time; if so it is recorded in ``seen`` (key -> where
        it was first met) as met at ``where``. A repeat is a ``duplicate_question_id`` error,
        ``record_error(path, record, message.format(first=seen[key]))``, raised or counted (:meth:`handle`).

        Raises:
            DatasetInputError: for a repeat, unless ``skip_invalid_records``.
        """
        if key in seen:
            self.handle("duplicate_question_id", record_error(path, record, message.format(first=seen[key])))
            return False
        seen[key] = where
        return True


#: A JSON object as :func:`read_json` returns it (:class:`openvivqa_jax.jsonio.JsonObject`): a dict that keeps the
#: FIRST value of a repeated key, the repeats in ``.duplicates`` for the builder to report or skip.
JsonObject = jsonio.JsonObject
#: The keys repeated in a JSON object read by :func:`read_json` (:func:`openvivqa_jax.jsonio.duplicate_keys`).
duplicate_keys = jsonio.duplicate_keys


def read_json(path: Path) -> Any:
    """Reads a UTF-8 JSON file, a byte-order mark accepted (:func:`openvivqa_jax.jsonio.read_json`); objects come
    back as :class:`JsonObject` (first value of a repeated key kept, repeats in ``.duplicates``), so no repeated
    key is lost unseen.

    Raises:
        DatasetInputError: naming the file and, for a syntax error, the line and column.
    """
    return jsonio.read_json(path, error=DatasetInputError)


class UnknownFields:
    """Counts the fields of source records that a builder does not store, and logs them once per file.

    A field a builder does not know (``explanation``, a new ``difficulty`` column, ...) is not an error, but
    it is not dropped without a word either: :meth:`check` counts each unknown field name per file, and
    :meth:`log_summary` logs one warning per file with the counts.

    Attributes:
        counts: ``{file: Counter(field -> number of records carrying it)}``.
        units: ``{file: what a record is}``: ``"records"`` (JSON objects), ``"rows"`` (a CSV file, whose header
            names its fields once for every row).
    """

    def __init__(self, name: str):
        """Args: name: shown in the log line, e.g. ``"openvivqa/train"``."""
        self.name = name
        self.counts: dict[str, collections.Counter[str]] = {}
        self.units: dict[str, str] = {}

    def check(self, record: Mapping[str, Any], known: Iterable[str], *, path: Any, times: int = 1,
              unit: str = "records") -> list[str]:
        """Counts the keys of ``record`` outside ``known`` (``times`` records carry them: a CSV header's columns
        are in each of its ``times`` rows, ``unit="rows"``); returns them (file order)."""
        known = set(known)
        unknown = [k for k in record if k not in known]
        if unknown and times > 0:
            self.counts.setdefault(str(path), collections.Counter()).update({k: times for k in unknown})
            self.units[str(path)] = unit
        return unknown

    def totals(self) -> dict[str, int]:
        """Field -> number of records carrying it, over every file."""
        out: collections.Counter[str] = collections.Counter()
        for c in self.counts.values():
            out.update(c)
        return dict(out)

    def log_summary(self) -> None:
        """Logs one warning per file listing the unknown fields (a CSV file's: columns) and how many records (a
        CSV file's: rows) carry each."""
        for path, c in self.counts.items():
            unit = self.units.get(path, "records")
            logging.warning(
                "%s: %s: %s not stored by this builder (%s carrying each): %s",
                self.name, path, "columns" if unit == "rows" else "fields", unit, dict(sorted(c.items())))


#: Filename keyword -> split. Tokens are the lowercase alphanumeric runs of the file stem.
_SPLIT_KEYWORDS = {
    "train": "train", "training": "train",
    "dev": "dev", "val": "dev", "valid": "dev", "validation": "dev",
    "test": "test", "testing": "test",
}


def split_from_filename(path: Path, keywords: Mapping[str, str] | None = None) -> str | None:
    """Returns the split a file name names (``vlsp2023_dev_data.json`` -> ``"dev"``), or None.

    The stem is cut into lowercase alphanumeric tokens (``_``, ``-``, ``.`` separate them; letters and
    digits stay together, so ``vlsp2023`` is one token) and each token is looked up in ``keywords``
    (default: train/training -> train, dev/val/valid/validation -> dev, test/testing -> test). A stem
    naming two different splits returns None.
    """
    keywords = _SPLIT_KEYWORDS if keywords is None else keywords
    found = {keywords[t] for t in re.split(r"[^0-9a-z]+", Path(path).stem.lower()) if t in keywords}
    return found.pop() if len(found) == 1 else None


def _natural(path: Path) -> list:
    """Sort key of a path: its digit runs compared as numbers (``dev-2`` before ``dev-10``)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def assign_split_files(
    manual_dir: Path,
    pattern: str,
    split_files: Mapping[str, str | Sequence[str]] | None = None,
    exclude: Iterable[str] = (),
    default_split: str | None = "train",
    keywords: Mapping[str, str] | None = None,
) -> dict[str, list[Path]]:
    """Maps the annotation files of ``manual_dir`` to splits.

    Rules, in order:

    1. ``split_files`` given (``{"dev": "examples_data.json"}`` or lists of names, relative to
       ``manual_dir``): exactly those files; a missing one is an error. A name with ``*``, ``?`` or ``[`` is a
       glob pattern (``v2/dev-*.json``): its files in natural order (``dev-2`` before ``dev-10``); none is an
       error.
    2. Otherwise every ``manual_dir/<pattern>`` file except ``exclude`` is matched by name keyword
       (:func:`split_from_filename`). Several files of one split are read in name order.
    3. A single file whose name names no split goes to ``default_split`` (logged). Unrecognised files
       when there are several are an error that lists them and explains ``split_files``.

    Returns:
        ``{split: [paths]}``, non-empty.

    Raises:
        DatasetInputError: no annotation file, a listed file missing, or unassignable files.
    """
    manual_dir = Path(manual_dir)
    if split_files:
        out: dict[str, list[Path]] = {}
        for split, names in split_files.items():
            names = [names] if isinstance(names, str) else list(names)
            for name in names:
                if any(c in name for c in "*?["):
                    found = sorted((p for p in manual_dir.glob(name) if p.is_file()), key=_natural)
                    if not found:
                        raise DatasetInputError(f"{manual_dir}: no file matches {name!r}, the pattern of split "
                                                f"{split!r} (config split_files)")
                    out.setdefault(split, []).extend(found)
                    continue
                p = manual_dir / name
                if not p.is_file():
                    raise DatasetInputError(f"{p}: file for split {split!r} (config split_files) does not exist")
                out.setdefault(split, []).append(p)
        return out
    exclude = set(exclude)
    files = sorted(p for p in manual_dir.glob(pattern) if p.is_file() and p.name not in exclude)
    if not files:
        raise DatasetInputError(f"{manual_dir}: no annotation file matching {pattern!r} found")
    out = {}
    unknown = []
    for p in files:
        split = split_from_filename(p, keywords)
        if split is None:
            unknown.append(p)
        else:
            out.setdefault(split, []).append(p)
    if unknown:
        if len(files) == 1 and default_split:
            logging.info("%s names no split (train/dev/test); using it as split %r", unknown[0], default_split)
            out[default_split] = unknown
        else:
            raise DatasetInputError(
                f"{manual_dir}: cannot tell the split of {[p.name for p in unknown]} from the file name "
                "(expected a train/dev/val/test keyword). Rename the files or set the builder config "
                "field split_files, e.g. --config '{\"name\": \"custom\", \"split_files\": "
                "{\"train\": \"a.json\", \"dev\": \"b.json\"}}'"
            )
    return out


def release_image_dirs(manual_dir: Path, split: str, annotation: Path, *, images_dir: str | None,
                       split_dirs: Mapping[str, Sequence[str]]) -> list[Path]:
    """The folders a release-format builder searches, in order, for the images of ``split``'s annotation file.

    Args:
        manual_dir: the build's manual_dir.
        split: the split the annotation file belongs to.
        annotation: the annotation file.
        images_dir: the config's image folder relative to manual_dir; when given it is the only folder.
        split_dirs: ``{split: folder names under manual_dir}`` of the release's own image archives (e.g.
            ``{"train": ("training-images",)}``), searched after the common names.

    Returns:
        ``images/``, ``<split>/``, ``<split>_images/``, ``<split>-images/``, the split's ``split_dirs``,
        ``<annotation file stem>/`` and the annotation file's folder.
    """
    if images_dir is not None:
        return [manual_dir / images_dir]
    dirs = [manual_dir / "images", manual_dir / split, manual_dir / f"{split}_images", manual_dir / f"{split}-images"]
    dirs += [manual_dir / d for d in split_dirs.get(split, ())]
    dirs += [annotation.parent / annotation.stem, annotation.parent]
    return dirs


def clean_question(value: Any, *, path: Any, record: str) -> str:
    """Normalizes a question (docs/design.md §4).

    Raises:
        DatasetInputError: the value is not a string, or is empty after normalization.
    """
    if not isinstance(value, str):
        raise record_error(path, record, "no question" if value is None else
                           f"question is {json_kind(value)} ({value!r}), expected a string")
    q = normalize_text(value)
    if not q:
        raise record_error(path, record, f"empty question ({value!r})")
    return q


def clean_answers(value: Any, *, path: Any, record: str, required: bool) -> list[str]:
    """Normalizes a string or list of strings of answers; empty answers are an error.

    Args:
        value: ``str``, a list of ``str``, or None (no answers given).
        path, record: named in errors.
        required: an empty answer list (None, ``[]``, or only blank answers) is an error.

    Returns:
        The normalized answers in source order, duplicates kept (they carry votes, e.g. VQA accuracy).

    Raises:
        DatasetInputError: a non-string answer, a blank answer inside a list, or no answer when required.
    """
    values = [] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(values, list):
        raise record_error(path, record, f"answers must be a string or list of strings, got {json_kind(value)}")
    out = []
    for i, a in enumerate(values):
        if not isinstance(a, str):
            raise record_error(path, record, f"answer {i} is {json_kind(a)} ({a!r}), expected a string")
        na = normalize_text(a)
        if not na:
            if len(values) > 1:
                raise record_error(path, record, f"answer {i} is empty ({a!r})")
            continue
        out.append(na)
    if required and not out:
        raise record_error(path, record, f"empty answer list ({value!r}) but this split requires answers")
    return out


def find_file(name: str, dirs: Iterable[Path]) -> Path | None:
    """Returns the first ``d / name`` that is a file, or None."""
    for d in dirs:
        p = Path(d) / name
        if p.is_file():
            return p
    return None


@dataclasses.dataclass
class LoadedImage:
    """A decoded, validated image.

    Attributes:
        encoded: the bytes to store (:func:`openvivqa_jax.data.images.encode_for_storage`: the file's own
            bytes when they decode to the canonical pixels, else a lossless PNG of them).
        pil: the canonical RGB PIL image (height, width, 3), or None when the image was processed in a
            worker process (:class:`ImageCache`); :meth:`rgb` decodes ``encoded`` then.
        width, height: pixels, after the EXIF rotation.
    """

    encoded: bytes
    pil: Image.Image | None
    width: int
    height: int

    def rgb(self) -> Image.Image:
        """The canonical RGB pixels (decoded from ``encoded`` when ``pil`` is None)."""
        return self.pil if self.pil is not None else images_lib.decode_image(self.encoded).pil


def load_image(path: Path, *, source: Any, record: str) -> LoadedImage:
    """Reads and fully decodes an image file with the project's one decoder
    (:func:`openvivqa_jax.data.images.decode_image`: EXIF orientation, transparency onto white, 16-bit by
    range; bombs, empty, truncated and too-small files refused), so bad files fail here, not later.

    Raises:
        ImageFileError: naming ``source`` (the annotation file), ``record`` and the image path.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise record_error(source, record, f"cannot read image file {path}: {e}", ImageFileError) from e
    try:
        decoded = images_lib.decode_image(raw, name=str(path))
    except images_lib.ImageDecodeError as e:
        raise record_error(source, record, str(e), ImageFileError) from None
    return LoadedImage(encoded=images_lib.encode_for_storage(raw, decoded), pil=decoded.pil,
                       width=decoded.pil.width, height=decoded.pil.height)


#: Fewest images decoded (no OCR engine, e.g. with an OCR file) for which ``num_workers=None`` starts processes.
_MIN_DECODE_ONLY_POOL = 256


class LoadOrSkip:
    """:meth:`load_or_skip` for an image source with a ``load(path, *, source, record)`` method: the plain
    :class:`ImageCache` and the Beam build's stand-in that defers decoding."""

    def load_or_skip(self, path: Path | None, policy: ErrorPolicy, *, source: Any, record: str,
                     not_found: str) -> LoadedImage | None:
        """The image at ``path`` (:meth:`load`), or None when it is missing (``path`` None; ``not_found`` says
        where it was looked for) or corrupt and ``policy`` skips such images (counted as
        ``missing_or_corrupt_image``).

        Raises:
            ImageFileError: naming ``source``, ``record`` and the image, unless ``skip_missing_images``.
        """
        try:
            if path is None:
                raise record_error(source, record, not_found, ImageFileError)
            return self.load(path, source=source, record=record)
        except ImageFileError as e:
            policy.handle("missing_or_corrupt_image", e)
            return None


class ImageCache(LoadOrSkip):
    """The images of a split, decoded (and OCRed by an engine) in worker processes up front.

    :meth:`prepare` runs :func:`tfds_builders.image_work.map_images` over the split's image files
    (``num_workers`` processes, deterministic order) and gives the engine's tokens to ``ocr``
    (:meth:`OcrSource.put`); :meth:`load` then returns each image without decoding again. Files not
    prepared are loaded on demand (:func:`load_image`). Holds the stored bytes of the prepared images
    (about 40 KB per OpenViVQA photo).
    """

    def __init__(self, ocr: "OcrSource | None", num_workers: int | None = None, lang: str = "vie"):
        from tfds_builders import image_work

        self._work = image_work
        self.ocr = ocr
        engine = ocr.engine if ocr is not None and ocr.runs_engine else "none"
        self.settings = image_work.ImageSettings(ocr_engine=engine, ocr_lang=lang)
        self.num_workers = num_workers
        self._results: dict[str, Any] = {}

    def prepare(self, items: Iterable[tuple[Path, str]]) -> None:
        """Processes ``(image path, OCR key)`` pairs (unique paths, first-seen order).

        Raises:
            OcrUnavailableError: the engine's programs are not installed.
        """
        order: dict[str, str] = {}
        for path, key in items:
            if path is not None and str(path) not in self._results:
                order.setdefault(str(path), str(key))
        if not order:
            return
        workers = self.num_workers
        if workers is None and self.settings.ocr_engine == "none" and len(order) < _MIN_DECODE_ONLY_POOL:
            workers = 1  # decoding a few images takes less than starting the worker processes
        tasks = [self._work.ImageTask(p) for p in order]
        t0 = time.perf_counter()
        for task, res in zip(tasks, self._work.map_images(tasks, self.settings, workers)):
            self._results[task.path] = res
            if res.error is None and self.ocr is not None and self.settings.ocr_engine != "none":
                self.ocr.put(order[task.path], res.tokens, res.stats)
        dt = time.perf_counter() - t0
        logging.info("%d images decoded%s in %.1f s (%.2f images/s, %s workers)", len(tasks),
                     f" and OCRed ({self.settings.ocr_engine})" if self.settings.ocr_engine != "none" else "",
                     dt, len(tasks) / max(dt, 1e-9), workers or self._work.default_num_workers())

    def load(self, path: Path, *, source: Any, record: str) -> LoadedImage:
        """The image at ``path`` (prepared, else decoded now).

        Raises:
            ImageFileError: naming ``source``, ``record`` and the image file.
        """
        res = self._results.get(str(path))
        if res is None:
            return load_image(path, source=source, record=record)
        if res.error is not None:
            raise record_error(source, record, res.error, ImageFileError)
        return LoadedImage(encoded=res.encoded, pil=None, width=res.width, height=res.height)


class OcrSource:
    """Per-image OCR tokens from an OCR JSON file, Tesseract at build time, or nothing; cached per image.

    Engines: ``"file"`` (``{image_id: tokens}`` JSON, see :func:`openvivqa_jax.data.ocr.load_ocr_file`;
    an image absent from the file gets no tokens, counted as ``images_missing_from_ocr_file``),
    ``"detector+tesseract"`` and ``"tesseract"`` (:func:`openvivqa_jax.data.ocr.run_ocr`, the engines
    of predict; each image_id run once, usually in worker processes through :class:`ImageCache`),
    ``"none"``.
    ``"auto"`` resolves to ``"file"`` when the OCR file exists, else to ``auto_fallback``.
    """

    def __init__(
        self,
        engine: str,
        ocr_file: Path | None,
        *,
        auto_fallback: str = "tesseract",
        lang: str = "vie",
        min_confidence: float = ocr_lib.DEFAULT_MIN_CONFIDENCE,
        psm: int = ocr_lib.DEFAULT_PSM,
        min_side: int = ocr_lib.DEFAULT_MIN_SIDE,
        skip_invalid: bool = False,
    ):
        """``skip_invalid`` (a builder's ``skip_invalid_records``): bad tokens of the OCR file are skipped and
        counted in ``stats["skipped_invalid_tokens"]`` (:func:`openvivqa_jax.data.ocr.validate_tokens`).

        Raises: ValueError for an unknown engine; OcrFileError for a bad OCR file;
        OcrUnavailableError when Tesseract is requested but not installed (checked up front)."""
        if engine == "auto":
            engine = "file" if ocr_file is not None and Path(ocr_file).is_file() else auto_fallback
        if engine not in ("file", *ocr_lib.ENGINES):
            raise ValueError(f"unknown OCR engine {engine!r}; expected auto, file, {', '.join(ocr_lib.ENGINES)}")
        self.engine = engine
        self.stats: dict[str, int] = {}
        self._summarized: dict[str, int] = {}  # stats at the previous log_summary
        self._kwargs = dict(lang=lang, min_confidence=min_confidence, psm=psm, min_side=min_side)
        # Non-default single-pass Tesseract settings (a builder config's ocr_psm, ...) run run_tesseract
        # itself; the defaults run the `tesseract` engine of predict (four passes, merged).
        self._custom_tesseract = (min_confidence, psm, min_side) != (
            ocr_lib.DEFAULT_MIN_CONFIDENCE, ocr_lib.DEFAULT_PSM, ocr_lib.DEFAULT_MIN_SIDE)
        self._cache: dict[str, list[dict]] = {}
        if engine == "file":
            if ocr_file is None or not Path(ocr_file).is_file():
                raise ocr_lib.OcrFileError(f"{ocr_file}: OCR file not found (ocr_engine='file')")
            self._cache = ocr_lib.load_ocr_file(ocr_file, stats=self.stats, skip_invalid=skip_invalid)
            self.ocr_file = Path(ocr_file)
            logging.info("OCR from %s (%d images)", ocr_file, len(self._cache))
        elif engine != "none":
            ocr_lib.check_engine(engine, lang)
            logging.info("OCR with %s (lang %s)", engine, lang)

    @property
    def runs_engine(self) -> bool:
        """Whether tokens come from running an OCR engine on the images (not a file, not none)."""
        return self.engine in ocr_lib.ENGINES and self.engine != "none"

    def put(self, image_id: str, tokens: list[dict], stats: Mapping[str, int] | None = None) -> None:
        """Stores the engine's tokens of ``image_id`` (computed elsewhere, e.g. in a worker process)."""
        if image_id not in self._cache:
            self._cache[image_id] = tokens
            for key, n in (stats or {}).items():
                self.stats[key] = self.stats.get(key, 0) + n

    def get(self, image_id: str, image: Callable[[], Any] | Any) -> list[dict]:
        """Returns the tokens of ``image_id``; ``image`` (or a thunk returning it) is OCRed on a cache miss."""
        if self.engine == "none":
            return []
        if image_id in self._cache:
            return self._cache[image_id]
        if self.engine == "file":
            self.stats["images_missing_from_ocr_file"] = self.stats.get("images_missing_from_ocr_file", 0) + 1
            logging.warning("%s: no OCR tokens for image %r; using none", self.ocr_file, image_id)
            self._cache[image_id] = []
            return []
        img = image() if callable(image) else image
        if isinstance(img, LoadedImage):
            img = img.rgb()
        if self.engine == "tesseract" and self._custom_tesseract:
            tokens = ocr_lib.split_copyable(ocr_lib.run_tesseract(img, stats=self.stats, **self._kwargs), self.stats)
        else:
            tokens = ocr_lib.run_ocr(img, self.engine, lang=self._kwargs["lang"], stats=self.stats)
        self._cache[image_id] = tokens
        return tokens

    def log_summary(self, name: str) -> None:
        """Logs the engine and the token counters (kept/dropped per reason) counted since the previous summary:
        one builder reads its splits one after the other, so each split's line counts that split's images
        (:attr:`stats` keeps the totals)."""
        since = self._summarized
        delta = {k: v - since.get(k, 0) for k, v in self.stats.items() if v - since.get(k, 0)}
        self._summarized = dict(self.stats)
        logging.info("%s: OCR engine %s, stats %s", name, self.engine, delta)


def ocr_feature(tokens: Sequence[Mapping[str, Any]]) -> dict:
    """Tokens -> the ``ocr`` feature value (``text`` (num_ocr,), ``box`` (num_ocr, 4), ``score`` (num_ocr,))."""
    return ocr_lib.tokens_to_arrays(tokens) if tokens else common.empty_ocr()


def boxes_to_unit(
    boxes: np.ndarray, width: float, height: float, *, source: Any, record: str, field: str
) -> np.ndarray:
    """Converts boxes to xyxy in [0, 1].

    Args:
        boxes: ``(n, 4)`` xyxy, ``(n, 8)`` or ``(n, 4, 2)`` quadrilaterals (x, y per corner); in pixels or
            already normalized. Pixels are detected by any coordinate > 1 (a tolerance of 1e-3).
        width, height: the image size in pixels used to divide pixel boxes.
        source, record, field: named in errors.

    Returns:
        float32 ``(n, 4)`` xyxy clipped to ``[0, 1]`` (quadrilaterals -> their axis-aligned bounds).

    Raises:
        DatasetInputError: a wrong shape, non-finite values, or x0 > x1 / y0 > y1.
    """
    b = np.asarray(boxes, dtype=np.float64)
    if b.size == 0:
        return np.zeros((0, 4), np.float32)
    if b.ndim == 3 and b.shape[1:] == (4, 2):
        b = b.reshape(len(b), 8)
    if b.ndim != 2 or b.shape[1] not in (4, 8):
        raise record_error(source, record, f"{field} has shape {b.shape}, expected (n, 4), (n, 8) or (n, 4, 2)")
    if not np.all(np.isfinite(b)):
        raise record_error(source, record, f"{field} has non-finite values")
    if b.shape[1] == 8:
        xs, ys = b[:, 0::2], b[:, 1::2]
        b = np.stack([xs.min(1), ys.min(1), xs.max(1), ys.max(1)], axis=1)
    if np.any(b[:, 0] > b[:, 2]) or np.any(b[:, 1] > b[:, 3]):
        raise record_error(source, record, f"{field} has boxes with x0 > x1 or y0 > y1 (expected xyxy)")
    if b.max() > 1.0 + 1e-3:
        b = b / np.array([width, height, width, height], np.float64)
    return np.clip(b, 0.0, 1.0).astype(np.float32)


# Under the ``tfds build`` command line a user's error prints one ``error: <Class>: <message>`` line, as in
# the main job (an absl exception handler; nothing is patched outside the tfds command line).
install_tfds_cli_handler()
