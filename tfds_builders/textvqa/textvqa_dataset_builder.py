"""TFDS builder for TextVQA 0.5.1 (Singh et al., "Towards VQA Models That Can Read", CVPR 2019), read from the
manually downloaded release (https://textvqa.org/dataset) with the Rosetta OCR tokens.

Source format:

* ``TextVQA_0.5.1_{train,val,test}.json``: ``{"data": [{question_id, question, image_id, answers (10), ...}]}``
  (test records have no ``answers`` -> ``[]``; a train/val record without answers is an error).
* ``TextVQA_Rosetta_OCR_v0.2_{train,val,test}.json``: ``{"data": [{image_id, ocr_info: [{word, bounding_box:
  {top_left_x, top_left_y, width, height, ...}}]}]}``, coordinates relative to the image size. The OCR
  box is ``(x, y, x + width, y + height)`` clipped to [0, 1] (rotation ignored: the box of the
  unrotated rectangle); Rosetta gives no confidence, so ``score`` is 1.0. A missing Rosetta file, or an
  image missing from it, gives no OCR tokens (counted in ``Builder.ocr_stats`` and logged).
* images: ``<image_id>.jpg`` in ``train_images/`` (train and val) or ``test_images/`` (test); also
  ``images/`` and ``<split>_images/``.

Splits are named as the files: ``train``, ``val``, ``test`` (only those whose question file exists).
``answers`` keeps all 10 answers with duplicates (VQA accuracy counts them); ``qa_type`` is -1.

Bad input raises :class:`tfds_builders.readers.DatasetInputError` naming the file and the question id (or
image id for OCR records); ``skip_missing_images`` / ``skip_invalid_records`` skip questions instead
(counted in ``Builder.skip_counts`` and logged). A repeated question id follows
:class:`openvivqa_jax.data.repairs.RepeatedIds` (another question: renamed ``<id>#<n>``; an exact duplicate:
dropped; both counted in ``Builder.repairs[split]`` and logged; the same question with other answers: an error;
the config field ``strict`` refuses the repairs).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds
from absl import logging

try:
    from tfds_builders import beam_build, common, readers
except ImportError:  # loaded by `tfds build tfds_builders/textvqa` as `textvqa.textvqa_dataset_builder`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tfds_builders import beam_build, common, readers

from openvivqa_jax.data import ocr as ocr_lib
from openvivqa_jax.data import repairs
from openvivqa_jax.jsonio import json_kind
from openvivqa_jax.text.normalize import normalize_text

_CITATION = """\
@inproceedings{singh2019towards,
  title={Towards VQA Models That Can Read},
  author={Singh, Amanpreet and Natarajan, Vivek and Shah, Meet and Jiang, Yu and Chen, Xinlei and
          Batra, Dhruv and Parikh, Devi and Rohrbach, Marcus},
  booktitle={CVPR},
  year={2019}
}
"""

SPLITS = ("train", "val", "test")


@dataclasses.dataclass(eq=False)
class TextVqaConfig(readers.ReaderConfig):
    """Config of the TextVQA builder (module doc).

    Attributes:
        question_file, ocr_file: file name patterns with ``{split}``.
        image_dirs: ``{split: [folders relative to manual_dir]}`` searched for ``<image_id>.jpg``.
        answers_required_splits: splits where a question without answers is an error.
    """

    question_file: str = "TextVQA_0.5.1_{split}.json"
    ocr_file: str = "TextVQA_Rosetta_OCR_v0.2_{split}.json"
    image_dirs: dict = dataclasses.field(default_factory=lambda: {
        "train": ["train_images", "images", "train_val_images/train_images"],
        "val": ["train_images", "val_images", "images", "train_val_images/train_images"],
        "test": ["test_images", "images"],
    })
    answers_required_splits: tuple = ("train", "val")


def read_rosetta(path: Path, stats: dict) -> dict[str, list[dict]]:
    """Reads a Rosetta OCR file into ``{image_id: tokens}`` (normalized text, xyxy boxes in [0, 1], score 1).

    Args:
        path: ``TextVQA_Rosetta_OCR_v0.2_<split>.json``.
        stats: counter; ``dropped_empty_after_normalization`` counts dropped empty words.

    Raises:
        DatasetInputError: bad structure, naming the file and the image id (or record index).
    """
    data = readers.read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise readers.DatasetInputError(f"{path}: expected {{\"data\": [records]}} (Rosetta OCR format)")
    out: dict[str, list[dict]] = {}
    for i, item in enumerate(data["data"]):
        if not isinstance(item, dict) or item.get("image_id") is None:
            raise readers.record_error(path, f"data[{i}]", f"expected an object with 'image_id', got {item!r}"[:300])
        image_id = str(item["image_id"])
        record = f"image {image_id}"
        infos = item.get("ocr_info", [])
        if not isinstance(infos, list):
            raise readers.record_error(path, record, "'ocr_info' must be a list")
        tokens = []
        for j, info in enumerate(infos):
            try:
                word = info["word"]
                bb = info["bounding_box"]
                x, y = float(bb["top_left_x"]), float(bb["top_left_y"])
                w, h = float(bb["width"]), float(bb["height"])
            except (TypeError, KeyError, ValueError) as e:
                raise readers.record_error(
                    path, record, f"ocr_info[{j}] needs word and bounding_box{{top_left_x, top_left_y, width, "
                    f"height}} numbers ({e!r})") from None
            if not isinstance(word, str):
                raise readers.record_error(path, record, f"ocr_info[{j}] word is {json_kind(word)}, expected a string")
            if not all(math.isfinite(v) for v in (x, y, w, h)) or w < 0 or h < 0:
                raise readers.record_error(path, record, f"ocr_info[{j}] bounding box {bb} is invalid")
            text = normalize_text(word)
            if not text:
                stats["dropped_empty_after_normalization"] = stats.get("dropped_empty_after_normalization", 0) + 1
                continue
            box = tuple(float(np.clip(v, 0.0, 1.0)) for v in (x, y, x + w, y + h))
            tokens.append({"text": text, "box": box, "score": 1.0})
        out[image_id] = ocr_lib.split_copyable(tokens, stats)  # one copyable word per token, own box
    return out


class Builder(readers.BuildCounts, beam_build.BeamWhenAsked, tfds.core.GeneratorBasedBuilder):
    """TextVQA 0.5.1 with Rosetta OCR tokens (module doc). With Beam options (``tfds build ...
    --beam_pipeline_options=...``) the image decoding runs on Apache Beam (:mod:`tfds_builders.beam_build`)."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {
        "1.1.0": "Adds the language feature (ISO 639-1 code of the question and answers).",
        "1.0.0": "Initial release."}
    BUILDER_CONFIGS = [TextVqaConfig(name="default", description="Images + Rosetta OCR v0.2 tokens.")]
    DEFAULT_CONFIG_NAME = "default"
    MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Download from https://textvqa.org/dataset and place:

  <manual_dir>/TextVQA_0.5.1_train.json, TextVQA_0.5.1_val.json, TextVQA_0.5.1_test.json
  <manual_dir>/TextVQA_Rosetta_OCR_v0.2_train.json, ..._val.json, ..._test.json
  <manual_dir>/train_images/<image_id>.jpg     (train_val_images.zip; train and val images)
  <manual_dir>/test_images/<image_id>.jpg      (test_images.zip)

Then: tfds build tfds_builders/textvqa --manual_dir=<manual_dir> --file_format=array_record
"""

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=common.vqa_features(with_image=True),
            homepage="https://textvqa.org",
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        cfg = self.builder_config
        manual_dir = Path(dl_manager.manual_dir)
        splits = {s: manual_dir / cfg.question_file.format(split=s) for s in SPLITS}
        splits = {s: p for s, p in splits.items() if p.is_file()}
        if not splits:
            raise readers.DatasetInputError(
                f"{manual_dir}: no question file {cfg.question_file.format(split='{train,val,test}')} found")
        # Images decoded on demand (no OCR engine: Rosetta tokens come from the split's OCR file).
        self._ocr = None
        self._images = readers.ImageCache(None, 1)
        return {s: self._generate_examples(s, p, manual_dir) for s, p in splits.items()}

    def _generate_local(self, split: str, path: Path, manual_dir: Path) -> Iterator[tuple[str, dict]]:
        cfg = self.builder_config
        counter, policy = self._skip_policy(split, f"textvqa/{split}")
        ocr_path = manual_dir / cfg.ocr_file.format(split=split)
        if ocr_path.is_file():
            ocr = read_rosetta(ocr_path, self.ocr_stats)
        else:
            logging.warning("textvqa/%s: no Rosetta OCR file %s; examples get no OCR tokens", split, ocr_path)
            self.ocr_stats["missing_rosetta_file"] = self.ocr_stats.get("missing_rosetta_file", 0) + 1
            ocr = {}
        image_dirs = [manual_dir / d for d in cfg.image_dirs.get(split, [])] + [manual_dir / f"{split}_images"]
        data = readers.read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise readers.DatasetInputError(f"{path}: expected {{\"data\": [records]}} (TextVQA format)")
        required = split in cfg.answers_required_splits
        log = self._repair_log(split, f"textvqa/{split}", policy)
        ids = repairs.RepeatedIds(log, reserved={str(it.get("question_id")) for it in data["data"] if isinstance(it, dict)})
        unknown = self._field_counter(split, f"textvqa/{split}")  # image_classes, flickr URLs, ...: logged once
        kept = 0
        for i, item in enumerate(data["data"]):
            record = f"data[{i}]"
            if isinstance(item, dict):
                unknown.check(item, ("question_id", "image_id", "question", "answers"), path=path)
            try:
                if not isinstance(item, dict):
                    raise readers.record_error(path, record, f"expected an object, got {item!r}"[:300])
                if item.get("question_id") is None or item.get("image_id") is None:
                    raise readers.record_error(path, record, "needs 'question_id' and 'image_id'")
                qid, image_id = str(item["question_id"]), str(item["image_id"])
                record = f"question {qid}"
                qid = ids.resolve(qid, [image_id, item.get("question")],
                                  {k: v for k, v in item.items() if k != "question_id"}, path=path, record=record)
                if qid is None:
                    continue
                question = readers.clean_question(item.get("question"), path=path, record=record)
                answers = readers.clean_answers(item.get("answers"), path=path, record=record, required=required)
            except readers.DatasetInputError as e:
                policy.handle("invalid_record", e)
                continue
            image = self._images.load_or_skip(
                readers.find_file(f"{image_id}.jpg", image_dirs), policy, source=path, record=record,
                not_found=f"image file {image_id}.jpg not found in {[str(d) for d in image_dirs]}")
            if image is None:
                continue
            tokens = ocr.get(image_id)
            if tokens is None:
                tokens = []
                if ocr:
                    self.ocr_stats["images_missing_from_rosetta"] = self.ocr_stats.get("images_missing_from_rosetta", 0) + 1
                    logging.warning("%s: no Rosetta OCR record for image %s (question %s)", ocr_path, image_id, qid)
            kept += 1
            yield qid, {
                "image": image.encoded,
                "image_id": image_id,
                "question_id": qid,
                "question": question,
                "answers": answers,
                "qa_type": np.int32(common.QA_TYPE_UNKNOWN),
                "language": "en",
                "ocr": readers.ocr_feature(tokens),
            }
        counter.log_summary(kept)
        unknown.log_summary()
        log.log_summary()
        logging.info("textvqa/%s: OCR stats %s", split, self.ocr_stats)
