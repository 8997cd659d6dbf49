"""Model-ready records: the per-example work that does not change between epochs, done once per split.

:class:`~openvivqa_jax.data.pipeline.Preprocessor` turns a record into fixed-shape arrays on every visit: JPEG
decoding and resizing (about 24 ms of CPU for a 1600x1200 photo), tokenization, PHOC and answer targets. None of
it depends on the epoch except which reference answer is drawn. :func:`build` runs it once over a split and
stores the results as raw little-endian arrays, one file per field, which training memory-maps and gathers
batches from (:func:`train_iterator`, :func:`eval_batches`).

Layout of ``<root>/<split>/`` (shapes by named axes; ``Q`` questions, ``A`` answer rows, ``G`` distinct OCR
token sets, ``I`` distinct images or region-feature sets)::

    manifest.json                 format, the inputs' key (``fingerprint``), per file dtype / shape / bytes /
                                  crc32, the build's counters, time and date; written last
    q_image (Q,) int32            row of image / region_* (-1: none)
    q_ocr (Q,) int32              row of the ocr_* files
    q_answer_start (Q,) int32     first answer row; q_answer_count (Q,) int32 references (0: none)
    question, question_mask (Q, Lq)
    decoder_in, target_vocab, target_mask (A, L); target_ocr (A, L, N)   one row per reference answer
                                  (a question without answers has one row, encoded as the empty answer,
                                  target_mask all False, as Preprocessor.features(rec, None) gives)
    ocr_pieces, ocr_piece_mask (G, N, P); ocr_phoc (G, N, phoc_dim) uint8 when binary, else float32;
    ocr_boxes (G, N, 4); ocr_mask (G, N)
    image (I, H, W, 3) uint8      vision kinds cnn / vit: each distinct image once
    region_features (I, R, D) float32; region_boxes (I, R, 4); region_mask (I, R)   vision kind region, or
                                  proposals (each distinct picture's, made once by the workers)

The rows are collected and written by :mod:`openvivqa_jax.data.model_ready_rows`. Every array equals what
``Preprocessor.features`` returns for the same record and answer (the text fields are
made by that very method; the pixels by :func:`openvivqa_jax.data.images.decode_image` and the same bilinear
resize, in ``data.preprocess_workers`` processes, each image written at its row, so the files are the same for
any number of workers). Rows are shared by content: questions of one image point at one ``image`` row and one
OCR row.

Where: one cache shared by the runs that preprocess alike, an entry per split and key
(:mod:`openvivqa_jax.data.model_ready_cache`: the dataset build, the tokenizer file's digest, every
preprocessing setting, the preprocessing code and libraries); the run's workdir holds a reference to its
entries (``model_ready.json``), not a copy.

Safety: a build writes into ``<entry>.tmp-<host>-<pid>/`` and renames it into place when the manifest is
written, holding the entry's lock file so that a second process waits and then reuses it; :func:`open_split`
checks the manifest, every file's size and crc32, and the key stored in it, and rebuilds with a log line saying
why when any differs, so a half-written, corrupt or mismatched entry is never read as data.

Supported: generator models without a decoding dictionary and with OCR (the OCR ablation, classifiers'
``answer_scores`` and ``allowed_vocab`` batches keep the per-example path, :func:`usable`).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import queue
import shutil
import socket
import threading
import time
import zlib
from collections.abc import Iterator, Sequence

import filelock
import grain
import jax
import numpy as np
from absl import logging

from openvivqa_jax import jsonio
from openvivqa_jax.data import model_ready_cache as cache
from openvivqa_jax.data.pipeline import Preprocessor, _ProcessShare
from openvivqa_jax.data.model_ready_rows import (ANSWER_FIELDS, OCR_FIELDS, QUESTION_FIELDS, ImageJobs, ProposalJobs,
                                                 SplitRows, write_fields)
from openvivqa_jax.data.records import DatasetError, SkipCounter, decode_record

__all__ = ["FORMAT", "ModelReady", "usable", "build", "open_split", "train_iterator", "eval_batches"]

#: Bumped whenever the layout or the meaning of a field changes (a cache of another format is rebuilt).
FORMAT = 1
_CHUNK = 1 << 22


def usable(pre: Preprocessor) -> str | None:
    """None if ``pre``'s batches can come from model-ready records, else why not (one phrase)."""
    if pre.mask_ocr:
        return "the OCR ablation masks OCR tokens"
    if pre.answer_list is not None:
        return "classifier answer scores are made per example"
    if pre.decode_dictionary != "none":
        return f"data.decode_dictionary={pre.decode_dictionary!r} batches are made per example"
    if pre.vision_kind not in ("cnn", "vit", "region", "proposals"):
        return f"vision kind {pre.vision_kind!r}"
    return None


def _crc32(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            crc = zlib.crc32(chunk, crc)
    return crc


# ------------------------------------------------------------------------------------------------ build
def _fresh_tmp(out_dir: str) -> str:
    """A new empty temporary sibling of ``out_dir`` (named by host and process), its parent made if missing."""
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = f"{os.path.abspath(out_dir)}.tmp-{socket.gethostname()}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    return tmp


#: Seconds between the progress lines of a model-ready build.
PROGRESS_EVERY_S = 30.0


def _log_progress(source_name: str, done: int, n: int, elapsed: float, vision_kind: str) -> None:
    """One progress line of a build: questions read of ``n``, the rate and the time left at that rate."""
    what = {"proposals": " (segmenting each picture into region proposals)",
            "cnn": " (decoding and resizing each picture)", "vit": " (decoding and resizing each picture)"}
    left = elapsed / done * (n - done)
    logging.info("Model-ready records of %s: %d/%d questions (%.0f%%) in %.0f s, about %.0f s left%s", source_name,
                 done, n, 100.0 * done / n, elapsed, left, what.get(vision_kind, ""))


def build(source, pre: Preprocessor, out_dir: str, fp: dict, *, source_name: str = "",
          num_workers: int = 0) -> dict:
    """Writes the model-ready records of ``source`` to ``out_dir`` atomically; returns the manifest.

    Args:
      source: random-access data source of one split (examples as ``load_source`` gives them).
      pre: the run's preprocessor (:func:`usable` must hold).
      out_dir: the final folder; written as a temporary sibling and renamed into place.
      fp: the key of the inputs (:func:`openvivqa_jax.data.model_ready_cache.cache_key`), stored in the manifest.
      source_name: the split named in errors.
      num_workers: image-decoding processes (0: ``os.cpu_count()``).

    Raises:
      DatasetError: a record is bad (one line naming the question: an empty question, a missing or undecodable
        image, a region feature size other than the config's), as ``Preprocessor.features`` raises it.
    """
    t0 = time.perf_counter()
    why = usable(pre)
    if why:
        raise ValueError(f"model-ready records do not cover this run: {why}")
    counter = SkipCounter()
    text_pre = _text_only(pre, counter)
    tmp = _fresh_tmp(out_dir)
    n = len(source)
    by_picture = pre.vision_kind in ("cnn", "vit", "proposals")
    rows = SplitRows(pre, n, tmp, by_picture)
    workers = int(num_workers) or os.cpu_count() or 1
    if pre.vision_kind == "proposals":
        images = ProposalJobs(pre, tmp, workers, counter)
    elif by_picture:
        image_path = os.path.join(tmp, "image")
        open(image_path, "wb").close()
        images = ImageJobs(pre, image_path, workers)
    else:
        images = None
    last = t0
    try:
        for i in range(n):
            rec = decode_record(source[i], i, source_name, counter)
            rows.add(i, rec, images.add(rec) if images is not None else None, text_pre, pre, counter)
            if time.perf_counter() - last >= PROGRESS_EVERY_S:  # a long build must not look like a hang
                last = time.perf_counter()
                _log_progress(source_name, i + 1, n, last - t0, pre.vision_kind)
        if images is not None:
            images.finish()
    except BaseException:
        if images is not None:
            images.abort()
        rows.regions.close({})
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if images is not None:
            images.close()
    files = write_fields(tmp, rows, images)
    _seal_files(tmp, files)
    manifest = {"format": FORMAT, "fingerprint": fp, "files": files, "num_questions": n,
                "num_answer_rows": rows.num_answer_rows,
                "num_images": len(images.rows) if images is not None else len(rows.regions.index),
                "num_ocr_sets": len(rows.ocr.index), "counts": dict(counter.counts),
                "build_s": round(time.perf_counter() - t0, 3), "workers": workers if by_picture else 0,
                "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    manifest["question_ids"] = rows.question_ids
    with open(os.path.join(tmp, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    _replace_dir(tmp, out_dir)
    logging.info("Model-ready records of %s: %d questions, %d images, %d OCR sets in %.1f s (%d workers) -> %s",
                 source_name, n, manifest["num_images"], manifest["num_ocr_sets"], manifest["build_s"],
                 manifest["workers"], out_dir)
    return manifest


def _seal_files(tmp: str, files: dict[str, dict]) -> None:
    """Adds each file's ``bytes`` and ``crc32`` to its entry in ``files``.

    Raises:
      RuntimeError: a file's size is not its dtype and shape's.
    """
    for name, meta in files.items():
        path = os.path.join(tmp, name)
        meta["bytes"] = os.path.getsize(path)
        meta["crc32"] = _crc32(path)
        expect = int(np.prod(meta["shape"])) * np.dtype(meta["dtype"]).itemsize
        if meta["bytes"] != expect:
            raise RuntimeError(f"{path}: wrote {meta['bytes']} bytes, expected {expect}")


def _text_only(pre: Preprocessor, counter: SkipCounter) -> Preprocessor:
    """A shallow copy of ``pre`` that makes every field but the pixels or the proposals (made in the workers
    instead)."""
    p = copy.copy(pre)
    p.counter = counter
    if not pre.ocr_pixels:  # the OCR tokens' pixels are made here, from the picture decoded once more
        p._image = lambda image_id, data: None
    p._proposals = lambda image_id, data: (None, None, None)
    return p


def _replace_dir(tmp: str, final: str) -> None:
    """Moves ``tmp`` to ``final``; an existing ``final`` is moved aside first and deleted after."""
    old = None
    if os.path.exists(final):
        old = f"{final}.old-{socket.gethostname()}-{os.getpid()}"
        os.replace(final, old)
    os.replace(tmp, final)
    if old:
        shutil.rmtree(old, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ read
class ModelReady:
    """The memory-mapped model-ready records of one split (read-only arrays by field name; module doc).

    Attributes:
      path: the entry folder; manifest: its ``manifest.json``; key: the inputs' key it was opened for (None when
      opened directly); built_now: whether this process built it.
    """

    def __init__(self, path: str, manifest: dict, key: dict | None = None, built_now: bool = False):
        self.path, self.manifest, self.key, self.built_now = path, manifest, key, built_now
        self.arrays = {}
        for name, meta in manifest["files"].items():
            shape = tuple(meta["shape"])
            if int(np.prod(shape)) == 0:
                self.arrays[name] = np.zeros(shape, np.dtype(meta["dtype"]))
            else:
                self.arrays[name] = np.memmap(os.path.join(path, name), dtype=np.dtype(meta["dtype"]), mode="r",
                                              shape=shape)
        self.num_questions = int(manifest["num_questions"])
        self.answer_count = np.asarray(self.arrays["q_answer_count"])
        self.answer_start = np.asarray(self.arrays["q_answer_start"])
        self.vision = "image" if "image" in self.arrays else "region"

    def __len__(self) -> int:
        return self.num_questions

    def gather(self, qidx: np.ndarray, pick: np.ndarray,
               fields: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The batch of questions ``qidx`` ``(B,)`` with answer ``pick`` ``(B,)`` (0-based among the question's
        references): the keys and dtypes of ``Preprocessor.features`` stacked, in its order; with ``fields``, only
        those (picture and question fields, e.g. the region counter's stream), which costs only their reads.

        Raises:
          KeyError: ``fields`` names a field these records do not have, or one of the OCR tokens or answers.
        """
        a = self.arrays
        qidx = np.asarray(qidx, np.int64)
        img = np.asarray(a["q_image"][qidx], np.int64)
        if fields is not None:
            per_image = {"image", "region_features", "region_boxes", "region_mask"}
            bad = [k for k in fields if k not in a or k.startswith(("q_", "ocr_")) or k in ANSWER_FIELDS]
            if bad:
                raise KeyError(f"model-ready records at {self.path}: cannot gather {bad} alone")
            return {k: np.asarray(a[k][img if k in per_image else qidx]) for k in fields}
        ocr = np.asarray(a["q_ocr"][qidx], np.int64)
        ans = self.answer_start[qidx].astype(np.int64) + np.asarray(pick, np.int64)
        out: dict[str, np.ndarray] = {}
        if self.vision == "image":
            out["image"] = a["image"][img]
        else:
            out["region_features"] = a["region_features"][img]
            out["region_boxes"] = a["region_boxes"][img]
            out["region_mask"] = a["region_mask"][img]
        for k in (*QUESTION_FIELDS, "question_bert", "question_bert_mask", "count_target", "question_polarity"):
            if k in a:
                out[k] = a[k][qidx]
        for k in (*OCR_FIELDS, "ocr_fasttext", "ocr_pixels"):
            if k in a:
                out[k] = a[k][ocr]
        out["ocr_phoc"] = out["ocr_phoc"].astype(np.float32, copy=False)
        for k in ANSWER_FIELDS:
            out[k] = a[k][ans]
        out["index"] = qidx.astype(np.int32)
        out["valid"] = np.ones((len(qidx),), bool)
        return {k: np.asarray(v) for k, v in out.items()}


_NONE_YET = "none built yet"


def _check(path: str, fp: dict, verify: bool) -> tuple[dict | None, str]:
    """``(manifest, "")`` if the cache at ``path`` is complete, intact and made from ``fp``, else ``(None, why)``."""
    mpath = os.path.join(path, "manifest.json")
    if not os.path.isdir(path):
        return None, _NONE_YET
    if not os.path.exists(mpath):
        return None, f"{mpath} is missing (an interrupted build)"
    try:
        manifest = jsonio.read_json(mpath, error=ValueError)
    except ValueError as e:
        return None, f"{mpath} is unreadable ({e})"
    if not isinstance(manifest, dict):
        return None, f"{mpath} is unreadable (not a JSON object)"
    if manifest.get("format") != FORMAT:
        return None, f"format {manifest.get('format')} is not {FORMAT} (made by another version)"
    old = manifest.get("fingerprint") or {}
    for part in cache.KEY_PARTS:
        if old.get(part) != fp[part]:
            diff = sorted(k for k in set(old.get(part) or {}) | set(fp[part])
                          if (old.get(part) or {}).get(k) != fp[part].get(k))
            return None, f"its manifest holds another key: its {part} differs ({', '.join(diff)})"
    for name, meta in manifest.get("files", {}).items():
        fpath = os.path.join(path, name)
        if not os.path.isfile(fpath):
            return None, f"{fpath} is missing"
        size = os.path.getsize(fpath)
        expect = int(np.prod(meta["shape"])) * np.dtype(meta["dtype"]).itemsize
        if size != meta.get("bytes") or size != expect:
            return None, f"{fpath} has {size} bytes, the manifest says {meta.get('bytes')} (expected {expect})"
        if verify and _crc32(fpath) != meta.get("crc32"):
            return None, f"{fpath} fails its crc32 check (corrupt)"
    return manifest, ""


def open_split(source, pre: Preprocessor, root: str, split: str, builder, *, source_name: str = "",
               num_workers: int = 0, verify: bool = True) -> ModelReady:
    """The model-ready records of ``split`` in the cache ``root``: its entry for these inputs
    (:mod:`openvivqa_jax.data.model_ready_cache`), reused when intact, else (re)built.

    Logs one line: reused (where, size, when built and in how long), or built and why (none for these inputs yet,
    naming the parts of the key in which the newest other entry of the split differs; an interrupted build; a
    corrupt file; a manifest of another key or format). While another process builds the same entry, this one
    waits on its lock and then reuses it. The build's counters (truncations, dropped empty tokens) are added to
    ``pre.counter``.

    Raises:
      DatasetError: from :func:`build` (a bad record).
      TypeError: the Preprocessor holds an attribute the key has no rule for
        (:func:`openvivqa_jax.data.model_ready_cache.settings`).
    """
    name = source_name or split
    key = cache.cache_key(builder, split, len(source), pre, FORMAT)
    path = cache.entry_path(root, key)
    manifest, why = _check(path, key, verify)
    built = False
    if manifest is None:
        with _entry_lock(path, name):
            manifest, why = _check(path, key, verify)  # built meanwhile by the process that held the lock
            if manifest is None:
                if why == _NONE_YET:
                    why = "none for these inputs yet" + cache.nearest_other(path, key)
                logging.info("Model-ready records of %s at %s: building them (%s)", name, path, why)
                manifest = build(source, pre, path, key, source_name=name, num_workers=num_workers)
                built = True
    if not built:
        size_mb = sum(int(m.get("bytes", 0)) for m in manifest.get("files", {}).values()) / 2**20
        logging.info("Model-ready records of %s: reusing %s (%.0f MB, built %s in %.1f s)", name, path, size_mb,
                     manifest.get("built_at", "at an unrecorded time"), manifest.get("build_s", 0.0))
    for k, v in manifest.get("counts", {}).items():
        pre.counter.add(k, int(v))
    return ModelReady(path, manifest, key, built)


@contextlib.contextmanager
def _entry_lock(path: str, name: str):
    """Holds ``<path>.lock`` (filelock: an OS lock, released if the process dies); says so in one line when it
    has to wait for another process's build."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lock = filelock.FileLock(path + ".lock")
    try:
        lock.acquire(timeout=5)
    except filelock.Timeout:
        logging.info("Model-ready records of %s at %s: another process is building them; waiting for it", name, path)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


# ------------------------------------------------------------------------------------------------ iterate
class _Indices:
    """The questions trained on, as a grain source: item ``i`` is question ``indices[i]``."""

    def __init__(self, n: int, indices: Sequence[int] | None):
        self.indices = np.arange(n, dtype=np.int64) if indices is None else np.asarray(indices, np.int64)

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        return int(self.indices[int(i)])


class _PickAnswer(grain.transforms.RandomMap):
    """Question index -> ``(index, reference)``: the draw ``pipeline._TrainMap`` makes with the same RNG."""

    def __init__(self, mr: ModelReady, source_name: str):
        self.counts, self.source_name, self.mr = mr.answer_count, source_name, mr

    def random_map(self, element, rng: np.random.Generator):
        c = int(self.counts[element])
        if c == 0:
            qid = self.mr.manifest["question_ids"][element]
            raise DatasetError(f"{self.source_name}: question {qid!r} has no answer in a training split")
        return np.asarray([element, int(rng.integers(c)) if c > 1 else 0], np.int64)


class _Gather(grain.transforms.Map):
    def __init__(self, mr: ModelReady, fields: Sequence[str] | None = None):
        self.mr, self.fields = mr, fields

    def map(self, element):
        return self.mr.gather(element[:, 0], element[:, 1], self.fields)


def train_iterator(mr: ModelReady, *, batch_size: int, seed: int, source_name: str = "", num_threads: int = 2,
                   prefetch: int = 8, indices: Sequence[int] | None = None, fields: Sequence[str] | None = None):
    """:func:`openvivqa_jax.data.pipeline.train_iterator` over model-ready records: the same shuffle, answer
    draws, per-process rows and checkpointable state, so its batches equal that iterator's, element for element
    (with ``fields``, only those fields of them: :meth:`ModelReady.gather`).

    Only question indices and answer draws go through grain per example; each batch is then one gather per field
    from the memory-mapped files.

    Raises:
      DatasetError: the split is smaller than one global batch; a visited question has no answer.
    """
    src = _Indices(len(mr), indices)
    if len(src) < batch_size * jax.process_count():
        raise DatasetError(f"{source_name}: {len(src)} examples is fewer than one global batch "
                           f"({batch_size} x {jax.process_count()} processes); lower --config.train.batch_size "
                           f"(at most {len(src)}) or train on a larger split")
    ds = grain.MapDataset.source(src).seed(seed).shuffle().repeat()
    ds = ds.random_map(_PickAnswer(mr, source_name))
    ds = grain.MapDataset.source(_ProcessShare(ds, batch_size, jax.process_index(), jax.process_count()))
    ds = ds.batch(batch_size, drop_remainder=True).map(_Gather(mr, fields))
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch))
    return iter(it)


def eval_batches(mr: ModelReady, *, batch_size: int, max_examples: int = 0, prefetch: int = 2) -> Iterator[dict]:
    """:func:`openvivqa_jax.data.pipeline.eval_batches` over model-ready records (the same rows, padding and
    answer ``0``), gathered in a background thread ``prefetch`` batches ahead of the caller."""
    n = min(len(mr), max_examples) if max_examples else len(mr)
    pc, pi = jax.process_count(), jax.process_index()
    mine = np.arange(pi, n, pc, dtype=np.int64)
    per_proc = -(-n // pc)
    num_batches = -(-per_proc // batch_size)

    def make(b: int) -> dict:
        idx = mine[b * batch_size:(b + 1) * batch_size]
        k = len(idx)
        rows = np.concatenate([idx, np.zeros((batch_size - k,), np.int64)])
        out = mr.gather(rows, np.zeros((batch_size,), np.int64))
        if k < batch_size:  # padding rows: zeros, valid False (as the per-example path pads)
            for v in out.values():
                v[k:] = 0
        return out

    q: queue.Queue = queue.Queue(maxsize=max(1, prefetch))
    stop = threading.Event()

    def produce():
        try:
            for b in range(num_batches):
                if stop.is_set():
                    return
                q.put(("batch", make(b)))
            q.put(("end", None))
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            q.put(("error", e))

    t = threading.Thread(target=produce, daemon=True, name="model-ready-eval")
    t.start()
    try:
        while True:
            kind, val = q.get()
            if kind == "end":
                return
            if kind == "error":
                raise val
            yield val
    finally:
        stop.set()
        while t.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.05)
