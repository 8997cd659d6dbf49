"""TFDS builder for UIT-ViQuAD (Nguyen et al., "A Vietnamese Dataset for Evaluating Machine Reading
Comprehension", COLING 2020): text-only extractive QA in SQuAD v1.1 JSON, evaluated with EM/F1.

Source format (SQuAD v1.1)::

    {"version": ..., "data": [{"title": ..., "paragraphs": [{"context": ...,
        "qas": [{"id": ..., "question": ..., "answers": [{"text": ..., "answer_start": int}]}]}]}]}

Configs:

- ``default``: the release's files, every ``manual_dir/*.json`` mapped to a split by a train/dev/val/test
  keyword in its name (``train_ViQuAD.json`` -> ``train``, ``dev_ViQuAD.json`` -> ``dev``, ``test_ViQuAD.json``
  -> ``test``), or config ``split_files``.
- ``v1_eval_v2_train``: the public files as they can be had: dev and test from the UIT-ViQuAD 1.0 files
  ``dev_ViQuAD.json`` and ``test_ViQuAD.json``, train from the UIT-ViQuAD 2.0 fold files ``v2/dev-*.json``
  (VLSP 2021; overlapping folds, SQuAD 2.0 form). The folds' repeats are dropped after their first file
  (counted) and their unanswerable questions are left out of train (counted): 11,626 answerable questions,
  none of them in the 1.0 dev or test files.
- ``synthetic``: a generated ViQuAD-format set (:mod:`.synthetic`: Vietnamese passages with answer spans,
  four answers per dev/test question) made in memory, no file needed; read by the same parser.

Schema: the common VQA features without ``image`` (``with_image=False``) plus

- ``context`` (Text): the paragraph normalized like every other string (docs/design.md §4), for the answer
  generators;
- ``passage`` (Text): the paragraph exactly as in the file (what a span reader's answers are cut from);
- ``answer_texts`` (Sequence Text), ``answer_starts``, ``answer_ends`` (Sequence int32): each answer as
  written and its characters ``passage[start:end]`` (code points; ``answer_start`` of the file, or where the
  answer was re-anchored, and ``end`` where the answer's text ends there).

``question_id`` is the SQuAD ``id`` (``<id>#<n>`` for a repeated id renamed); ``image_id`` is the article
``title`` (there is no image); ``answers`` are the answer texts normalized, in order, duplicates kept;
``qa_type`` -1; ``ocr`` empty. Answers are required in ``answers_required_splits`` (default all). A SQuAD 2.0
question marked ``is_impossible`` is left out of the splits of ``leave_out_unanswerable`` (default train;
counted), and is an error in another split that requires answers; ``plausible_answers`` are not stored
(counted and logged as a field not stored).

An answer is at its ``answer_start`` when the passage's characters there are the answer's text, also in
another Unicode form or tone-mark convention (an NFD passage, ``Hoà`` for ``Hòa``):
:func:`openvivqa_jax.data.repairs.answer_at`.

Known flaws of the releases are repaired, counted per file in ``Builder.repairs[split]``, logged (one line
per kind and file with the first ids) and written to the build's notes (``openvivqa_build_notes.json``,
docs/datasets.md): an answer off its ``answer_start`` is re-anchored to the nearest occurrence of its text; a
repeated id carrying another question is renamed ``<id>#2``; an exact duplicate is dropped
(:mod:`openvivqa_jax.data.repairs`). Dev and test keep every question. The config field ``strict`` refuses
these flaws instead.

Bad input raises :class:`tfds_builders.readers.DatasetInputError` (:class:`AnswerSpanError` for spans) naming
the file and the question id (or article/paragraph index): an answer whose text is not in its passage (or
occurs twice, equally near its ``answer_start``), an ``answer_start`` that is not an integer, a repeated id
with the same question and other answers; ``skip_invalid_records`` skips such questions instead (counted in
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

from openvivqa_jax.data import build_check, repairs
from openvivqa_jax.errors import UserError
from openvivqa_jax.text.normalize import normalize_text

try:
    from . import synthetic
except ImportError:  # loaded as a top-level module by `tfds build`
    from viquad import synthetic  # type: ignore[no-redef]

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
        split_files: ``{split: file name(s) or glob pattern(s)}``; None = ``*.json`` by file-name keyword.
        answers_required_splits: splits where a question without answers is an error.
        fold_splits: splits whose files are overlapping folds of one set: a record repeated from an earlier
            file is dropped (counted; also under ``strict``).
        leave_out_unanswerable: splits that leave out SQuAD 2.0 questions marked ``is_impossible`` (counted).
        synthetic, synthetic_sizes: the generated set (:mod:`.synthetic`) and its passages per split.
    """

    split_files: dict | None = None
    answers_required_splits: tuple = ("train", "dev", "test")
    fold_splits: tuple = ()
    leave_out_unanswerable: tuple = ("train",)
    synthetic: bool = False
    synthetic_sizes: dict | None = None


class AnswerSpanError(readers.DatasetInputError, UserError):
    """An answer span that cannot be placed in its passage: its text is not there, or occurs twice equally near
    its ``answer_start``, or the offset is not an integer."""


#: The layout of the public files (config ``v1_eval_v2_train``, module doc).
V1_EVAL_V2_TRAIN = {"train": "v2/dev-*.json", "dev": "dev_ViQuAD.json", "test": "test_ViQuAD.json"}
#: Fields of a question the builder reads (others, e.g. SQuAD 2.0's ``plausible_answers``, are counted and logged).
QUESTION_FIELDS = ("id", "question", "answers", "is_impossible")
#: Kept for callers of the earlier name: where an answer of ``text`` at ``start`` ends.
answer_end = repairs.answer_end


def _where(passage: str, text: str) -> str:
    """Where ``text`` does occur in ``passage`` (for the error message)."""
    hits = [i for i in range(len(passage)) if passage.startswith(text, i)][:3]
    if hits:
        return f"the text occurs at {', '.join(map(str, hits))}"
    return "the text does not occur in the passage as written"


class Builder(readers.BuildCounts, build_check.RecordsSources, tfds.core.GeneratorBasedBuilder):
    """UIT-ViQuAD (SQuAD v1.1 format), text only (module doc)."""

    VERSION = tfds.core.Version("1.3.0")
    RELEASE_NOTES = {
        "1.3.0": "Repairs the releases' known flaws (answer_start re-anchored, repeated ids renamed <id>#<n>, exact "
                 "duplicates dropped; config field strict refuses them), leaves unanswerable questions out of "
                 "train, and adds the v1_eval_v2_train config.",
        "1.2.0": "Adds passage, answer_texts, answer_starts, answer_ends (the spans, checked) and the synthetic "
                 "config.",
        "1.1.0": "Adds the language feature (ISO 639-1 code of the question and answers).",
        "1.0.0": "Initial release."}
    BUILDER_CONFIGS = [
        ViquadConfig(name="default", description="SQuAD v1.1 JSON, text only."),
        ViquadConfig(name="v1_eval_v2_train", split_files=V1_EVAL_V2_TRAIN, fold_splits=("train",),
                     description="Dev/test: the UIT-ViQuAD 1.0 files; train: the answerable questions of the "
                                 "UIT-ViQuAD 2.0 fold files v2/dev-*.json, deduplicated."),
        ViquadConfig(name="synthetic", synthetic=True,
                     description="Generated Vietnamese passages with answer spans (no files needed)."),
    ]
    DEFAULT_CONFIG_NAME = "default"
    _INSTRUCTIONS = """\
Request UIT-ViQuAD from the authors (https://sites.google.com/uit.edu.vn/uit-nlp/datasets-projects) and place
the SQuAD v1.1 JSON files with a split keyword in their names:

  <manual_dir>/train_ViQuAD.json
  <manual_dir>/dev_ViQuAD.json
  <manual_dir>/test_ViQuAD.json     (optional)

Then: tfds build tfds_builders/viquad --manual_dir=<manual_dir> --file_format=array_record

Without the 1.0 train file (config v1_eval_v2_train): the public 1.0 dev/test files as above and the
UIT-ViQuAD 2.0 fold files as <manual_dir>/v2/dev-0.json ... dev-9.json; train = their answerable questions.
"""

    @property
    def MANUAL_DOWNLOAD_INSTRUCTIONS(self) -> str:  # noqa: N802 (TFDS's name)
        """The download instructions; none for the synthetic config (it reads no file)."""
        return "" if self.builder_config.synthetic else self._INSTRUCTIONS

    def _info(self) -> tfds.core.DatasetInfo:
        spans = {
            "context": tfds.features.Text(),
            "passage": tfds.features.Text(),
            "answer_texts": tfds.features.Sequence(tfds.features.Text()),
            "answer_starts": tfds.features.Sequence(np.int32),
            "answer_ends": tfds.features.Sequence(np.int32),
        }
        return self.dataset_info_from_configs(
            features=common.vqa_features(with_image=False, extra=spans),
            homepage="https://github.com/kietnv/UIT-ViQuAD",
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        cfg = self.builder_config
        if cfg.synthetic:
            data = synthetic.synthetic_dataset(cfg.synthetic_sizes)
            return {split: self._generate_examples(split, [f"<synthetic {split}>"], {f"<synthetic {split}>": d})
                    for split, d in data.items()}
        manual_dir = Path(dl_manager.manual_dir)
        split_files = readers.assign_split_files(manual_dir, "*.json", split_files=cfg.split_files, default_split="train")
        logging.info("viquad/%s: split files %s", cfg.name,
                     {k: [p.relative_to(manual_dir).as_posix() for p in v] for k, v in split_files.items()})
        if "train" not in split_files and not cfg.split_files and list(manual_dir.glob("v2/dev-*.json")):
            logging.warning("viquad/%s: %s holds no train file; its v2/dev-*.json look like the UIT-ViQuAD 2.0 "
                            "folds, which config v1_eval_v2_train reads as train", cfg.name, manual_dir)
        return {split: self._generate_examples(split, files) for split, files in split_files.items()}

    def _generate_examples(self, split: str, files: list, loaded: dict | None = None) -> Iterator[tuple[str, dict]]:
        cfg = self.builder_config
        name = f"viquad/{split}"
        counter, policy = self._skip_policy(split, name)
        unknown = self._field_counter(split, name)  # fields not stored: counted and logged once per file
        log = self._repair_log(split, name, policy)
        questions = list(self._questions(files, loaded, policy, unknown))
        ids = repairs.RepeatedIds(log, fold_files=split in cfg.fold_splits,
                                  reserved={str(q["id"]) for *_, q in questions if isinstance(q, dict) and "id" in q})
        kept = 0
        for path, where, title, passage, qa in questions:
            try:
                example = self._example(split, path, where, title, passage, qa, ids, log)
            except readers.DatasetInputError as e:
                policy.handle("invalid_record", e)
                continue
            if example is not None:
                kept += 1
                yield example["question_id"], example
        counter.log_summary(kept)
        unknown.log_summary()
        log.log_summary()

    @staticmethod
    def _questions(files: list, loaded: dict | None, policy: readers.ErrorPolicy,
                   unknown: readers.UnknownFields) -> Iterator[tuple]:
        """Every question of ``files``: ``(path, record label, title, passage, raw qa)`` in file order.

        Raises:
          DatasetInputError: a file or an article/paragraph without the SQuAD structure; an empty passage
            (unless skipped: its questions are skipped with it).
        """
        for path in files:
            data = loaded[path] if loaded else readers.read_json(path)
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
                    for qi, qa in enumerate(para["qas"]):
                        if isinstance(qa, dict):
                            unknown.check(qa, QUESTION_FIELDS, path=path)
                        yield path, f"{where}.qas[{qi}]", title, para["context"], qa

    def _example(self, split: str, path, where: str, title: str, passage: str, qa,
                 ids: repairs.RepeatedIds, log: repairs.RepairLog) -> dict | None:
        """One question's example, or None when it is dropped (a duplicate, an unanswerable question left out, a
        flaw refused under ``strict`` and skipped).

        Raises:
          DatasetInputError: a bad record (module doc).
        """
        cfg = self.builder_config
        if not isinstance(qa, dict) or qa.get("id") is None:
            raise readers.record_error(path, where, f"expected an object with 'id', got {qa!r}"[:300])
        qid = str(qa["id"])
        record = f"question {qid}"
        content = {k: v for k, v in qa.items() if k != "id"}
        new_id = ids.resolve(qid, [qa.get("question"), passage], content, path=path, record=record)
        if new_id is None:
            return None
        required = split in cfg.answers_required_splits
        raw = qa.get("answers")
        if qa.get("is_impossible") is True:
            if split in cfg.leave_out_unanswerable:
                log.apply("unanswerable_left_out", path, new_id, record=record, what="")
                return None
            if required:
                raise readers.record_error(path, record, f"unanswerable question (is_impossible) in split {split!r}, "
                                           "which requires answers; the config field leave_out_unanswerable names "
                                           "the splits that leave such questions out")
        question = readers.clean_question(qa.get("question"), path=path, record=record)
        if raw is not None and (not isinstance(raw, list) or not all(isinstance(a, dict) and "text" in a for a in raw)):
            raise readers.record_error(path, record, f"answers must be a list of {{text, answer_start}}, got {raw!r}"[:300])
        answers = readers.clean_answers(None if raw is None else [a["text"] for a in raw], path=path, record=record,
                                        required=required)
        spans = self._spans(raw or [], passage, path, record, new_id, log)
        if spans is None:
            return None
        texts, starts, ends = spans
        return {
            "image_id": title,
            "question_id": new_id,
            "question": question,
            "answers": answers,
            "qa_type": np.int32(common.QA_TYPE_UNKNOWN),
            "language": "vi",
            "ocr": common.empty_ocr(),
            "context": normalize_text(passage),
            "passage": passage,
            "answer_texts": texts,
            "answer_starts": np.asarray(starts, np.int32),
            "answer_ends": np.asarray(ends, np.int32),
        }

    @staticmethod
    def _spans(raw: list, passage: str, path, record: str, qid: str,
               log: repairs.RepairLog) -> tuple[list[str], list[int], list[int]] | None:
        """The answers' texts, starts and ends in ``passage`` (module doc), an answer off its ``answer_start``
        re-anchored (counted in ``log``); None when ``strict`` refused one and the policy skips the question.

        Raises:
          AnswerSpanError: an ``answer_start`` that is not an integer; an answer whose text is not in the
            passage, or occurs twice equally near its ``answer_start``.
          DatasetInputError: an answer off its ``answer_start`` under ``strict``.
        """
        texts, starts, ends = [], [], []
        for i, a in enumerate(raw):
            text, start = a["text"], a.get("answer_start")
            if not isinstance(text, str) or not text.strip():
                continue  # clean_answers has judged it (empty answers beside others are errors there)
            what = f"answer {i} {text!r}"
            if isinstance(start, bool) or not isinstance(start, int):
                raise readers.record_error(path, record, f"{what}: answer_start must be an integer character "
                                           f"offset, got {start!r}", AnswerSpanError)
            try:
                begin, end, moved = repairs.locate_answer(passage, text, start)
            except repairs.AnswerNotFound as e:
                raise readers.record_error(path, record, f"{what} (answer_start {start}): {e}", AnswerSpanError) from None
            if moved and not log.apply(
                    "answer_start_reanchored", path, qid, record=record,
                    what=f"{what} does not match its answer_start {start}: the passage has "
                         f"{passage[max(start, 0):max(start, 0) + len(text)]!r} there; {_where(passage, text)}"):
                return None
            texts.append(text)
            starts.append(begin)
            ends.append(end)
        return texts, starts, ends
