"""TFDS builder for UIT-ViQuAD (Nguyen et al., "A Vietnamese Dataset for Evaluating Machine Reading
Comprehension", COLING 2020): text-only extractive QA in SQuAD v1.1 JSON, evaluated with EM/F1.

Source format (SQuAD v1.1)::

    {"version": ..., "data": [{"title": ..., "paragraphs": [{"context": ...,
        "qas": [{"id": ..., "question": ..., "answers": [{"text": ..., "answer_start": int}]}]}]}]}

Configs:

- ``default``: the release's files, every ``manual_dir/*.json`` mapped to a split by a train/dev/val/test
  keyword in its name (``train_ViQuAD.json`` -> ``train``, ``dev_ViQuAD.json`` -> ``dev``, ``test_ViQuAD.json``
  -> ``test``), or config ``split_files``.
- ``synthetic``: a generated ViQuAD-format set (:mod:`.synthetic`: Vietnamese passages with answer spans,
  four answers per dev/test question) made in memory, no file needed; read by the same parser.

Schema: the common VQA features without ``image`` (``with_image=False``) plus

- ``context`` (Text): the paragraph normalized like every other string (docs/design.md §4), for the answer
  generators;
- ``passage`` (Text): the paragraph exactly as in the file (what a span reader's answers are cut from);
- ``answer_texts`` (Sequence Text), ``answer_starts``, ``answer_ends`` (Sequence int32): each answer as
  written and its characters ``passage[start:end]`` (code points; ``answer_start`` of the file, ``end`` where
  the answer's text ends there).

``question_id`` is the SQuAD ``id``; ``image_id`` is the article ``title`` (there is no image); ``answers`` are
the answer texts normalized, in order, duplicates kept; ``qa_type`` -1; ``ocr`` empty. Answers are required in
``answers_required_splits`` (default all).

An answer matches its ``answer_start`` when the passage's characters there are the answer's text, also in
another Unicode form or tone-mark convention (an NFD passage, ``Hoà`` for ``Hòa``): the normalized texts
(:func:`~openvivqa_jax.text.normalize.normalize_text`) of the answer and of a passage slice starting at
``answer_start`` are equal.

Bad input raises :class:`tfds_builders.readers.DatasetInputError` (:class:`AnswerSpanError` for spans) naming
the file and the question id (or article/paragraph index): a span outside its passage, an answer whose text is
not at its ``answer_start`` (with where the text does occur), an ``answer_start`` that is not an integer;
``skip_invalid_records`` skips such questions instead (counted in ``Builder.skip_counts`` and logged).
"""

from __future__ import annotations

import dataclasses
import sys
import unicodedata
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
        split_files: ``{split: file name(s)}``; None = ``*.json`` by file-name keyword.
        answers_required_splits: splits where a question without answers is an error.
    """

    split_files: dict | None = None
    answers_required_splits: tuple = ("train", "dev", "test")
    synthetic: bool = False
    synthetic_sizes: dict | None = None


class AnswerSpanError(readers.DatasetInputError, UserError):
    """An answer span that does not fit its passage: outside it, or not where ``answer_start`` says."""


def _norm(text: str) -> str:
    return normalize_text(text, spaced_punctuation=False)


def answer_end(passage: str, text: str, start: int) -> int | None:
    """Where an answer of ``text`` starting at character ``start`` of ``passage`` ends (exclusive), or None when
    the passage there does not hold it (module doc: the same text up to Unicode form and tone-mark convention).
    """
    n = len(text)
    if passage[start:start + n] == text:
        return start + n
    want = _norm(text)
    if not want:
        return None
    # Another Unicode form or tone placement: the slice may be longer or shorter (NFD letters). The shortest
    # slice that normalizes to the answer, with the combining marks of its last letter.
    for end in range(start + 1, min(len(passage), start + 3 * n + 2) + 1):
        if _norm(passage[start:end]) == want:
            while end < len(passage) and unicodedata.category(passage[end]).startswith("M"):
                end += 1
            return end if _norm(passage[start:end]) == want else None
    return None


def _where(passage: str, text: str) -> str:
    """Where ``text`` does occur in ``passage`` (for the error message)."""
    hits = [i for i in range(len(passage)) if passage.startswith(text, i)][:3]
    if hits:
        return f"the text occurs at {', '.join(map(str, hits))}"
    return "the text does not occur in the passage as written"


class Builder(readers.BuildCounts, tfds.core.GeneratorBasedBuilder):
    """UIT-ViQuAD (SQuAD v1.1 format), text only (module doc)."""

    VERSION = tfds.core.Version("1.2.0")
    RELEASE_NOTES = {
        "1.2.0": "Adds passage, answer_texts, answer_starts, answer_ends (the spans, checked) and the synthetic "
                 "config.",
        "1.1.0": "Adds the language feature (ISO 639-1 code of the question and answers).",
        "1.0.0": "Initial release."}
    BUILDER_CONFIGS = [
        ViquadConfig(name="default", description="SQuAD v1.1 JSON, text only."),
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
        logging.info("viquad: split files %s", {k: [p.name for p in v] for k, v in split_files.items()})
        return {split: self._generate_examples(split, files) for split, files in split_files.items()}

    def _generate_examples(self, split: str, files: list, loaded: dict | None = None) -> Iterator[tuple[str, dict]]:
        cfg = self.builder_config
        counter, policy = self._skip_policy(split, f"viquad/{split}")
        required = split in cfg.answers_required_splits
        seen: set[str] = set()
        unknown = self._field_counter(split, f"viquad/{split}")  # e.g. is_impossible: counted and logged once per file
        kept = 0
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
                    passage = para["context"]
                    context = normalize_text(passage)
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
                            texts, starts, ends = self._spans(raw or [], passage, path, record)
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
                            "passage": passage,
                            "answer_texts": texts,
                            "answer_starts": np.asarray(starts, np.int32),
                            "answer_ends": np.asarray(ends, np.int32),
                        }
        counter.log_summary(kept)
        unknown.log_summary()

    @staticmethod
    def _spans(raw: list, passage: str, path, record: str) -> tuple[list[str], list[int], list[int]]:
        """The answers' texts, starts and ends in ``passage`` (module doc).

        Raises:
          AnswerSpanError: an ``answer_start`` that is not an integer, outside the passage, or where the
            passage does not hold the answer's text.
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
            end = answer_end(passage, text, start) if 0 <= start < len(passage) else None
            if end is None and not (0 <= start and start + len(text) <= len(passage)):
                raise readers.record_error(path, record, f"{what}: span [{start}, {start + len(text)}) is outside "
                                           f"its passage of {len(passage)} characters", AnswerSpanError)
            if end is None:
                found = passage[start:start + len(text)]
                raise readers.record_error(path, record, f"{what} does not match its answer_start {start}: the "
                                           f"passage has {found!r} there; {_where(passage, text)}", AnswerSpanError)
            texts.append(text)
            starts.append(start)
            ends.append(end)
        return texts, starts, ends
