"""TFDS builder for OpenViVQA (Nguyen et al., "OpenViVQA: Task, Dataset, and Multimodal Fusion Models for
Visual Question Answering in Vietnamese", 2023), read from the manually downloaded public release.

Source formats (both accepted, per file):

* public release (``vlsp2023_{train,dev,test}_data.json``)::

      {"images": {image_id: filename}, "annotations": {question_id: {image_id, question, answer}}}

* older list form::

      {"images": [{id, filename}], "annotations": [{id, image_id, question, answers, QA-type}]}

``answer``/``answers`` may be a string or a list of strings. ``QA-type`` (1 text QA, 0 non-text QA) is kept
as ``qa_type`` where given, else -1 (:data:`tfds_builders.common.QA_TYPE_UNKNOWN`).

Splits: every ``manual_dir/*.json`` (except the OCR file) is mapped to a split by a keyword in its name
(``train``; ``dev``/``val`` -> ``dev``; ``test``); a single file whose name names no split (the sample
``examples_data.json``) becomes ``train``. To choose explicitly, give the config field ``split_files``, e.g.
``tfds build tfds_builders/openvivqa --manual_dir=... --config '{"name": "sample_dev", "split_files":
{"dev": "examples_data.json"}}'`` (a custom config needs a name of its own). Answers are required in
``train`` and ``dev`` (config ``answers_required_splits``); a ``test`` file without answers gives ``[]``.

Images are looked up by file name in ``images_dir`` (config) or, in order: ``images/``, ``<split>/``,
``<split>_images/``, ``<split>-images/``, ``training-images/`` (train), ``<annotation file stem>/`` and the
folder of the annotation file.

Configs:

* ``default``: images + OCR from ``manual_dir/ocr.json`` (``{image_id: [{text, box, score}]}``) when that
  file exists, else the ``detector+tesseract`` OCR engine (:func:`openvivqa_jax.data.ocr.run_ocr`: DB text
  detector, then Tesseract ``vie`` per line) at build time, once per image_id, in ``num_workers``
  processes (:func:`tfds_builders.image_work.map_images`).

Images are decoded by :func:`openvivqa_jax.data.images.decode_image` (the decoder of the training
pipeline and predict: EXIF orientation, transparency onto white, 16-bit by range); the stored bytes
decode to exactly those pixels. Bombs, empty, truncated and too-small images are refused (one line
naming the annotation file, the question and the image; ``skip_missing_images`` skips and counts them).
* ``features``: images + the authors' per-image feature files ``manual_dir/features/<name>.npy``
  (``<name>`` = image file stem or image_id; also searched in ``features/<split>/``). Each file is a
  pickled dict (``np.load(path, allow_pickle=True).item()``) with ``region_features`` ``(num_regions, D)``,
  ``region_boxes`` ``(num_regions, 4)`` xyxy in pixels or normalized, scene text ``texts`` (list of str),
  ``boxes`` ``(num_ocr, 4)`` (or quadrilaterals ``(num_ocr, 8)``/``(num_ocr, 4, 2)``) and optional ``scores``
  ``(num_ocr,)`` (default 1.0). Pixel boxes are divided by ``image_w``/``image_h`` (or ``width``/``height``)
  from the dict when present, else by the image size. The example gets ``objects`` = {``features``
  float16 ``(num_regions, D)``, ``boxes`` float32 ``(num_regions, 4)``} and OCR from the file. ``D`` is
  2048 in the registered config; build another with ``OpenVivqaConfig(name=..., features_dir="features",
  region_feature_dim=D, ocr_engine="features")``.

A repeated question id (also as a JSON key of the dict form, or across the files of a split) carrying another
question is renamed ``<id>#<n>``, an exact duplicate record dropped (:mod:`tfds_builders.release_files`), each
counted in ``Builder.repairs[split]``, logged and written to the build's notes; the config field ``strict``
refuses them.

Bad input raises :class:`tfds_builders.readers.DatasetInputError` naming the file and the question id
(missing/corrupt image, empty question, empty answers where required, unknown image_id, bad QA-type, a
repeated question id with the same question and other answers, an image id listed with two file names);
``skip_missing_images`` / ``skip_invalid_records`` skip such questions instead (a repeated image id: the first
entry is kept), counted per reason in ``Builder.skip_counts[split]`` and logged. Fields the builder does not
store are counted per file in ``Builder.unknown_fields[split]`` and logged once. A ``language`` field is
stored as given (default ``vi``); other values than ``vi`` are logged once per file, pointing to the
``evjvqa`` builder.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from absl import logging

try:
    from tfds_builders import beam_build, common, readers, release_files
except ImportError:  # loaded by `tfds build tfds_builders/openvivqa` as `openvivqa.openvivqa_dataset_builder`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tfds_builders import beam_build, common, readers, release_files

from openvivqa_jax.data import ocr as ocr_lib
from openvivqa_jax.data import repairs
from openvivqa_jax.jsonio import json_kind
from openvivqa_jax.text.normalize import normalize_text

_CITATION = """\
@article{nguyen2023openvivqa,
  title={OpenViVQA: Task, Dataset, and Multimodal Fusion Models for Visual Question Answering in Vietnamese},
  author={Nguyen, Nghia Hieu and Vo, Duong T. D. and Nguyen, Kiet Van and Nguyen, Ngan Luu-Thuy},
  journal={Information Fusion},
  year={2023}
}
"""


@dataclasses.dataclass(eq=False)
class OpenVivqaConfig(readers.ReleaseConfig):
    """Config of the OpenViVQA builder (see the module doc); the fields of
    :class:`tfds_builders.readers.ReleaseConfig`, and:

    Attributes:
        ocr_engine: ``auto`` (OCR file if present, else ``detector+tesseract``), ``file``,
            ``detector+tesseract`` or ``tesseract`` (:func:`openvivqa_jax.data.ocr.run_ocr`, the engines
            of predict), ``none`` or ``features`` (scene text from the feature files; needs
            ``features_dir``).
        ocr_lang: Tesseract language(s). ocr_min_confidence, ocr_psm, ocr_min_side: non-default values run
            single-pass :func:`run_tesseract` with them for engine ``tesseract``.
        features_dir: folder of per-image ``.npy`` feature dicts relative to manual_dir; None = no features.
        region_feature_dim: ``D`` of ``region_features``; required with ``features_dir``.
    """

    ocr_min_confidence: float = ocr_lib.DEFAULT_MIN_CONFIDENCE
    ocr_psm: int = ocr_lib.DEFAULT_PSM
    ocr_min_side: int = ocr_lib.DEFAULT_MIN_SIDE
    features_dir: str | None = None
    region_feature_dim: int | None = None


@dataclasses.dataclass
class _Record(readers.ReleaseRecord):
    """One question parsed from an annotation file: the fields of :class:`tfds_builders.readers.ReleaseRecord`,
    then its QA-type, the annotation file and its language."""

    qa_type: int
    source: Path
    language: str = "vi"


#: Fields of an annotation record the builder reads (others are counted and logged, not stored).
ANNOTATION_FIELDS = ("id", "question_id", "image_id", "question", "answer", "answers", "QA-type", "qa_type", "language")
#: Fields of a list-form ``images`` entry the builder reads.
IMAGE_FIELDS = ("id", "filename", "file_name")
#: Top-level keys of an annotation file the builder reads.
TOP_LEVEL_FIELDS = ("images", "annotations")
#: The release's own image folders per split, searched after the common names
#: (:func:`tfds_builders.readers.release_image_dirs`).
SPLIT_IMAGE_DIRS = {"train": ("training-images",)}


def _parse_qa_type(value: Any, *, path: Path, record: str) -> int:
    if value is None:
        return common.QA_TYPE_UNKNOWN
    try:
        v = int(value)
    except (TypeError, ValueError):
        v = None
    if v not in (common.QA_TYPE_TEXT, common.QA_TYPE_NON_TEXT) or isinstance(value, bool):
        raise readers.record_error(path, record, f"QA-type {value!r} is not 0 (non-text QA) or 1 (text QA)")
    return v


def parse_annotation_file(
    path: Path, *, answers_required: bool, policy: readers.ErrorPolicy,
    unknown: readers.UnknownFields | None = None, ids: repairs.RepeatedIds | None = None,
) -> list[_Record]:
    """Parses one OpenViVQA annotation file (public-release dict form or older list form).

    A question id (or image id) repeated as a key of the dict form, or listed twice, is not silently replaced
    as ``json.load`` would: a repeat carrying another question is renamed ``<id>#<n>``, an exact duplicate is
    dropped (both counted and logged), a repeat of the same question with other answers is an error
    (:mod:`tfds_builders.release_files`). A ``language`` field is stored as given (``vi`` when absent);
    values other than ``vi`` are logged once per file with their counts (:func:`warn_other_languages`).

    Args:
        path: the JSON file.
        answers_required: a question without a non-empty answer is an error.
        policy: raises record errors, or counts and skips them (``skip_invalid_records``).
        unknown: counts fields outside :data:`ANNOTATION_FIELDS` / :data:`IMAGE_FIELDS` /
            :data:`TOP_LEVEL_FIELDS` (logged by the caller); None = not counted.
        ids: the split's repeated-id rule and repair log (one for all its files); None = this file's own.

    Returns:
        The questions in file order (question, answers normalized).

    Raises:
        DatasetInputError: bad JSON or top-level structure (always), or a bad record or repeated id
            (unless skipped).
    """
    unknown = unknown if unknown is not None else readers.UnknownFields("openvivqa")
    ids = ids if ids is not None else repairs.RepeatedIds(readers.repair_log("openvivqa", policy))
    images, anns = release_files.read_release_file(path, dataset="OpenViVQA", policy=policy, unknown=unknown,
                                                   top_fields=TOP_LEVEL_FIELDS, image_fields=IMAGE_FIELDS, ids=ids)
    out = []
    languages: collections.Counter[str] = collections.Counter()
    for qid, record, a in anns:
        try:
            if not isinstance(a, dict):
                raise readers.record_error(path, record, f"expected an object, got {a!r}")
            if readers.duplicate_keys(a):
                raise readers.record_error(path, record, f"fields repeated in the record: {readers.duplicate_keys(a)}")
            unknown.check(a, ANNOTATION_FIELDS, path=path)
            if "image_id" not in a:
                raise readers.record_error(path, record, "no 'image_id'")
            image_id = str(a["image_id"])
            if image_id not in images:
                raise readers.record_error(path, record, f"image_id {image_id!r} is not listed in 'images'")
            question = readers.clean_question(a.get("question"), path=path, record=record)
            raw_answers = a.get("answers", a.get("answer"))
            answers = readers.clean_answers(raw_answers, path=path, record=record, required=answers_required)
            qa_type = _parse_qa_type(a.get("QA-type", a.get("qa_type")), path=path, record=record)
            language = a.get("language", "vi")
            if not isinstance(language, str) or not language.strip():
                raise readers.record_error(path, record, f"language {language!r} is not a non-empty string")
            language = language.strip().lower()
        except readers.DatasetInputError as e:
            policy.handle("invalid_record", e)
            continue
        languages[language] += 1
        out.append(_Record(qid, image_id, images[image_id], question, answers, qa_type, Path(path), language))
    warn_other_languages(path, languages)
    return out


def warn_other_languages(path: Path, languages: collections.Counter) -> bool:
    """Logs one warning when a file's questions carry ``language`` values other than ``vi``.

    OpenViVQA is Vietnamese; a file with English or Japanese questions is an EVJVQA file (same group,
    same layout), which ``tfds_builders/evjvqa`` builds with its own metrics. The values are stored as
    given either way.

    Args:
        path: the annotation file (named in the warning).
        languages: language value -> number of kept questions.

    Returns:
        Whether the warning was logged.
    """
    other = {k: v for k, v in sorted(languages.items()) if k != "vi"}
    if not other:
        return False
    logging.warning(
        "%s: %d of %d questions have a language other than 'vi' (%s); OpenViVQA is Vietnamese: this looks like "
        "an EVJVQA file, build it with `tfds build tfds_builders/evjvqa` (per-language metrics, Japanese "
        "scored per character). Stored here with their language values.",
        path, sum(other.values()), sum(languages.values()), other)
    return True


def _find_feature_file(features_dirs: list[Path], rec: _Record) -> Path | None:
    for name in (Path(rec.filename).stem + ".npy", f"{rec.image_id}.npy"):
        found = readers.find_file(name, features_dirs)
        if found is not None:
            return found
    return None


def load_feature_file(
    path: Path, *, dim: int, image_size: tuple[int, int], record: str, source: Path, ocr_stats: dict
) -> tuple[dict, list[dict]]:
    """Reads one of the authors' per-image ``.npy`` feature dicts (module doc).

    Args:
        path: the ``.npy`` file.
        dim: expected region feature size ``D``.
        image_size: ``(width, height)`` in pixels of the image, used for pixel boxes unless the dict
            has ``image_w``/``image_h`` (or ``width``/``height``).
        record, source: the question and annotation file named in errors.
        ocr_stats: counter; ``dropped_empty_after_normalization`` counts dropped scene-text tokens.

    Returns:
        ``objects`` = {``features`` float16 (num_regions, D), ``boxes`` float32 (num_regions, 4) xyxy in
        [0, 1]} and the scene-text OCR tokens (normalized; empty texts dropped and counted).

    Raises:
        ImageFileError: the file cannot be loaded or is not a pickled dict.
        DatasetInputError: missing keys, wrong shapes or dims, or mismatched lengths.
    """
    rec = f"{record} (feature file {path})"
    try:
        obj = np.load(path, allow_pickle=True)
        d = obj.item() if isinstance(obj, np.ndarray) and obj.dtype == object and obj.shape == () else None
    except Exception as e:  # noqa: BLE001 - numpy raises many types for corrupt files
        raise readers.record_error(source, rec, f"cannot load: {e}", readers.ImageFileError) from e
    if not isinstance(d, dict):
        raise readers.record_error(source, rec, "expected a pickled dict (np.save of a dict)", readers.ImageFileError)
    missing = [k for k in ("region_features", "region_boxes", "texts", "boxes") if k not in d]
    if missing:
        raise readers.record_error(source, rec, f"missing keys {missing} (has {sorted(d)})")
    w = float(d.get("image_w", d.get("width", image_size[0])))
    h = float(d.get("image_h", d.get("height", image_size[1])))
    feats = np.asarray(d["region_features"])
    if feats.ndim != 2 or feats.shape[1] != dim:
        raise readers.record_error(
            source, rec, f"region_features has shape {feats.shape}, expected (num_regions, {dim})")
    rboxes = readers.boxes_to_unit(d["region_boxes"], w, h, source=source, record=rec, field="region_boxes")
    if len(rboxes) != len(feats):
        raise readers.record_error(
            source, rec, f"{len(feats)} region_features but {len(rboxes)} region_boxes")
    texts = list(d["texts"])
    oboxes = readers.boxes_to_unit(d["boxes"], w, h, source=source, record=rec, field="boxes")
    scores = np.ones(len(texts), np.float32) if d.get("scores") is None else np.asarray(d["scores"], np.float32).reshape(-1)
    if not len(texts) == len(oboxes) == len(scores):
        raise readers.record_error(
            source, rec, f"scene text lengths differ: {len(texts)} texts, {len(oboxes)} boxes, {len(scores)} scores")
    tokens = []
    for i, (t, b, s) in enumerate(zip(texts, oboxes, scores)):
        if not isinstance(t, str):
            raise readers.record_error(source, rec, f"texts[{i}] is {json_kind(t)}, expected a string")
        nt = normalize_text(t)
        if not nt:
            ocr_stats["dropped_empty_after_normalization"] = ocr_stats.get("dropped_empty_after_normalization", 0) + 1
            continue
        tokens.append({"text": nt, "box": tuple(float(v) for v in b), "score": float(np.clip(s, 0.0, 1.0))})
    return {"features": feats.astype(np.float16), "boxes": rboxes}, ocr_lib.split_copyable(tokens, ocr_stats)


class Builder(readers.BuildCounts, beam_build.BeamWhenAsked, tfds.core.GeneratorBasedBuilder):
    """OpenViVQA from the public release JSON + image folder (module doc). Splits as found in manual_dir. With Beam
    options (``tfds build ... --beam_pipeline_options=...``) the per-image work (decode, stored bytes, OCR engine)
    runs on Apache Beam (:mod:`tfds_builders.beam_build`); the ``features`` config builds in this process."""

    VERSION = tfds.core.Version("1.2.0")
    RELEASE_NOTES = {
        "1.2.0": "Region features (config features) stored as raw float16 bytes, not a float list.",
        "1.1.0": "Adds the language feature (ISO 639-1 code of the question and answers).",
        "1.0.0": "Initial release: public-release and list JSON forms, tesseract/file/feature OCR."}
    BUILDER_CONFIGS = [
        OpenVivqaConfig(name="default", description="Images + OCR from ocr.json if present, else detector+tesseract (vie)."),
        OpenVivqaConfig(
            name="features",
            description="Images + the authors' per-image .npy features (region features D=2048, scene text).",
            features_dir="features",
            region_feature_dim=2048,
            ocr_engine="features",
        ),
    ]
    DEFAULT_CONFIG_NAME = "default"
    MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Download the OpenViVQA release (https://github.com/hieunghia-pat/OpenViVQA-dataset; the annotation files
vlsp2023_train_data.json, vlsp2023_dev_data.json, vlsp2023_test_data.json and the image archives) and place:

  <manual_dir>/vlsp2023_train_data.json       (any *.json; split from a train/dev/val/test keyword in the name,
  <manual_dir>/vlsp2023_dev_data.json          a single unnamed file = train, or config split_files)
  <manual_dir>/vlsp2023_test_data.json
  <manual_dir>/images/<file name>              (or <split>/, <split>_images/, <split>-images/, training-images/)
  <manual_dir>/ocr.json                        optional {image_id: [{text, box: [x0,y0,x1,y1] in 0-1, score}]};
                                               without it the default config runs OCR (apt: tesseract-ocr-vie)
  <manual_dir>/features/<image stem>.npy       only for the `features` config (authors' per-image feature dicts)

Then: tfds build tfds_builders/openvivqa --config default --manual_dir=<manual_dir> --file_format=array_record
(without --config, `tfds build` builds every config, and `features` needs <manual_dir>/features/).
"""

    def _info(self) -> tfds.core.DatasetInfo:
        cfg = self.builder_config
        return self.dataset_info_from_configs(
            features=common.vqa_features(with_image=True, region_feature_dim=cfg.region_feature_dim,
                                     compact_regions=True),
            supervised_keys=None,
            homepage="https://github.com/hieunghia-pat/OpenViVQA-dataset",
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        cfg = self.builder_config
        manual_dir = Path(dl_manager.manual_dir)
        if cfg.features_dir is not None and not cfg.region_feature_dim:
            raise ValueError(f"config {cfg.name}: features_dir needs region_feature_dim")
        if cfg.ocr_engine == "features" and cfg.features_dir is None:
            raise ValueError(f"config {cfg.name}: ocr_engine='features' needs features_dir")
        if cfg.features_dir is not None and not (manual_dir / cfg.features_dir).is_dir():
            raise readers.DatasetInputError(
                f"{manual_dir / cfg.features_dir}: config {cfg.name!r} needs the per-image .npy feature folder; "
                "to build images + OCR only, pass --config default (`tfds build` without --config builds "
                "every config)")
        split_files = readers.assign_split_files(
            manual_dir, "*.json", split_files=cfg.split_files, exclude={cfg.ocr_file}, default_split=cfg.default_split
        )
        if cfg.ocr_engine == "features":
            self._ocr = None
        else:
            self._ocr = readers.OcrSource(
                cfg.ocr_engine, manual_dir / cfg.ocr_file, auto_fallback=ocr_lib.DEFAULT_ENGINE, lang=cfg.ocr_lang,
                min_confidence=cfg.ocr_min_confidence, psm=cfg.ocr_psm, min_side=cfg.ocr_min_side,
                skip_invalid=cfg.skip_invalid_records,
            )
            self.ocr_stats = self._ocr.stats
        self._images = readers.ImageCache(self._ocr, cfg.num_workers, cfg.ocr_lang)
        logging.info("openvivqa/%s: split files %s", cfg.name, {k: [p.name for p in v] for k, v in split_files.items()})
        return {split: self._generate_examples(split, files, manual_dir) for split, files in split_files.items()}

    def _beam_applies(self) -> bool:
        """Beam options were given, and the config reads images (the ``features`` config builds in process: its
        feature files need each image's size there)."""
        return self.use_beam and not self.builder_config.features_dir

    def _generate_local(self, split: str, files: list[Path], manual_dir: Path) -> Iterator[tuple[str, dict]]:
        cfg = self.builder_config
        counter, policy = self._skip_policy(split, f"openvivqa/{split}")
        unknown = self._field_counter(split, f"openvivqa/{split}")
        log = self._repair_log(split, f"openvivqa/{split}", policy)
        ids = repairs.RepeatedIds(log)
        required = split in cfg.answers_required_splits
        features_dirs = (
            [manual_dir / cfg.features_dir / split, manual_dir / cfg.features_dir] if cfg.features_dir else []
        )
        kept = 0
        for path in files:
            image_dirs = readers.release_image_dirs(manual_dir, split, path, images_dir=cfg.images_dir,
                                                    split_dirs=SPLIT_IMAGE_DIRS)
            recs = list(parse_annotation_file(path, answers_required=required, policy=policy, unknown=unknown,
                                              ids=ids))
            # Decode + OCR every image of the file in worker processes first (deterministic order).
            self._images.prepare((readers.find_file(r.filename, image_dirs), r.image_id) for r in recs)
            for rec in recs:
                record = f"question {rec.question_id}"
                image_path = readers.find_file(rec.filename, image_dirs)
                try:
                    if image_path is None:
                        raise rec.missing_image(path, record, image_dirs)
                    image = self._images.load(image_path, source=path, record=record)
                    example = {
                        "image": image.encoded,
                        "image_id": rec.image_id,
                        "question_id": rec.question_id,
                        "question": rec.question,
                        "answers": rec.answers,
                        "qa_type": np.int32(rec.qa_type),
                        "language": rec.language,
                    }
                    if cfg.features_dir:
                        fpath = _find_feature_file(features_dirs, rec)
                        if fpath is None:
                            raise readers.record_error(
                                path, record, f"no feature file {Path(rec.filename).stem}.npy or "
                                f"{rec.image_id}.npy in {[str(d) for d in features_dirs]}", readers.ImageFileError)
                        objects, feat_tokens = load_feature_file(
                            fpath, dim=cfg.region_feature_dim, image_size=(image.width, image.height),
                            record=record, source=path, ocr_stats=self.ocr_stats)
                        example["objects"] = objects
                    if self._ocr is None:
                        tokens = feat_tokens
                    else:
                        tokens = self._ocr.get(rec.image_id, image)
                    example["ocr"] = readers.ocr_feature(tokens)
                except readers.DatasetInputError as e:
                    reason = "missing_or_corrupt_image" if isinstance(e, readers.ImageFileError) else "invalid_record"
                    policy.handle(reason, e)
                    continue
                kept += 1
                yield rec.question_id, example
        counter.log_summary(kept)
        unknown.log_summary()
        log.log_summary()
        if self._ocr is not None:
            self._ocr.log_summary(f"openvivqa/{split}")
