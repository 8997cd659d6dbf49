"""TFDS builder for EVJVQA (UIT-EVJVQA, the VLSP 2022 multilingual VQA challenge: about 30K question-answer
pairs in English, Vietnamese and Japanese on about 5,000 photos taken in Vietnam; Nguyen et al., "VLSP 2022 -
EVJVQA Challenge: Multilingual Visual Question Answering", 2023), read from the manually downloaded files.

Source format (the public-test layout; the train file has the same one)::

    {"images": [{"id": 1, "filename": "a.jpg", ...}],
     "annotations": [{"id": 10, "image_id": 1, "question": "...", "answer": "...", "language": "en", ...}]}

``images`` may also be the dict form ``{image_id: filename}``. ``answer``/``answers`` is a string or a list
of strings. ``language`` is required per record: ``vi``/``en``/``ja`` (also ``vietnamese``, ``english``,
``japanese``, ``vie``, ``eng``, ``jpn``, ``jp``, any case); it is stored as the ISO 639-1 code in the
``language`` feature (:func:`tfds_builders.common.vqa_features`). A file without the field can be built
with the config field ``default_language``.

Splits: every ``manual_dir/*.json`` except the OCR file is mapped to a split by a train/dev/val/test keyword
in its name (``evjvqa_public_test.json`` -> ``test``); config ``split_files`` chooses explicitly. Answers are
required in ``answers_required_splits`` (default train and dev); a test file without answers gives ``[]``.

Images are looked up by file name in ``images_dir`` (config) or, in order: ``images/``, ``<split>/``,
``<split>_images/``, ``<split>-images/``, ``train-images/`` (train), ``public-test-images/`` and
``public_test_images/`` (test), ``<annotation file stem>/`` and the annotation file's folder.

OCR (config ``ocr_engine``): ``auto`` = ``manual_dir/ocr.json`` (``{image_id: [{text, box, score}]}``) when
present, else none (config ``default``); ``tesseract`` runs Tesseract (``vie+eng``; add ``jpn`` to
``ocr_lang`` when the ``tesseract-ocr-jpn`` data is installed) once per image at build time.

Per-image work (decode, stored bytes, OCR engine) runs per image file with
:func:`tfds_builders.image_work.process_image`: in ``num_workers`` local processes, or, when the build is given
Beam options, on Apache Beam (:mod:`tfds_builders.beam_build`), e.g. on every local core::

    tfds build tfds_builders/evjvqa --config tesseract --manual_dir=<manual_dir> --file_format=array_record \
        --beam_pipeline_options="runner=DirectRunner,direct_running_mode=multi_processing,direct_num_workers=8"

Both builds hold the same examples in the same order.

A repeated question id (also as a repeated JSON key) carrying another question is renamed ``<id>#<n>``, an
exact duplicate record dropped (:mod:`tfds_builders.release_files`), each counted in ``Builder.repairs[split]``,
logged and written to the build's notes; the config field ``strict`` refuses them. The public test holds 31
questions with the same image, question and answer as another id: kept (the challenge's scorer scores each
id), counted as ``same_content_other_id``.

Bad input raises :class:`tfds_builders.readers.DatasetInputError` naming the file and the question id:
missing or corrupt image, empty question, empty answers where required, unknown image_id, a missing or
unknown language, a repeated question id with the same question and other answers, an image id listed with
two file names; ``skip_missing_images`` / ``skip_invalid_records`` skip them instead, counted per reason in
``Builder.skip_counts[split]`` and logged.
Fields the builder does not store are counted per file (``Builder.unknown_fields[split]``) and logged once;
the per-language question counts are in ``Builder.language_counts[split]``.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from absl import logging

try:
    from tfds_builders import beam_build, common, image_work, readers, release_files
except ImportError:  # loaded by `tfds build tfds_builders/evjvqa` as `evjvqa.evjvqa_dataset_builder`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tfds_builders import beam_build, common, image_work, readers, release_files

from openvivqa_jax.data import repairs


_CITATION = """\
@article{nguyen2023evjvqa,
  title={VLSP 2022 -- EVJVQA Challenge: Multilingual Visual Question Answering},
  author={Nguyen, Ngan Luu-Thuy and Nguyen, Nghia Hieu and Vo, Duong T. D. and Tran, Khanh Quoc and Nguyen, Kiet Van},
  journal={Journal of Computer Science and Cybernetics},
  year={2023}
}
"""

#: Accepted ``language`` values (lowercased) -> ISO 639-1 code.
LANGUAGE_ALIASES = {
    "vi": "vi", "vie": "vi", "vietnamese": "vi", "vn": "vi",
    "en": "en", "eng": "en", "english": "en",
    "ja": "ja", "jpn": "ja", "japanese": "ja", "jp": "ja",
}
#: Fields of an annotation record the builder reads (others are counted and logged).
ANNOTATION_FIELDS = ("id", "question_id", "image_id", "question", "answer", "answers", "language")
#: Fields of a list-form ``images`` entry the builder reads.
IMAGE_FIELDS = ("id", "filename", "file_name")
#: The release's own image folders per split, searched after the common names
#: (:func:`tfds_builders.readers.release_image_dirs`).
SPLIT_IMAGE_DIRS = {"train": ("train-images",), "test": ("public-test-images", "public_test_images")}


@dataclasses.dataclass(eq=False)
class EvjvqaConfig(readers.ReleaseConfig):
    """Config of the EVJVQA builder (module doc); the fields of :class:`tfds_builders.readers.ReleaseConfig`, and:

    Attributes:
        ocr_engine: ``auto`` (ocr.json if present, else none), ``file``, ``tesseract`` or ``none``.
        ocr_lang: Tesseract language(s) for ``tesseract``; ``vie+eng`` as the questions are Vietnamese or English
            (add ``jpn`` where its data is installed).
        default_language: language of records without a ``language`` field; None = such a record is an error.
        num_workers: processes for the per-image work of a build without Beam
            (:func:`tfds_builders.image_work.map_images`); None = the CPUs this process may use.
    """

    ocr_lang: str = "vie+eng"
    default_language: str | None = None


@dataclasses.dataclass
class Record(readers.ReleaseRecord):
    """One question parsed from an EVJVQA annotation file (question and answers normalized): the fields of
    :class:`tfds_builders.readers.ReleaseRecord`, its language and the annotation file."""

    language: str
    source: Path


def parse_language(value: Any, *, path: Any, record: str, default: str | None = None) -> str:
    """Maps a ``language`` value to ``vi``, ``en`` or ``ja`` (:data:`LANGUAGE_ALIASES`).

    Raises:
        DatasetInputError: the value is missing (and no ``default``), not a string, or unknown.
    """
    if value is None:
        if default is None:
            raise readers.record_error(path, record, "no 'language' field (expected vi, en or ja; or set the "
                                       "config field default_language)")
        value = default
    if not isinstance(value, str) or value.strip().lower() not in LANGUAGE_ALIASES:
        raise readers.record_error(path, record, f"language {value!r} is not one of vi, en, ja")
    return LANGUAGE_ALIASES[value.strip().lower()]


def parse_annotation_file(
    path: Path, *, answers_required: bool, policy: readers.ErrorPolicy,
    unknown: readers.UnknownFields | None = None, default_language: str | None = None,
    ids: repairs.RepeatedIds | None = None,
) -> list[Record]:
    """Parses one EVJVQA annotation file (module doc).

    Args:
        path: the JSON file.
        answers_required: a question without a non-empty answer is an error.
        policy: raises record errors, or counts and skips them (``skip_invalid_records``).
        unknown: counts fields outside :data:`ANNOTATION_FIELDS` / :data:`IMAGE_FIELDS`.
        default_language: language of records without the field (None: an error).
        ids: the split's repeated-id rule and repair log (:mod:`tfds_builders.release_files`: a repeat with
            another question renamed ``<id>#<n>``, an exact duplicate dropped); None = this file's own.

    Returns:
        The questions in file order.

    Raises:
        DatasetInputError: bad JSON or top-level structure (always), or a bad record (unless skipped).
    """
    unknown = unknown if unknown is not None else readers.UnknownFields("evjvqa")
    ids = ids if ids is not None else repairs.RepeatedIds(readers.repair_log("evjvqa", policy))
    images, anns = release_files.read_release_file(path, dataset="EVJVQA", policy=policy, unknown=unknown,
                                                   top_fields=("images", "annotations"), image_fields=IMAGE_FIELDS,
                                                   ids=ids)
    out: list[Record] = []
    for qid, record, a in anns:
        try:
            if not isinstance(a, dict):
                raise readers.record_error(path, record, f"expected an object, got {a!r}"[:300])
            if readers.duplicate_keys(a):
                raise readers.record_error(path, record, f"fields repeated in the record: {readers.duplicate_keys(a)}")
            unknown.check(a, ANNOTATION_FIELDS, path=path)
            if a.get("image_id") is None:
                raise readers.record_error(path, record, "no 'image_id'")
            image_id = str(a["image_id"])
            if image_id not in images:
                raise readers.record_error(path, record, f"image_id {image_id!r} is not listed in 'images'")
            language = parse_language(a.get("language"), path=path, record=record, default=default_language)
            question = readers.clean_question(a.get("question"), path=path, record=record)
            answers = readers.clean_answers(
                a.get("answers", a.get("answer")), path=path, record=record, required=answers_required)
        except readers.DatasetInputError as e:
            policy.handle("invalid_record", e)
            continue
        out.append(Record(qid, image_id, images[image_id], question, answers, language, Path(path)))
    return out


class Builder(readers.BuildCounts, beam_build.BeamWhenAsked, tfds.core.GeneratorBasedBuilder):
    """EVJVQA from its JSON files and image folders (module doc); every question carries its language."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release: list/dict JSON forms, per-record language, OCR file or tesseract."}
    BUILDER_CONFIGS = [
        EvjvqaConfig(name="default", description="Images; OCR from ocr.json if present, else none."),
        EvjvqaConfig(name="tesseract", description="Images + Tesseract OCR (vie+eng) at build time.",
                     ocr_engine="tesseract"),
    ]
    DEFAULT_CONFIG_NAME = "default"
    MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Download the UIT-EVJVQA files (VLSP 2022 EVJVQA challenge: https://vlsp.org.vn/vlsp2022/eval/evjvqa; the
annotation JSON files and the image archives) and place:

  <manual_dir>/evjvqa_train.json               (any *.json; split from a train/dev/val/test keyword in the name,
  <manual_dir>/evjvqa_public_test.json          a single unnamed file = train, or config split_files)
  <manual_dir>/train-images/<file name>        (or images/, <split>/, <split>_images/, public-test-images/)
  <manual_dir>/public-test-images/<file name>
  <manual_dir>/ocr.json                        optional {image_id: [{text, box: [x0,y0,x1,y1] in 0-1, score}]}

Each annotation carries "language": "vi", "en" or "ja". Then:
tfds build tfds_builders/evjvqa --config default --manual_dir=<manual_dir> --file_format=array_record
(without --config, `tfds build` also builds the `tesseract` config).
"""

    def __init__(self, **kwargs):
        """Same arguments as ``tfds.core.GeneratorBasedBuilder``; adds the counts of
        :class:`tfds_builders.readers.BuildCounts` and ``language_counts`` (``{split: {language: questions
        kept}}``)."""
        super().__init__(**kwargs)
        self.language_counts: dict[str, dict[str, int]] = {}

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=common.vqa_features(with_image=True),
            homepage="https://vlsp.org.vn/vlsp2022/eval/evjvqa",
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        cfg = self.builder_config
        manual_dir = Path(dl_manager.manual_dir)
        if cfg.default_language is not None:
            parse_language(cfg.default_language, path=f"config {cfg.name}", record="default_language")
        split_files = readers.assign_split_files(
            manual_dir, "*.json", split_files=cfg.split_files, exclude={cfg.ocr_file}, default_split=cfg.default_split)
        self._ocr = readers.OcrSource(cfg.ocr_engine, manual_dir / cfg.ocr_file, auto_fallback="none", lang=cfg.ocr_lang,
                                      skip_invalid=cfg.skip_invalid_records)
        self.ocr_stats = self._ocr.stats
        # The per-image work: decode, stored bytes, and the OCR engine unless tokens come from a file.
        engine = "none" if self._ocr.engine in ("file", "none") else self._ocr.engine
        self._settings = image_work.ImageSettings(ocr_engine=engine, ocr_lang=cfg.ocr_lang)
        logging.info("evjvqa/%s: split files %s", cfg.name, {k: [p.name for p in v] for k, v in split_files.items()})
        return {split: self._generate_examples(split, files, manual_dir) for split, files in split_files.items()}

    def _generate_examples(self, split: str, files: list[Path], manual_dir: Path):
        """The split's examples: an iterator, or a Beam ``PTransform`` when the build was given Beam options
        (:mod:`tfds_builders.beam_build`). Annotations are parsed here; the per-image work runs per
        :class:`~tfds_builders.beam_build.ImageGroup` (one image file and its questions)."""
        cfg = self.builder_config
        name = f"evjvqa/{split}"
        counter, policy = self._skip_policy(split, name)
        unknown = self._field_counter(split, name)
        languages: collections.Counter[str] = collections.Counter()
        self.language_counts[split] = languages
        required = split in cfg.answers_required_splits
        log = self._repair_log(split, name, policy)
        ids = repairs.RepeatedIds(log)
        planner = beam_build.GroupPlanner()
        for path in files:
            image_dirs = readers.release_image_dirs(manual_dir, split, path, images_dir=cfg.images_dir,
                                                    split_dirs=SPLIT_IMAGE_DIRS)
            for rec in parse_annotation_file(path, answers_required=required, policy=policy, unknown=unknown,
                                             default_language=cfg.default_language, ids=ids):
                record = f"question {rec.question_id}"
                image_path = readers.find_file(rec.filename, image_dirs)
                if image_path is None:
                    policy.handle("missing_or_corrupt_image", rec.missing_image(path, record, image_dirs))
                    continue
                planner.add(image_path, rec.image_id, path, rec.question_id, record, {
                    "image_id": rec.image_id,
                    "question_id": rec.question_id,
                    "question": rec.question,
                    "answers": rec.answers,
                    "qa_type": np.int32(common.QA_TYPE_UNKNOWN),
                    "language": rec.language,
                })
        image_groups = planner.groups(self._ocr)
        unknown.log_summary()
        log.log_summary()
        examples = beam_build.generate(
            image_groups, self._settings, use_beam=self.use_beam, skip_missing_images=cfg.skip_missing_images,
            name=name, num_workers=cfg.num_workers, policy=policy, ocr_stats=self.ocr_stats)
        if self.use_beam:
            for g in image_groups:
                languages.update(ex["language"] for _, _, ex in g.records)
            logging.info("%s: %d questions on %d images go to Beam (questions per language %s; bad images are "
                         "counted in the Beam counter %s/missing_or_corrupt_image)", name,
                         sum(len(g.records) for g in image_groups), len(image_groups), dict(sorted(languages.items())),
                         name)
            return self._expect(split, examples, planned=sum(len(g.records) for g in image_groups))
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
