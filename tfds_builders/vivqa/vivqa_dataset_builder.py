"""TFDS builder for ViVQA (Tran et al., "ViVQA: Vietnamese Visual Question Answering", PACLIC 2021),
read from the manually downloaded CSVs (kh4nh12/ViVQA) and the COCO 2014 images.

Source format: ``train.csv`` / ``test.csv`` with the header ``,question,answer,img_id,type``: the unnamed
first column is the row index (used as ``question_id``, unique within a split), ``img_id`` a COCO 2014
image id, ``type`` the question type 0-3 (0 object, 1 number, 2 colour, 3 location). Other ``*.csv`` files
are mapped to splits by a train/dev/val/test keyword in the file name (config ``split_files`` to choose).

Schema: the common VQA features (:func:`tfds_builders.common.vqa_features`) plus ``question_type``
(int32, the CSV ``type``; -1 where the column is absent). ``qa_type`` is -1 (ViVQA does not say whether a
question needs scene text). ``answers`` is the single CSV answer. ``image_id`` is the COCO id as a string.

Images: ``COCO_train2014_%012d.jpg`` or ``COCO_val2014_%012d.jpg`` (ViVQA draws from both), searched in
``image_dirs`` (config; default ``train2014/``, ``val2014/``, ``images/train2014/``, ``images/val2014/``,
``images/``, ``coco/train2014/``, ``coco/val2014/`` and manual_dir itself), also as ``<img_id>.jpg``.

OCR: ``manual_dir/ocr.json`` (``{image_id: [{text, box, score}]}``) if present, else none (config
``default``); the ``tesseract`` config runs Tesseract (``vie+eng``, COCO photos carry English text).

Bad input raises :class:`tfds_builders.readers.DatasetInputError` naming the file, the line and the row
index: wrong number of fields, non-integer ``img_id``/``type``, empty question, empty answer (required in
``answers_required_splits``, default train and test), missing or corrupt image, a repeated row index with the
same image and question and another answer;
``skip_invalid_records`` / ``skip_missing_images`` skip them instead (counted in ``Builder.skip_counts``
and logged). A repeated row index with another image or question is renamed ``<index>#<n>``, an exact duplicate
row dropped, and rows with the same image, question and answer as another index counted (kept): each in
``Builder.repairs[split]``, logged and written to the build's notes (:mod:`openvivqa_jax.data.repairs`; the
config field ``strict`` refuses the flaws). The first 300 rows of the release's train.csv hold 3 rows with the
same image, question and answer as an earlier row.
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds
from absl import logging

try:
    from tfds_builders import beam_build, common, readers
except ImportError:  # loaded by `tfds build tfds_builders/vivqa` as `vivqa.vivqa_dataset_builder`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tfds_builders import beam_build, common, readers

from openvivqa_jax.data import repairs

_CITATION = """\
@inproceedings{tran2021vivqa,
  title={ViVQA: Vietnamese Visual Question Answering},
  author={Tran, Khanh Quoc and Nguyen, An Trong and Le, An Tran-Hoai and Nguyen, Kiet Van},
  booktitle={Proceedings of the 35th Pacific Asia Conference on Language, Information and Computation},
  year={2021}
}
"""

REQUIRED_COLUMNS = ("question", "answer", "img_id")


@dataclasses.dataclass(eq=False)
class VivqaConfig(readers.ReaderConfig):
    """Config of the ViVQA builder (module doc).

    Attributes:
        image_dirs: folders (relative to manual_dir) searched for the COCO images, in order.
        ocr_engine: ``auto`` (ocr.json if present, else none), ``file``, ``detector+tesseract``,
            ``tesseract`` (:func:`openvivqa_jax.data.ocr.run_ocr`) or ``none``.
        ocr_file, ocr_lang: OCR JSON file name; Tesseract language(s).
        split_files: ``{split: csv name(s)}``; None = ``*.csv`` by file-name keyword.
        answers_required_splits: splits where an empty answer is an error.
    """

    image_dirs: tuple = (
        "train2014", "val2014", "images/train2014", "images/val2014", "images", "coco/train2014",
        "coco/val2014", ".",
    )
    ocr_engine: str = "auto"
    ocr_file: str = "ocr.json"
    ocr_lang: str = "vie+eng"
    split_files: dict | None = None
    answers_required_splits: tuple = ("train", "test", "dev")


def coco_filenames(img_id: int) -> list[str]:
    """The file names a COCO 2014 image id may have: train, val, then a bare ``<id>.jpg``."""
    return [f"COCO_train2014_{img_id:012d}.jpg", f"COCO_val2014_{img_id:012d}.jpg", f"{img_id}.jpg"]


@dataclasses.dataclass
class _Row:
    question_id: str
    img_id: int
    question: str
    answers: list
    question_type: int
    line: int


def parse_csv(path: Path, *, answers_required: bool, policy: readers.ErrorPolicy) -> list[_Row]:
    """Parses one ViVQA CSV.

    Args:
        path: the CSV (UTF-8, optional BOM).
        answers_required: an empty answer is an error.
        policy: raises record errors, or counts and skips them.

    Returns:
        Rows in file order with normalized question and answer.

    Raises:
        DatasetInputError: a missing header column (always), or a bad row (unless skipped), naming the
            file, the line number and the row index.
    """
    with Path(path).open(encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise readers.DatasetInputError(f"{path}: empty file, expected the header ,question,answer,img_id,type")
        except csv.Error as e:
            raise readers.DatasetInputError(f"{path}: line 1: malformed CSV header: {e}") from e
        cols = {name.strip(): i for i, name in enumerate(header)}
        missing = [c for c in REQUIRED_COLUMNS if c not in cols]
        if missing:
            raise readers.DatasetInputError(
                f"{path}: header {header} lacks columns {missing} (expected ,question,answer,img_id,type)")
        index_col = cols.get("", None)
        unstored = [c for c in cols if c not in ("", *REQUIRED_COLUMNS, "type")]
        if unstored:  # not an error, but never dropped without a word
            logging.warning("%s: columns not stored by this builder: %s", path, unstored)
        rows = []
        data_row = 0
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                policy.handle("malformed_row", readers.record_error(path, f"line {reader.line_num}", f"malformed CSV: {e}"))
                continue
            line = reader.line_num
            if not fields or all(not x.strip() for x in fields):
                continue  # blank line
            row_id = fields[index_col].strip() if index_col is not None and index_col < len(fields) else str(data_row)
            data_row += 1
            record = f"line {line} (row {row_id})"
            try:
                if len(fields) != len(header):
                    raise readers.record_error(
                        path, record, f"expected {len(header)} fields {header}, got {len(fields)}: {fields}")
                if not row_id:
                    raise readers.record_error(path, record, "empty row index")
                try:
                    img_id = int(fields[cols["img_id"]].strip())
                except ValueError:
                    raise readers.record_error(
                        path, record, f"img_id {fields[cols['img_id']]!r} is not an integer COCO id") from None
                qtype = -1
                if "type" in cols:
                    try:
                        qtype = int(fields[cols["type"]].strip())
                    except ValueError:
                        raise readers.record_error(
                            path, record, f"type {fields[cols['type']]!r} is not an integer") from None
                question = readers.clean_question(fields[cols["question"]], path=path, record=record)
                answers = readers.clean_answers(
                    fields[cols["answer"]], path=path, record=record, required=answers_required)
            except readers.DatasetInputError as e:
                policy.handle("invalid_record", e)
                continue
            rows.append(_Row(row_id, img_id, question, answers, qtype, line))
    return rows


class Builder(readers.BuildCounts, beam_build.BeamWhenAsked, tfds.core.GeneratorBasedBuilder):
    """ViVQA from its CSVs and the COCO 2014 images (module doc). With Beam options (``tfds build ...
    --beam_pipeline_options=...``) the per-image work runs on Apache Beam (:mod:`tfds_builders.beam_build`)."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {
        "1.1.0": "Adds the language feature (ISO 639-1 code of the question and answers).",
        "1.0.0": "Initial release."}
    BUILDER_CONFIGS = [
        VivqaConfig(name="default", description="Images; OCR from ocr.json if present, else none."),
        VivqaConfig(name="tesseract", description="Images + Tesseract OCR (vie+eng) at build time.", ocr_engine="tesseract"),
    ]
    DEFAULT_CONFIG_NAME = "default"
    MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Download train.csv and test.csv of ViVQA (https://github.com/kh4nh12/ViVQA) and the COCO 2014 train and
val images (https://cocodataset.org: train2014.zip, val2014.zip), and place:

  <manual_dir>/train.csv
  <manual_dir>/test.csv
  <manual_dir>/train2014/COCO_train2014_000000xxxxxx.jpg
  <manual_dir>/val2014/COCO_val2014_000000xxxxxx.jpg
  <manual_dir>/ocr.json        optional {image_id: [{text, box: [x0,y0,x1,y1] in 0-1, score}]}

Then: tfds build tfds_builders/vivqa --config default --manual_dir=<manual_dir> --file_format=array_record
(without --config, `tfds build` also builds the `tesseract` config).
"""

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=common.vqa_features(with_image=True, extra={"question_type": np.int32}),
            homepage="https://github.com/kh4nh12/ViVQA",
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        cfg = self.builder_config
        manual_dir = Path(dl_manager.manual_dir)
        split_files = readers.assign_split_files(manual_dir, "*.csv", split_files=cfg.split_files, default_split="train")
        self._ocr = readers.OcrSource(cfg.ocr_engine, manual_dir / cfg.ocr_file, auto_fallback="none", lang=cfg.ocr_lang,
                                      skip_invalid=cfg.skip_invalid_records)
        self.ocr_stats = self._ocr.stats
        self._images = readers.ImageCache(self._ocr, cfg.num_workers, cfg.ocr_lang)
        logging.info("vivqa: split files %s", {k: [p.name for p in v] for k, v in split_files.items()})
        return {split: self._generate_examples(split, files, manual_dir) for split, files in split_files.items()}

    def _generate_local(self, split: str, files: list[Path], manual_dir: Path) -> Iterator[tuple[str, dict]]:
        cfg = self.builder_config
        counter, policy = self._skip_policy(split, f"vivqa/{split}")
        image_dirs = [manual_dir / d for d in cfg.image_dirs]
        image_dirs = [d for d in image_dirs if d.is_dir()]
        log = self._repair_log(split, f"vivqa/{split}", policy)
        ids = repairs.RepeatedIds(log)
        kept = 0
        for path in files:
            rows = list(parse_csv(path, answers_required=split in cfg.answers_required_splits, policy=policy))
            ids.reserved.update(r.question_id for r in rows)
            rows = [r for r in rows if self._resolve_id(ids, r, path)]
            # Decode + OCR every image of the file in worker processes first (deterministic order).
            self._images.prepare(
                (next((p for p in (readers.find_file(n, image_dirs) for n in coco_filenames(r.img_id)) if p), None),
                 str(r.img_id)) for r in rows)
            for row in rows:
                record = f"line {row.line} (row {row.question_id})"
                names = coco_filenames(row.img_id)
                image_path = next((p for p in (readers.find_file(n, image_dirs) for n in names) if p), None)
                image = self._images.load_or_skip(
                    image_path, policy, source=path, record=record,
                    not_found=f"image {names[0]} / {names[1]} (img_id {row.img_id}) not found in "
                    f"{[str(manual_dir / d) for d in cfg.image_dirs]}")
                if image is None:
                    continue
                tokens = self._ocr.get(str(row.img_id), image)
                kept += 1
                yield row.question_id, {
                    "image": image.encoded,
                    "image_id": str(row.img_id),
                    "question_id": row.question_id,
                    "question": row.question,
                    "answers": row.answers,
                    "qa_type": np.int32(common.QA_TYPE_UNKNOWN),
                    "language": "vi",
                    "question_type": np.int32(row.question_type),
                    "ocr": readers.ocr_feature(tokens),
                }
        counter.log_summary(kept)
        log.log_summary()
        self._ocr.log_summary(f"vivqa/{split}")

    @staticmethod
    def _resolve_id(ids: repairs.RepeatedIds, row: _Row, path: Path) -> bool:
        """Applies the repeated-id rule to ``row`` (:class:`openvivqa_jax.data.repairs.RepeatedIds`: the same
        image and question is the same question); renames it in place. Whether the row is kept."""
        new = ids.resolve(row.question_id, [row.img_id, row.question], [row.answers, row.question_type], path=path,
                          record=f"line {row.line} (row {row.question_id})")
        if new is not None:
            row.question_id = new
        return new is not None
