"""TFDS builder for any folder of photos with a CSV or JSON file of (image file, question, answer) rows: a user's
own data, trained without writing a builder (docs/datasets.md, "Your own photos").

Layout of the manual folder::

    <manual_dir>/train.csv               or train.json (required)
    <manual_dir>/validation.csv          or .json; optional (also dev.*, val.*)
    <manual_dir>/test.csv                or .json; optional
    <manual_dir>/<any path>/<photo>      PNG, JPEG (or any format PIL reads), any size, in any subfolders
    <manual_dir>/ocr.json                optional OCR tokens {image path: [{text, box: [x0,y0,x1,y1] in 0-1, score}]}

Annotation files are the ``*.csv`` and ``*.json`` files at the top of the folder (except the OCR file, and names
starting with ``.`` or ``~$``); each goes to the split a train/dev/val/validation/test keyword in its name
names, a single file naming none goes to ``train``, and the config field ``split_files`` chooses explicitly.
Rows and their columns: :mod:`tfds_builders.vqa_folder.annotation_rows`. An image path is relative to the folder,
else to its ``images/`` subfolder; a path that differs from a file's only in Unicode normalization (macOS writes
decomposed accents) is found, one that differs in case is an error that names the file.

Splits: ``train``, ``validation`` and ``test``. Where the validation or test file is missing, the builder holds
out ``held_out_fraction`` (default 10%, at least one) of the train split's images for each, with all their
questions, so that no photo is on both sides: the images sorted by the SHA-256 of their path, the first ones
to validation, the next to test (deterministic; logged). A train split too small to keep an image after that is
an error; ``held_out_fraction=0`` holds out nothing (the trainer then asks for the missing split).

Schema: the common VQA features (:func:`tfds_builders.common.vqa_features`): ``image_id`` is the image path as
written, ``question_id`` the given id or ``<file name>:<line>`` (CSV) / ``<file name>:<index>`` (JSON),
``qa_type`` the ``qa_type`` column (-1 when absent), ``language`` the row's language (``vi``, ``en``, ``ja``),
``kind`` the ``kind`` column (``""`` when absent; the evaluation scores each kind apart).

OCR (config ``ocr_engine``): ``auto`` = ``manual_dir/ocr.json`` when present, else none (config ``default``);
``tesseract`` and ``detector+tesseract`` (the engines of ``predict``) run at build time, once per image
(configs ``tesseract`` and ``detector_tesseract``, Tesseract ``vie+eng``).

Per-image work (decode, stored bytes, OCR engine) runs per image file with
:func:`tfds_builders.image_work.process_image`, in ``num_workers`` local processes or, with Beam options, on
Apache Beam (:mod:`tfds_builders.beam_build`).

Bad input is one :class:`tfds_builders.readers.DatasetInputError` line naming the annotation file and the row:
a bad row (:mod:`~tfds_builders.vqa_folder.annotation_rows`), a repeated question id, a missing image file or one
that does not decode (:class:`~tfds_builders.readers.ImageFileError`). ``skip_invalid_records`` /
``skip_missing_images`` skip them instead, counted per reason in ``Builder.skip_counts[split]`` and logged.
Columns the builder does not store are counted per file (``Builder.unknown_fields[split]``) and logged once; the
questions per language are in ``Builder.language_counts[split]``.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import posixpath
import sys
import unicodedata
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds
from absl import logging

try:
    from tfds_builders import beam_build, common, image_work, readers
except ImportError:  # loaded by `tfds build tfds_builders/vqa_folder` as `vqa_folder.vqa_folder_dataset_builder`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tfds_builders import beam_build, common, image_work, readers
from . import annotation_rows  # relative: `tfds build` loads this package as `vqa_folder`

#: File-name keyword -> split (:func:`tfds_builders.readers.split_from_filename`).
SPLIT_KEYWORDS = {
    "train": "train", "training": "train",
    "dev": "validation", "val": "validation", "valid": "validation", "validation": "validation",
    "test": "test", "testing": "test",
}
#: The splits held out of train when their file is missing, in this order.
HELD_OUT_SPLITS = ("validation", "test")


@dataclasses.dataclass(eq=False)
class VqaFolderConfig(readers.ReaderConfig):
    """Config of the folder builder (module doc); the fields of :class:`tfds_builders.readers.ReaderConfig`, and:

    Attributes:
        ocr_engine: ``auto`` (``ocr_file`` if present, else none), ``file``, ``tesseract``,
            ``detector+tesseract`` or ``none``.
        ocr_file: OCR JSON file name relative to manual_dir, keyed by the image paths of the annotation files.
        ocr_lang: Tesseract language(s) of the OCR engines.
        language: language of rows without a ``language`` column: ``vi``, ``en``, ``ja`` or ``auto``
            (:func:`tfds_builders.vqa_folder.annotation_rows.detect_language`).
        answer_separator: splits a CSV answer cell into several reference answers; ``""``: never split.
        held_out_fraction: share of the train images held out as validation and as test when their files are
            missing (module doc); 0: none.
        split_files: ``{split: file name or list of names}`` relative to manual_dir; None = by file name.
        answers_required_splits: splits where a row without an answer is an error.
    """

    ocr_engine: str = "auto"
    ocr_file: str = "ocr.json"
    ocr_lang: str = "vie+eng"
    language: str = "auto"
    answer_separator: str = "|"
    held_out_fraction: float = 0.1
    split_files: dict | None = None
    answers_required_splits: tuple = ("train", "validation", "test")


def annotation_files(manual_dir: Path, cfg: VqaFolderConfig) -> dict[str, list[Path]]:
    """The annotation files of ``manual_dir`` per split (module doc).

    Raises:
        DatasetInputError: no annotation file, a listed file missing or not CSV/JSON, or files whose split the
            name does not tell.
    """
    if cfg.split_files:
        files = readers.assign_split_files(manual_dir, "*", split_files=cfg.split_files)
        for paths in files.values():
            for p in paths:
                if p.suffix.lower() not in annotation_rows.ANNOTATION_SUFFIXES:
                    raise readers.DatasetInputError(f"{p}: an annotation file must be .csv or .json (config split_files)")
        return files
    top = [p for p in manual_dir.iterdir() if p.is_file()]
    names = {p.name for p in top if p.suffix.lower() in annotation_rows.ANNOTATION_SUFFIXES and p.name != cfg.ocr_file
             and not p.name.startswith((".", "~$"))}
    if not names:
        raise readers.DatasetInputError(
            f"{manual_dir}: no annotation file: expected train.csv or train.json (and optionally validation.* and "
            "test.*) at the top of this folder, with the columns image,question,answer")
    return readers.assign_split_files(manual_dir, "*", exclude={p.name for p in top} - names, default_split="train",
                                      keywords=SPLIT_KEYWORDS)


class ImageFinder:
    """Finds the image files of annotation rows in the manual folder (module doc)."""

    def __init__(self, manual_dir: Path):
        """Args: manual_dir: the folder; paths are looked up in it, then in its ``images/`` subfolder."""
        self.manual_dir = Path(manual_dir)
        self.dirs = [self.manual_dir, self.manual_dir / "images"]
        self._found: dict[str, Path | None] = {}
        self._folded: dict[str, list[str]] | None = None  # folded path -> files, built at the first miss
        self._by_name: dict[str, list[str]] = {}  # folded file name -> files

    def find(self, name: str) -> Path | None:
        """The file of the image path ``name`` (``/``-separated), in its NFC or NFD form too; None if none."""
        if name not in self._found:
            self._found[name] = next(
                (d / form for form in dict.fromkeys([name, unicodedata.normalize("NFC", name),
                                                     unicodedata.normalize("NFD", name)])
                 for d in self.dirs if (d / form).is_file()), None)
        return self._found[name]

    def _fold(self, name: str) -> str:
        return unicodedata.normalize("NFC", name).casefold()

    def missing(self, name: str, *, source: Path, record: str) -> readers.ImageFileError:
        """Builds (does not raise) the error of an image path found nowhere. It names a file whose path differs
        only in case, else the files of that name in other subfolders (a CSV of bare file names)."""
        if self._folded is None:
            self._folded, self._by_name = collections.defaultdict(list), collections.defaultdict(list)
            for root, _, files in os.walk(self.manual_dir):
                for f in files:
                    rel = Path(root, f).relative_to(self.manual_dir).as_posix()
                    self._folded[self._fold(rel)].append(rel)
                    if rel.startswith("images/"):
                        self._folded[self._fold(rel[len("images/"):])].append(rel)
                    self._by_name[self._fold(f)].append(rel)
        near = self._folded.get(self._fold(name))
        elsewhere = sorted(self._by_name.get(self._fold(posixpath.basename(name)), []))
        if near:
            hint = f"; did you mean {near[0]!r}? (file names are case-sensitive)"
        elif elsewhere:
            more = f" and {len(elsewhere) - 3} more" if len(elsewhere) > 3 else ""
            hint = (f"; a file of that name is at {', '.join(map(repr, elsewhere[:3]))}{more}: write the path from "
                    "the folder, e.g. " + repr(elsewhere[0]))
        else:
            hint = ""
        return readers.record_error(
            source, record, f"image file {name!r} not found in {self.manual_dir} (nor in its images/ folder){hint}",
            readers.ImageFileError)


def _first_ids(rows: list[annotation_rows.Row], policy: readers.ErrorPolicy) -> list[annotation_rows.Row]:
    """``rows`` without repeats of a question id (an error naming both places, or counted under
    ``skip_invalid_records``: the first is kept)."""
    seen: dict[str, str] = {}
    return [r for r in rows if policy.first_time(seen, r.question_id, f"{r.source.name} {r.record}", path=r.source,
                                                 record=r.record, message="question id repeated (first at {first})")]


def _with_images(rows: list[annotation_rows.Row], finder: ImageFinder,
                 policy: readers.ErrorPolicy) -> list[annotation_rows.Row]:
    """``rows`` whose image file exists; a missing one is an error naming the row, or counted under
    ``skip_missing_images`` (before the held-out splits are drawn, so that they hold only images that exist)."""
    kept = []
    for r in rows:
        if finder.find(r.image) is None:
            policy.handle("missing_or_corrupt_image", finder.missing(r.image, source=r.source, record=r.record))
        else:
            kept.append(r)
    return kept


def _image_order(image: str) -> str:
    return hashlib.sha256(image.encode("utf-8")).hexdigest()


def hold_out(rows: dict[str, list[annotation_rows.Row]], fraction: float) -> tuple[dict, dict]:
    """Holds out train images as the validation and test splits that have no file (module doc).

    Args:
        rows: ``{split: rows}`` as read from the files.
        fraction: share of the train images for each missing split (at least one image each); 0: none.

    Returns:
        ``(rows, held)``: the splits after holding out, and ``{split: (images, questions)}`` of the held-out ones.

    Raises:
        DatasetInputError: the train split would keep no image.
    """
    missing = [s for s in HELD_OUT_SPLITS if s not in rows]
    if not missing or fraction <= 0 or "train" not in rows:
        return rows, {}
    train = rows["train"]
    images = sorted({r.image for r in train}, key=_image_order)
    k = max(1, int(fraction * len(images) + 0.5))
    if len(images) - k * len(missing) < 1:
        raise readers.DatasetInputError(
            f"{train[0].source if train else 'train'}: the train split has {len(images)} image(s) ({len(train)} "
            f"questions), too few to hold out {' and '.join(missing)} ({k} image(s) each) and train on the rest; "
            f"add photos, or give {' and '.join(s + '.csv' for s in missing)}")
    out, held = dict(rows), {}
    for j, split in enumerate(missing):
        chosen = set(images[j * k:(j + 1) * k])
        out[split] = [r for r in train if r.image in chosen]
        held[split] = (len(chosen), len(out[split]))
        logging.warning("vqa_folder: no %s file; holding out %d of the %d train images (%d questions) as %s (by a "
                        "hash of the image path; give a %s.csv or .json file to choose)", split, len(chosen),
                        len(images), len(out[split]), split, split)
    rest = set(images[k * len(missing):])
    out["train"] = [r for r in train if r.image in rest]
    return out, held


class Builder(readers.BuildCounts, beam_build.BeamWhenAsked, tfds.core.GeneratorBasedBuilder):
    """Any folder of photos with CSV or JSON annotation rows (module doc)."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.0.0": "Initial release: CSV/JSON rows, images in any subfolder, held-out splits, OCR.",
                     "1.1.0": "The kind column: each question's kind, for scores per kind."}
    BUILDER_CONFIGS = [
        VqaFolderConfig(name="default", description="Images; OCR from ocr.json if present, else none."),
        VqaFolderConfig(name="tesseract", description="Images + Tesseract OCR (vie+eng) at build time.",
                        ocr_engine="tesseract"),
        VqaFolderConfig(name="detector_tesseract", ocr_engine="detector+tesseract",
                        description="Images + OCR at build time: DB text detector, then Tesseract (vie+eng) per line."),
    ]
    DEFAULT_CONFIG_NAME = "default"
    MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Put your photos and one annotation file per split in one folder (docs/datasets.md, "Your own photos"):

  <manual_dir>/train.csv            columns image,question,answer (optional: question_id, language, qa_type,
                                    kind);
                                    or train.json: [{"image": ..., "question": ..., "answer": ...}, ...]
  <manual_dir>/validation.csv       optional (dev.csv, val.csv); missing: 10% of the train images held out
  <manual_dir>/test.csv             optional; missing: another 10% of the train images held out
  <manual_dir>/photos/cat.jpg       PNG or JPEG, any size, any subfolder; the image column holds photos/cat.jpg
  <manual_dir>/ocr.json             optional {image path: [{text, box: [x0,y0,x1,y1] in 0-1, score}]}

Then: python -m openvivqa_jax.main --config configs/folder/mlpag.py --workdir runs/my_photos \\
          --config.data.manual_dir=<manual_dir>
(or: tfds build tfds_builders/vqa_folder --config default --manual_dir=<manual_dir> --file_format=array_record)
"""

    def __init__(self, **kwargs):
        """Same arguments as ``tfds.core.GeneratorBasedBuilder``; adds the counts of
        :class:`tfds_builders.readers.BuildCounts`, ``language_counts`` (``{split: {language: questions kept}}``)
        and ``held_out`` (``{split: (images, questions)}`` of the splits held out of train)."""
        super().__init__(**kwargs)
        self.language_counts: dict[str, dict[str, int]] = {}
        self.held_out: dict[str, tuple[int, int]] = {}

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(features=common.vqa_features(with_image=True, with_kind=True),
                                              homepage="https://github.com/hieunghia-pat/OpenViVQA-dataset")

    def _check_config(self) -> str:
        """Checks the config's values; returns its ``language`` as an ISO 639-1 code (or ``auto``).

        Raises:
            DatasetInputError: an unknown language or a held-out fraction outside [0, 0.5).
        """
        cfg = self.builder_config
        if not 0 <= cfg.held_out_fraction < 0.5:
            raise readers.DatasetInputError(f"config {cfg.name}: held_out_fraction={cfg.held_out_fraction} is not "
                                            "in [0, 0.5)")
        if cfg.language == "auto":
            return "auto"
        return annotation_rows.parse_language(cfg.language, path=f"config {cfg.name}", record="language")

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        cfg = self.builder_config
        manual_dir = Path(dl_manager.manual_dir)
        language = self._check_config()
        files = annotation_files(manual_dir, cfg)
        self._ocr = readers.OcrSource(cfg.ocr_engine, manual_dir / cfg.ocr_file, auto_fallback="none",
                                      lang=cfg.ocr_lang, skip_invalid=cfg.skip_invalid_records)
        self.ocr_stats = self._ocr.stats
        # The per-image work: decode, stored bytes, and the OCR engine unless tokens come from a file.
        engine = "none" if self._ocr.engine in ("file", "none") else self._ocr.engine
        self._settings = image_work.ImageSettings(ocr_engine=engine, ocr_lang=cfg.ocr_lang)
        logging.info("vqa_folder/%s: split files %s", cfg.name, {k: [p.name for p in v] for k, v in files.items()})
        self._policies: dict[str, tuple[readers.SkipCounter, readers.ErrorPolicy]] = {}
        finder = ImageFinder(manual_dir)
        rows = {}
        for split, paths in files.items():
            counter, policy = self._policies[split] = self._skip_policy(split, f"vqa_folder/{split}")
            unknown = self._field_counter(split, f"vqa_folder/{split}")
            read = [r for p in paths for r in annotation_rows.parse_file(
                p, answers_required=split in cfg.answers_required_splits, policy=policy, unknown=unknown,
                default_language=language, separator=cfg.answer_separator)]
            rows[split] = _with_images(_first_ids(read, policy), finder, policy)
            unknown.log_summary()
        rows, self.held_out = hold_out(rows, cfg.held_out_fraction)
        return {split: self._generate_examples(split, split_rows, finder) for split, split_rows in rows.items()}

    def _generate_examples(self, split: str, rows: list[annotation_rows.Row], finder: ImageFinder):
        """The split's examples: an iterator, or a Beam ``PTransform`` when the build was given Beam options
        (:mod:`tfds_builders.beam_build`); the per-image work runs per image file."""
        cfg = self.builder_config
        name = f"vqa_folder/{split}"
        if split not in self._policies:  # a split held out of train
            self._policies[split] = self._skip_policy(split, name)
        counter, policy = self._policies[split]
        planner = beam_build.GroupPlanner()
        for row in rows:  # every image was found (_with_images)
            planner.add(finder.find(row.image), row.image, row.source, row.question_id, row.record, {
                "image_id": row.image,
                "question_id": row.question_id,
                "question": row.question,
                "answers": row.answers,
                "qa_type": np.int32(row.qa_type),
                "language": row.language,
                "kind": row.kind,
            })
        groups = planner.groups(self._ocr)
        languages: collections.Counter[str] = collections.Counter()
        self.language_counts[split] = languages
        workers = cfg.num_workers
        if workers is None and self._settings.ocr_engine == "none" and len(groups) < readers._MIN_DECODE_ONLY_POOL:
            workers = 1  # decoding a few images takes less than starting the worker processes
        examples = beam_build.generate(
            groups, self._settings, use_beam=self.use_beam, skip_missing_images=cfg.skip_missing_images, name=name,
            num_workers=workers, policy=policy, ocr_stats=self.ocr_stats)
        if self.use_beam:
            for g in groups:
                languages.update(ex["language"] for _, _, ex in g.records)
            logging.info("%s: %d questions on %d images go to Beam (bad images are counted in the Beam counter "
                         "%s/missing_or_corrupt_image)", name, len(planner), len(groups), name)
            return self._expect(split, examples, planned=len(planner))
        return self._expect(split, self._counted(name, examples, counter, languages))

    def _counted(self, name: str, examples, counter: readers.SkipCounter, languages: collections.Counter):
        kept = 0
        for key, example in examples:
            kept += 1
            languages[example["language"]] += 1
            yield key, example
        counter.log_summary(kept)
        logging.info("%s: questions per language %s", name, dict(sorted(languages.items())))
        self._ocr.log_summary(name)
