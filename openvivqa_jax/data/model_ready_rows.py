"""The rows of a split's model-ready records while they are built (:func:`openvivqa_jax.data.model_ready.build`):
the text fields of every question, and the OCR-token, answer and region-feature rows shared by content
(:class:`SplitRows`), the distinct images decoded and resized by worker processes (:class:`ImageJobs`), and the
files they are written to (:func:`write_fields`). The layout is :mod:`openvivqa_jax.data.model_ready`'s.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import multiprocessing
import os
from collections.abc import Sequence

import numpy as np

from openvivqa_jax.data import decode_worker
from openvivqa_jax.data.pipeline import Preprocessor
from openvivqa_jax.data.records import DatasetError, SkipCounter

__all__ = ["QUESTION_FIELDS", "ANSWER_FIELDS", "OCR_FIELDS", "REGION_FIELDS", "pretrained_fields", "Rows",
           "write_array", "ImageJobs", "ProposalJobs", "SplitRows", "write_fields"]

#: The fields of a question row, an answer row, an OCR token set and a region-feature set.
QUESTION_FIELDS = ("question", "question_mask")
ANSWER_FIELDS = ("decoder_in", "target_vocab", "target_ocr", "target_mask")
OCR_FIELDS = ("ocr_pieces", "ocr_piece_mask", "ocr_phoc", "ocr_boxes", "ocr_mask")
REGION_FIELDS = ("region_features", "region_boxes", "region_mask")


def pretrained_fields(pre: Preprocessor) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The optional fields ``pre``'s batches carry: ``(OCR-set fields, question fields)``: ``ocr_fasttext``
    (the OCR tokens' fastText vectors), ``ocr_pixels`` (the pixels under their boxes) and
    ``question_bert``/``question_bert_mask`` (the pretrained text encoder's ids), ``count_target`` (the
    glimpses' count loss) and ``question_polarity`` (the region verifier's) when the config uses them."""
    ocr = ("ocr_fasttext",) if getattr(pre, "_ocr_fasttext", None) is not None else ()
    if getattr(pre, "ocr_pixels", False):
        ocr += ("ocr_pixels",)
    question = ("question_bert", "question_bert_mask") if getattr(pre, "_question_bert", None) is not None else ()
    if getattr(pre, "count_targets", False):
        question += ("count_target",)
    if getattr(pre, "question_polarity", False):
        question += ("question_polarity",)
    return ocr, question


class Rows:
    """Rows of one group of fields shared by content (a digest of the arrays -> row).

    Fields in ``stream`` are appended to raw files in ``folder`` as rows are added (the region features: 0.4 MB
    a row, too many to hold and stack); the others are kept as arrays and written by :func:`write_array`.
    """

    def __init__(self, fields: Sequence[str], folder: str | None = None, stream: Sequence[str] = ()):
        self.fields = tuple(fields)
        self.stream = {k: open(os.path.join(folder, k), "wb") for k in stream}
        self.stream_meta: dict[str, tuple] = {}
        self.index: dict[bytes, int] = {}
        self.data: dict[str, list] = {k: [] for k in self.fields if k not in self.stream}

    def add(self, feats: dict) -> int:
        h = hashlib.blake2b(digest_size=16)
        for k in self.fields:
            a = np.ascontiguousarray(feats[k])
            h.update(str((a.dtype.str, a.shape)).encode())
            h.update(a.tobytes())
        key = h.digest()
        row = self.index.get(key)
        if row is None:
            row = self.index[key] = len(self.index)
            for k in self.fields:
                a = np.ascontiguousarray(feats[k])
                if k in self.stream:
                    meta = (a.dtype.str, a.shape)
                    if self.stream_meta.setdefault(k, meta) != meta:
                        raise ValueError(f"{k}: row {row} is {meta}, earlier rows {self.stream_meta[k]}")
                    self.stream[k].write(a.tobytes())
                else:
                    self.data[k].append(a)
        return row

    def close(self, files: dict) -> None:
        """Closes the streamed files and records their dtype and shape in ``files``."""
        for k, f in self.stream.items():
            f.close()
            dtype, shape = self.stream_meta.get(k, ("<f4", ()))
            files[k] = {"dtype": dtype, "shape": [len(self.index), *shape]}


def write_array(tmp: str, name: str, arr: np.ndarray, files: dict) -> None:
    """Writes ``arr`` as the raw file ``<tmp>/<name>`` and records its dtype and shape in ``files``."""
    path = os.path.join(tmp, name)
    arr = np.ascontiguousarray(arr)
    with open(path, "wb") as f:
        f.write(arr.tobytes())
    files[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape)}


class ImageJobs:
    """The distinct images of a split, decoded and resized by ``workers`` spawned processes into the raw ``image``
    file ``(I, H, W, 3)`` uint8, 16 images a job, each written at its row (so the file is the same for any number
    of workers)."""

    def __init__(self, pre: Preprocessor, path: str, workers: int):
        self.pre, self.path = pre, path
        self.pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        self.rows: dict[tuple, int] = {}
        self.first_question: dict[int, str] = {}
        self.futures: collections.deque = collections.deque()  # submitted, result not yet checked; oldest first
        self.pending: list = []
        # A submitted job holds its JPEG bytes in this process until a worker has taken it: without a bound the
        # text work (faster than decoding) would queue every JPEG of the split (about 3 GB for the release's
        # train split). A few jobs per worker keep them busy.
        self.max_in_flight = 4 * workers

    def add(self, rec) -> int:
        """The image row of record ``rec`` (one row per image id and content); a new row is queued for decoding.

        Raises:
          DatasetError: the record has no image.
        """
        if rec.image_bytes is None:
            raise DatasetError(f"question {rec.question_id!r}: no image for vision kind {self.pre.vision_kind!r}")
        data = bytes(rec.image_bytes)
        key = (rec.image_id, hashlib.blake2b(data, digest_size=16).digest())
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = len(self.rows)
            self.first_question[row] = rec.question_id
            self.pending.append((row, repr(rec.image_id), data))
            if len(self.pending) >= 16:
                self._flush()
        return row

    def _flush(self) -> None:
        """Submits the queued images as one job."""
        if self.pending:
            self.futures.append(self._submit(list(self.pending)))
            self.pending.clear()
        while len(self.futures) > self.max_in_flight:
            self._check(self.futures.popleft())

    def files(self) -> dict[str, dict]:
        """``{file name: {dtype, shape}}`` of what the workers write: ``image`` ``(I, H, W, 3)`` uint8."""
        return {"image": {"dtype": "|u1", "shape": [len(self.rows), self.pre.image_h, self.pre.image_w, 3]}}

    def _submit(self, items: list):
        """Starts one job on ``items`` (``(row, name, encoded bytes)`` each); returns its future."""
        return self.pool.submit(decode_worker.decode_into, self.path, items, self.pre.image_w, self.pre.image_h,
                                self.pre.max_image_pixels)

    def _check(self, future) -> None:
        """Waits for one job.

        Raises:
          DatasetError: an image of the job could not be decoded (named by the first question that uses it).
        """
        bad = future.result()
        if bad:
            row, msg = bad[0]
            raise DatasetError(f"question {self.first_question[row]!r}: {msg}")

    def finish(self) -> None:
        """Submits the last job and waits for every job.

        Raises:
          DatasetError: an image could not be decoded (named by the first question that uses it).
        """
        self._flush()
        while self.futures:
            self._check(self.futures.popleft())

    def abort(self) -> None:
        """After an error: cancels the jobs not started and stops the pool."""
        for f in self.futures:
            f.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.pool = None

    def close(self) -> None:
        """Stops the pool (if :meth:`abort` has not)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)


class ProposalJobs(ImageJobs):
    """The class-free region proposals (vision kind ``proposals``) of a split's distinct pictures, made by
    ``workers`` spawned processes, 16 pictures a job, each written at its picture's row of the raw files
    ``region_features (I, R, D) float32``, ``region_boxes (I, R, 4) float32`` and ``region_mask (I, R) bool`` in
    ``tmp`` (so the files are the same for any number of workers). Each picture is segmented once, however its
    questions are ordered; the results are ``Preprocessor``'s (the same function and settings)."""

    def __init__(self, pre: Preprocessor, tmp: str, workers: int, counter: SkipCounter):
        paths = {k: os.path.join(tmp, k) for k in REGION_FIELDS}
        for path in paths.values():
            open(path, "wb").close()
        super().__init__(pre, paths, workers)
        self.settings = pre.proposal_settings()
        self.counter = counter

    def _submit(self, items: list):
        return self.pool.submit(decode_worker.proposals_into, self.path, items, self.settings)

    def _check(self, future) -> None:
        """Waits for one job and counts the segments beyond ``num_regions``.

        Raises:
          DatasetError: a picture of the job could not be decoded (named by the first question that uses it).
        """
        bad, beyond = future.result()
        if beyond:
            self.counter.add("proposal_segments_beyond_num_regions", beyond)
        if bad:
            row, msg = bad[0]
            raise DatasetError(f"question {self.first_question[row]!r}: {msg}")

    def files(self) -> dict[str, dict]:
        """``{file name: {dtype, shape}}`` of the three region files."""
        n, R, D = len(self.rows), self.settings["num_regions"], self.pre.region_dim
        return {"region_features": {"dtype": "<f4", "shape": [n, R, D]},
                "region_boxes": {"dtype": "<f4", "shape": [n, R, 4]},
                "region_mask": {"dtype": "|b1", "shape": [n, R]}}


class SplitRows:
    """Every field but the pixels, collected in question order (``Q`` questions, ``A`` answer rows, ``G`` OCR
    sets, ``I`` region-feature sets).

    ``q_image``, ``q_ocr``, ``q_start`` (first answer row), ``q_count`` (references): ``(Q,)`` int32;
    ``qfields[k]``: one array per question (``(Lq,)``); ``afields[k]``: one array per answer row (``(L,)``,
    ``target_ocr`` ``(L, N)``); ``ocr``: the distinct OCR token sets; ``regions``: the distinct region-feature
    sets (vision kind region; ``region_features`` streamed to ``tmp``).
    """

    def __init__(self, pre: Preprocessor, n: int, tmp: str, image_rows: bool):
        #: True: the vision input is stored once per distinct picture by worker processes (the pixels, or the
        #: class-free proposals), and each question is given its picture's row; False: pre-extracted region
        #: features, shared by content here.
        self.image_rows = image_rows
        self.regions = Rows(REGION_FIELDS, tmp, stream=() if image_rows else ("region_features",))
        extra_ocr, extra_question = pretrained_fields(pre)
        self.ocr_fields, self.question_fields = (*OCR_FIELDS, *extra_ocr), (*QUESTION_FIELDS, *extra_question)
        self.ocr = Rows(self.ocr_fields)
        self.phoc_binary = True
        self.q_image = np.full((n,), -1, np.int32)
        self.q_ocr = np.zeros((n,), np.int32)
        self.q_start = np.zeros((n,), np.int32)
        self.q_count = np.zeros((n,), np.int32)
        self.qfields: dict[str, list] = {k: [] for k in self.question_fields}
        self.afields: dict[str, list] = {k: [] for k in ANSWER_FIELDS}
        self.question_ids: list[str] = []
        self.num_answer_rows = 0

    def add(self, i: int, rec, image_row: int | None, text_pre: Preprocessor, pre: Preprocessor,
            counter: SkipCounter) -> None:
        """Adds question ``i`` (record ``rec``; ``image_row``: its picture's row of pixels or proposals, None for
        region features, which are added as a row here): the fields ``text_pre.features`` makes with the first
        reference answer, and one answer row per other reference.

        Raises:
          DatasetError: from ``text_pre.features`` (a bad record).
        """
        if self.image_rows:
            self.q_image[i] = image_row
        self.question_ids.append(rec.question_id)
        answers = rec.answers
        feats = text_pre.features(rec, answers[0] if answers else None)
        if not self.image_rows:
            self.q_image[i] = self.regions.add(feats)
        ph = feats["ocr_phoc"]
        if self.phoc_binary and np.all((ph == 0) | (ph == 1)):
            feats["ocr_phoc"] = ph.astype(np.uint8)  # a binary histogram: exact in a quarter of the bytes
        else:
            self.phoc_binary = False
        self.q_ocr[i] = self.ocr.add(feats)
        for k in self.question_fields:
            self.qfields[k].append(feats[k])
        self.q_start[i], self.q_count[i] = self.num_answer_rows, len(answers)
        for k in ANSWER_FIELDS:
            self.afields[k].append(feats[k])
        texts = rec.ocr_texts[: pre.num_ocr]
        for a in answers[1:]:  # the other references: the same encoding features() gives each
            enc = pre.vocab.encode(a, texts)
            counter.add("answers_encoded")
            if enc.truncated:
                counter.add("answer_truncated")
            for k in ANSWER_FIELDS:
                self.afields[k].append(getattr(enc, k))
        self.num_answer_rows += max(1, len(answers))


def write_fields(tmp: str, rows: SplitRows, jobs: ImageJobs | None) -> dict[str, dict]:
    """Writes every field but those the workers of ``jobs`` wrote (``image`` for vision kinds cnn / vit, the
    three region files for proposals) to ``tmp``; returns ``{file name: {dtype, shape}}`` in the manifest's
    order (the workers' files first)."""
    files: dict[str, dict] = {}
    if jobs is not None:
        files.update(jobs.files())
    else:
        # float32 (the batches' dtype, as Preprocessor.features gives it) even where the dataset stores float16:
        # numpy's float16 -> float32 conversion took 35 ms per batch of 64 x 50 x 2048 on a 2-core x86 VM, a
        # float32 gather about 1 ms; it costs twice the disk (0.4 MB per image of 50 x 2048 regions).
        rows.regions.close(files)
        write_array(tmp, "region_boxes", np.stack(rows.regions.data["region_boxes"]), files)
        write_array(tmp, "region_mask", np.stack(rows.regions.data["region_mask"]), files)
    for name, arr in (("q_image", rows.q_image), ("q_ocr", rows.q_ocr), ("q_answer_start", rows.q_start),
                      ("q_answer_count", rows.q_count)):
        write_array(tmp, name, arr, files)
    for k in rows.question_fields:
        write_array(tmp, k, np.stack(rows.qfields[k]), files)
    for k in ANSWER_FIELDS:
        write_array(tmp, k, np.stack(rows.afields[k]), files)
    for k in rows.ocr_fields:
        arr = np.stack(rows.ocr.data[k])  # PHOC: uint8 if every row was binary, else float32 (exact either way)
        write_array(tmp, k, arr, files)
        del arr
    return files
