"""TFDS builder for UIT-ViQuAD (Nguyen et al., "A Vietnamese Dataset for Evaluating Machine Reading
Comprehension", COLING 2020): text-only extractive QA in SQuAD v1.1 JSON, evaluated with EM/F1.

Source format (SQuAD v1.1)::

    {"version": ..., "data": [{"title": ..., "paragraphs": [{"context": ...,
        "qas": [{"id": ..., "question": ..., "answers": [{"text": ..., "answer_start": int}]}]}]}]}

Files: every ``manual_dir/*.json`` mapped to a split by a train/dev/val/test keyword in its name
(``train_ViQuAD.json`` -> ``train``, ``dev_ViQuAD.json`` -> ``dev``), or config ``split_files``.

Schema: the common VQA features without ``image`` (``with_image=False``) plus ``context`` (Text): the
paragraph, normalized like every other string (docs/design.md §4), so ``answer_start`` offsets no longer apply and
are not kept (the models generate answers). ``question_id`` is the SQuAD ``id``; ``image_id`` is the
article ``title`` (there is no image); ``answers`` are the answer texts in order, duplicates kept;
``qa_type`` -1; ``ocr`` empty. Answers are required in ``answers_required_splits`` (default all).

Bad input raises :class:`tfds_builders.readers.DatasetInputError` naming the file and the question id
(or article/paragraph index); ``skip_invalid_records`` skips questions instead (counted in
``Builder.skip_counts`` and logged).
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
    from tfds_builders import common, readers
except ImportError:  # loaded by `tfds build tfds_builders/viquad` as `viquad.viquad_dataset_builder`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tfds_builders import common, readers

from openvivqa_jax.text.normalize import normalize_text

_CITATION = """\
@inproceedings{nguyen2020vietnamese,
  title={A Vietnamese Dataset for Evaluating Machine Reading Comprehension},
  author={Nguyen, Kiet Van and Nguyen, Duc-Vu and Nguyen, Anh Gia-Tuan and Nguyen, Ngan Luu-Thuy},
  booktitle={COLING},
  year={2020}
}
"""


@dataclasses.dataclass(eq=False)
class ViquadConfig(readers.ReaderConfig):
    """Config of the ViQuAD builder (module doc).

    Attributes:
        split_files: ``{split: file name(s)}``; None = ``*.json`` by file-name keyword.
        answers_required_splits: splits where a question without answers is an error.
    """

    split_files: dict | None = None
    answers_required_splits: tuple = ("train", "dev", "test")


class Builder(tfds.core.GeneratorBasedBuilder):
    """UIT-ViQuAD (SQuAD v1.1 format), text only (module doc)."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {
        "1.1.0": "Adds the language feature (ISO 639-1 code of the question and answers).",
        "1.0.0": "Initial release."}
    BUILDER_CONFIGS = [ViquadConfig(name="default", description="SQuAD v1.1 JSON, text only.")]
    DEFAULT_CONFIG_NAME = "default"
    MANUAL_DOWNLOAD_INSTRUCTIONS = """\
Request UIT-ViQuAD from the authors (https://sites.google.com/uit.edu.vn/uit-nlp/datasets-projects) and place
the SQuAD v1.1 JSON files with a split keyword in their names:

  <manual_dir>/train_ViQuAD.json
  <manual_dir>/dev_ViQuAD.json
  <manual_dir>/test_ViQuAD.json     (optional)

Then: tfds build tfds_builders/viquad --manual_dir=<manual_dir> --file_format=array_record
"""

    def __init__(self, **kwargs):
        """Same arguments as ``tfds.core.GeneratorBasedBuilder``; adds ``skip_counts``."""
        super().__init__(**kwargs)
        self.skip_counts: dict[str, dict[str, int]] = {}
        self.unknown_fields: dict[str, dict] = {}  # split -> {file: Counter(field -> records)}, not stored

    def _info(self) -> tfds.core.DatasetInfo:
        feats = dict(common.vqa_features(with_image=False).items())
        feats["context"] = tfds.features.Text()
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(feats),
            homepage="https://github.com/kietnv/UIT-ViQuAD",
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        cfg = self.builder_config
        manual_dir = Path(dl_manager.manual_dir)
        split_files = readers.assign_split_files(manual_dir, "*.json", split_files=cfg.split_files, default_split="train")
        logging.info("viquad: split files %s", {k: [p.name for p in v] for k, v in split_files.items()})
        return {split: self._generate_examples(split, files) for split, files in split_files.items()}

    def _generate_examples(self, split: str, files: list[Path]) -> Iterator[tuple[str, dict]]:
        cfg = self.builder_config
        counter = readers.SkipCounter(f"viquad/{split}")
        self.skip_counts[split] = counter.counts
        policy = readers.ErrorPolicy(counter, cfg.skip_missing_images, cfg.skip_invalid_records)
        required = split in cfg.answers_required_splits
        seen: set[str] = set()
        unknown = readers.UnknownFields(f"viquad/{split}")  # e.g. is_impossible: counted and logged once per file
        self.unknown_fields[split] = unknown.counts
        kept = 0
        for path in files:
            data = readers.read_json(path)
            if not isinstance(data, dict) or not isinstance(data.get("data"), list):
                raise readers.DatasetInputError(f"{path}: expected {{\"data\": [articles]}} (SQuAD v1.1 format)")
            for ai, article in enumerate(data["data"]):
                if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
                    raise readers.record_error(path, f"data[{ai}]", "article needs a 'paragraphs' list")
                title = str(article.get("title", f"article_{ai}"))
                for pi, para in enumerate(article["paragraphs"]):
                    where = f"data[{ai}].paragraphs[{pi}]"
                    if not isinstance(para, dict) or not isinstance(para.get("qas"), list):
                        raise readers.record_error(path, where, "paragraph needs a 'qas' list")
                    if not isinstance(para.get("context"), str) or not normalize_text(para["context"]):
                        policy.handle("invalid_record", readers.record_error(
                            path, where, f"empty or missing context; its {len(para['qas'])} questions are skipped"))
                        continue
                    context = normalize_text(para["context"])
                    for qi, qa in enumerate(para["qas"]):
                        record = f"{where}.qas[{qi}]"
                        if isinstance(qa, dict):
                            unknown.check(qa, ("id", "question", "answers"), path=path)
                        try:
                            if not isinstance(qa, dict) or qa.get("id") is None:
                                raise readers.record_error(path, record, f"expected an object with 'id', got {qa!r}"[:300])
                            qid = str(qa["id"])
                            record = f"question {qid}"
                            if qid in seen:
                                raise readers.record_error(path, record, "duplicate question id")
                            question = readers.clean_question(qa.get("question"), path=path, record=record)
                            raw = qa.get("answers")
                            if raw is not None and (not isinstance(raw, list) or not all(
                                    isinstance(a, dict) and "text" in a for a in raw)):
                                raise readers.record_error(path, record, f"answers must be a list of {{text, answer_start}}, got {raw!r}"[:300])
                            answers = readers.clean_answers(
                                None if raw is None else [a["text"] for a in raw], path=path, record=record,
                                required=required)
                        except readers.DatasetInputError as e:
                            policy.handle("invalid_record", e)
                            continue
                        seen.add(qid)
                        kept += 1
                        yield qid, {
                            "image_id": title,
                            "question_id": qid,
                            "question": question,
                            "answers": answers,
                            "qa_type": np.int32(common.QA_TYPE_UNKNOWN),
                            "language": "vi",
                            "ocr": common.empty_ocr(),
                            "context": context,
                        }
        counter.log_summary(kept)
        unknown.log_summary()
