"""TFDS builder for ST-VQA (Biten et al., "Scene Text Visual Question Answering", ICCV 2019), read from the
manually downloaded release (https://rrc.cvc.uab.es/?ch=11). Evaluated with ANLS (paper eq. 1).

Source format: ``train_task_<t>.json`` / ``test_task_<t>.json`` (``t`` = 1, 2, 3; ``train.json`` /
``test.json`` are accepted too)::

    {"data": [{"file_path": "coco-text/COCO_train2014_000000xxxxxx.jpg", "question": ..., "answers": [1-2],
               "question_id": int, "dictionary": [100 words] (task 1 only), ...}]}

Images are ``<root>/<file_path>`` with ``<root>`` = ``images_dir`` (config) or, in order, manual_dir,
``images/``, ``<split>/``, ``<split>_images/``. ``image_id`` is ``file_path`` (ST-VQA has no image id).
``qa_type`` is 1 (text QA): every ST-VQA question is answerable from scene text by construction (§3.1).
Test questions have no answers (``answers`` = ``[]``); train questions without answers are an error.

Extra feature ``dictionary`` (Sequence(Text), normalized): the task-1 per-question dictionary of 100
words when the record has one; else, for task 2, the global 30k-word dictionary from
``manual_dir/<global_dictionary_file>`` (one word per line, or a JSON list) when that file exists,
copied into every example; else ``[]``. The builder only carries it; constraining decoding to it is the
decoder's business.

OCR: ``manual_dir/ocr.json`` (``{image_id: [{text, box, score}]}``, keyed by ``file_path``) if present,
else none (``task*`` configs) or Tesseract (``eng``) in the ``task3_tesseract`` config.

Bad input raises :class:`tfds_builders.readers.DatasetInputError` naming the file and the question id;
``skip_missing_images`` / ``skip_invalid_records`` skip instead (counted in ``Builder.skip_counts``, logged). A repeated question id follows
:class:`openvivqa_jax.data.repairs.RepeatedIds` (another question: renamed ``<id>#<n>``; an exact duplicate:
dropped; both counted in ``Builder.repairs[split]`` and logged; the same question with other answers: an error;
the config field ``strict`` refuses the repairs).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds
from absl import logging

try:
    from tfds_builders import beam_build, common, readers
except ImportError:  # loaded by `tfds build tfds_builders/st_vqa` as `st_vqa.st_vqa_dataset_builder`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tfds_builders import beam_build, common, readers

from openvivqa_jax.data import repairs
from openvivqa_jax.text.normalize import normalize_text

_CITATION = """\
@inproceedings{biten2019scene,
  title={Scene Text Visual Question Answering},
  author={Biten, Ali Furkan and Tito, Ruben and Mafla, Andres and Gomez, Lluis and Rusinol, Marcal and
          Valveny, Ernest and Jawahar, C. V. and Karatzas, Dimosthenis},
  booktitle={ICCV},
  year={2019}
}
"""


@dataclasses.dataclass(eq=False)
class StVqaConfig(readers.ReaderConfig):
    """Config of the ST-VQA builder (module doc).

    Attributes:
        task: 1, 2 or 3; selects ``train_task_<task>.json`` / ``test_task_<task>.json``.
        split_files: ``{split: file name(s)}`` overriding the task file names.
        images_dir: image root relative to manual_dir; None = search (module doc).
        global_dictionary_file: task-2 global dictionary (txt, one word per line, or JSON list).
        ocr_engine, ocr_file, ocr_lang: as in :class:`tfds_builders.readers.OcrSource`.
        answers_required_splits: splits where a question without answers is an error.
    """

    task: int = 3
    split_files: dict | None = None
    images_dir: str | None = None
    global_dictionary_file: str = "global_dictionary.txt"
    ocr_engine: str = "auto"
    ocr_file: str = "ocr.json"
    ocr_lang: str = "eng"
    answers_required_splits: tuple = ("train",)


def read_global_dictionary(path: Path) -> list[str]:
    """Reads a global dictionary: a JSON list of strings, or text with one word per line.

    Returns:
        Normalized non-empty words, in file order, duplicates removed.

    Raises:
        DatasetInputError: a JSON file that is not a list of strings.
    """
    if path.suffix == ".json":
        words = readers.read_json(path)
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise readers.DatasetInputError(f"{path}: global dictionary must be a JSON list of strings")
    else:
        words = path.read_text(encoding="utf-8-sig").splitlines()
    return list(dict.fromkeys(w for w in (normalize_text(x) for x in words) if w))


class Builder(readers.BuildCounts, beam_build.BeamWhenAsked, tfds.core.GeneratorBasedBuilder):
    """ST-VQA from its JSON release and images (module doc). Splits: train, test. With Beam options (``tfds build
    ... --beam_pipeline_options=...``) the per-image work runs on Apache Beam (:mod:`tfds_builders.beam_build`)."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {
        "1.1.0": "Adds the language feature (ISO 639-1 code of the question and answers).",
        "1.0.0": "Initial release."}
    BUILDER_CONFIGS = [
        StVqaConfig(name="task1", task=1, description="Strongly contextualised: per-image 100-word dictionaries."),
        StVqaConfig(name="task2", task=2, description="Weakly contextualised: global 30k-word dictionary."),
        StVqaConfig(name="task3", task=3, description="Open dictionary."),
        StVqaConfig(name="task3_tesseract", task=3, ocr_engine="tesseract", description="Open dictionary + Tesseract OCR."),
    ]
    DEFAULT_CONFIG_NAME = "task3"
    MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Register at https://rrc.cvc.uab.es/?ch=11 (Downloads), download the ST-VQA annotations and images, and place:

  <manual_dir>/train_task_<t>.json, <manual_dir>/test_task_<t>.json   (t = 1, 2, 3 as the config)
  <manual_dir>/<file_path of each record>      e.g. coco-text/COCO_train2014_....jpg (or under images/,
                                               train/, test/, train_images/, test_images/)
  <manual_dir>/global_dictionary.txt           task 2 only: the 30k-word dictionary, one word per line
  <manual_dir>/ocr.json                        optional {file_path: [{text, box: [x0,y0,x1,y1] in 0-1, score}]}

Then: tfds build tfds_builders/st_vqa --config task1 --manual_dir=<manual_dir> --file_format=array_record
"""

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=common.vqa_features(
                with_image=True, extra={"dictionary": tfds.features.Sequence(tfds.features.Text())}),
            homepage="https://rrc.cvc.uab.es/?ch=11",
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        cfg = self.builder_config
        manual_dir = Path(dl_manager.manual_dir)
        if cfg.split_files:
            split_files = readers.assign_split_files(manual_dir, "*.json", split_files=cfg.split_files)
        else:
            split_files = {}
            for split in ("train", "test"):
                for name in (f"{split}_task_{cfg.task}.json", f"{split}.json"):
                    if (manual_dir / name).is_file():
                        split_files[split] = [manual_dir / name]
                        break
            if not split_files:
                raise readers.DatasetInputError(
                    f"{manual_dir}: neither train_task_{cfg.task}.json nor test_task_{cfg.task}.json found")
        global_dict: list[str] = []
        gpath = manual_dir / cfg.global_dictionary_file
        if cfg.task == 2:
            if gpath.is_file():
                global_dict = read_global_dictionary(gpath)
                logging.info("st_vqa: global dictionary %s (%d words)", gpath, len(global_dict))
            else:
                logging.warning("st_vqa task 2: no global dictionary %s; 'dictionary' only from records", gpath)
        self._global_dict = global_dict
        self._ocr = readers.OcrSource(cfg.ocr_engine, manual_dir / cfg.ocr_file, auto_fallback="none", lang=cfg.ocr_lang,
                                      skip_invalid=cfg.skip_invalid_records)
        self.ocr_stats = self._ocr.stats
        self._images = readers.ImageCache(self._ocr, cfg.num_workers, cfg.ocr_lang)
        return {split: self._generate_examples(split, files, manual_dir) for split, files in split_files.items()}

    def _generate_local(self, split: str, files: list[Path], manual_dir: Path) -> Iterator[tuple[str, dict]]:
        cfg = self.builder_config
        counter, policy = self._skip_policy(split, f"st_vqa/{split}")
        if cfg.images_dir is not None:
            roots = [manual_dir / cfg.images_dir]
        else:
            roots = [manual_dir, manual_dir / "images", manual_dir / split, manual_dir / f"{split}_images"]
        required = split in cfg.answers_required_splits
        log = self._repair_log(split, f"st_vqa/{split}", policy)
        ids = repairs.RepeatedIds(log)
        unknown = self._field_counter(split, f"st_vqa/{split}")  # set_name, ...: counted and logged once per file
        kept = 0
        for path in files:
            data = readers.read_json(path)
            if not isinstance(data, dict) or not isinstance(data.get("data"), list):
                raise readers.DatasetInputError(f"{path}: expected {{\"data\": [records]}} (ST-VQA format)")
            # Decode + OCR every image of the file in worker processes first (deterministic order).
            self._images.prepare((readers.find_file(it["file_path"], roots), it["file_path"]) for it in data["data"]
                                 if isinstance(it, dict) and isinstance(it.get("file_path"), str)
                                 and it["file_path"].strip())
            ids.reserved.update(str(it.get("question_id")) for it in data["data"] if isinstance(it, dict))
            for i, item in enumerate(data["data"]):
                record = f"data[{i}]"
                if isinstance(item, dict):
                    unknown.check(item, ("question_id", "file_path", "question", "answers", "dictionary"), path=path)
                try:
                    if not isinstance(item, dict):
                        raise readers.record_error(path, record, f"expected an object, got {item!r}")
                    if item.get("question_id") is None:
                        raise readers.record_error(path, record, "no 'question_id'")
                    qid = str(item["question_id"])
                    record = f"question {qid}"
                    qid = ids.resolve(qid, [item.get("file_path"), item.get("question")],
                                      {k: v for k, v in item.items() if k != "question_id"}, path=path, record=record)
                    if qid is None:
                        continue
                    file_path = item.get("file_path")
                    if not isinstance(file_path, str) or not file_path.strip():
                        raise readers.record_error(path, record, f"'file_path' {file_path!r} is not a file path")
                    question = readers.clean_question(item.get("question"), path=path, record=record)
                    answers = readers.clean_answers(item.get("answers"), path=path, record=record, required=required)
                    raw_dict = item.get("dictionary")
                    if raw_dict is not None:
                        if not isinstance(raw_dict, list) or not all(isinstance(w, str) for w in raw_dict):
                            raise readers.record_error(path, record, "'dictionary' must be a list of strings")
                        dictionary = [w for w in (normalize_text(x) for x in raw_dict) if w]
                    else:
                        dictionary = self._global_dict
                except readers.DatasetInputError as e:
                    policy.handle("invalid_record", e)
                    continue
                image = self._images.load_or_skip(
                    readers.find_file(file_path, roots), policy, source=path, record=record,
                    not_found=f"image file {file_path!r} not found under {[str(r) for r in roots]}")
                if image is None:
                    continue
                kept += 1
                yield qid, {
                    "image": image.encoded,
                    "image_id": file_path,
                    "question_id": qid,
                    "question": question,
                    "answers": answers,
                    "qa_type": np.int32(common.QA_TYPE_TEXT),
                    "language": "en",
                    "ocr": readers.ocr_feature(self._ocr.get(file_path, image)),
                    "dictionary": dictionary,
                }
        counter.log_summary(kept)
        unknown.log_summary()
        log.log_summary()
        self._ocr.log_summary(f"st_vqa/{split}")
