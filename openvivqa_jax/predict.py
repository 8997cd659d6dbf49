"""Predict on any photo: OCR, answer, and where each answer word came from.

Single question::

    python -m openvivqa_jax.predict --workdir runs/mlpag --image shop.jpg --question "cửa hàng này tên gì?" \\
        [--ocr tesseract|none|FILE] [--beam N] [--json] [--plot out.png]

Batch (the public release's JSON ``{"images": {id: filename}, "annotations": {qid: {image_id, question,
answer}}}``, or the older list form ``{"images": [{id, filename}], "annotations": [{id, image_id,
question, ...}]}``)::

    python -m openvivqa_jax.predict --workdir runs/mlpag --questions test.json --image_dir images/ \\
        --output runs/mlpag/submission.json [--plot_dir runs/mlpag/pictures/] [--skip_bad] [--ocr ...] [--beam N] \\
        [--json]

writes the Codalab submission ``{question_id: answer}`` (UTF-8 JSON).

What happens (sharing the trainer's code, :class:`openvivqa_jax.train.Trainer`):

1. ``<workdir>/config.json`` becomes the config (JSON lists back to tuples); the tokenizer
   (``spm.model``), the model and, for classifiers, ``answers.json`` come from the workdir; the best
   checkpoint (else the latest) is restored. The dataset is never opened.
2. OCR (``--ocr``, :func:`openvivqa_jax.data.ocr.run_ocr`, the engines the builders use):
   ``detector+tesseract`` (default) finds text lines with PP-OCR's DB detector (the ONNX model inside
   the ``rapidocr-onnxruntime`` wheel) and reads each with ``tesseract -l vie --psm 7``; ``tesseract``
   runs ``-l vie`` psm 11 on the grayscale image and its R, G, B channels and merges the words
   (:func:`openvivqa_jax.data.ocr.run_ocr_passes`; ``--ocr_passes`` chooses the passes). On the 7 real
   OpenViVQA examples the detector engine reads 8 of the 15 answer words the questions lack, the
   tesseract passes 5. Either way the tokens are normalized with the answer rules and split into single
   words with their own boxes, so every word is copyable. ``--no_ocr_filter`` keeps implausible words.
   ``none`` uses no OCR tokens; a FILE is JSON ``{image: [{text, box, score}]}`` (keys: image id, file
   name or its stem) or, for a single image, a plain token list.
3. The inputs are built by :meth:`openvivqa_jax.data.pipeline.Preprocessor.features`, decoded with
   the jitted beam search (``--beam``, default ``eval.beam_size``; classifiers take the arg-max class).
4. Provenance: :meth:`openvivqa_jax.text.answer_vocab.AnswerVocab.sources` says per decoded step whether
   it is a vocabulary piece or a copied OCR slot; pieces are grouped into words as SentencePiece decodes
   them, and a copied OCR token contributes its word(s) with its box. For classifiers the answer is an
   ``answer class`` or an ``OCR token`` (LoRRA).
5. Picture (``--plot`` / ``--plot_dir``): the image with every OCR box, the copied ones highlighted, and
   the answer decoder's cross-attention over the image's grid cells or regions as a heat map (mean over
   layers, heads and answer steps; :func:`attention_layout` says where the image sits in the decoder
   memory of each model; models without such a decoder get no heat map).

Images are decoded by :func:`openvivqa_jax.data.images.decode_image`, as in the builders and the training
pipeline (EXIF orientation, transparency onto white, 16-bit by range). Bad input (an unreadable, empty,
truncated or non-image file, an image over ``--max_pixels`` judged from its header before decoding or below
the minimum size, an empty question, a workdir without config, tokenizer or checkpoint, a malformed
questions or OCR file) ends with exit code 2 and one ``error:`` line on stderr naming the file or question;
nothing is skipped silently. In batch mode ``--skip_bad`` answers every question whose image can be used and
lists the others with the reason (stderr, and ``<output stem>.skipped.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from openvivqa_jax.data.images import DEFAULT_MAX_PIXELS as DEFAULT_MAX_IMAGE_PIXELS
from openvivqa_jax.data.ocr import (  # the OCR engines and the merge of tesseract passes live in data/ocr.py
    DEFAULT_ENGINE as DEFAULT_OCR_ENGINE,
    DEFAULT_OCR_PASSES,
    ENGINES as OCR_ENGINES,
    merge_ocr_passes,
    plausible_token,
    run_ocr_passes,
)

__all__ = ["PredictError", "DEFAULT_MAX_PIXELS", "DEFAULT_OCR_PASSES", "DEFAULT_OCR_ENGINE", "OCR_ENGINES",
           "plausible_token", "run_ocr_passes", "load_image", "check_workdir",
           "load_workdir_config", "merge_ocr_passes", "image_folders", "read_questions_file", "word_provenance",
           "attention_layout", "Predictor", "build_parser", "run"]

#: Largest image accepted (pixels, width x height), checked from the header before decoding; about the
#: area of a 50-megapixel photo. A 20000 x 20000 image (400 MP, 1.2 GB decoded) is refused.
DEFAULT_MAX_PIXELS = DEFAULT_MAX_IMAGE_PIXELS


class PredictError(Exception):
    """Unusable input; the message (one line) names the file or the question and what is wrong."""


# ---------------------------------------------------------------------------------------------- inputs
def load_image(path: str, max_pixels: int = DEFAULT_MAX_PIXELS, question: str | None = None):
    """Opens and decodes an image file with the project's one decoder,
    :func:`openvivqa_jax.data.images.decode_image` (the builders and the training pipeline use it too):
    the size is checked from the header before decoding, EXIF orientation is applied, transparency goes
    onto white, 16-bit images are scaled by their range.

    Args:
      path: the image file.
      max_pixels: the largest ``width * height`` accepted.
      question: the question named in errors.

    Returns:
      An RGB ``PIL.Image.Image`` (decoded).

    Raises:
      PredictError: missing file, a folder, a 0-byte file, not an image, over ``max_pixels``, below the
        minimum size, or a corrupt / truncated image (one line naming the path).
    """
    from openvivqa_jax.data import images

    try:
        return images.decode_image(path, question=question, max_pixels=max_pixels).pil
    except images.ImageDecodeError as e:
        raise PredictError(str(e)) from None


def _clean_question(question: str, where: str) -> str:
    from openvivqa_jax.text.normalize import normalize_text

    if not isinstance(question, str):
        raise PredictError(f"{where}: question is {type(question).__name__}, expected text")
    q = normalize_text(question)
    if not q:
        raise PredictError(f"{where}: the question is empty")
    return q


def _has_step(d: str) -> bool:
    return os.path.isdir(d) and any(n.isdigit() and os.path.isdir(os.path.join(d, n)) for n in os.listdir(d))


def check_workdir(workdir: str) -> None:
    """Checks that ``workdir`` can be predicted from: ``config.json``, ``spm.model`` and a checkpoint step in
    ``best/`` or ``checkpoints/``.

    Raises:
      PredictError: naming the workdir and what is missing.
    """
    if not os.path.isdir(workdir):
        raise PredictError(f"workdir {workdir}: not found")
    for name, what in (("config.json", "the run's config"), ("spm.model", "the tokenizer")):
        if not os.path.isfile(os.path.join(workdir, name)):
            raise PredictError(f"workdir {workdir}: no {name} ({what}); is it a training run folder?")
    if not (_has_step(os.path.join(workdir, "best")) or _has_step(os.path.join(workdir, "checkpoints"))):
        raise PredictError(f"workdir {workdir}: no checkpoint (best/ and checkpoints/ hold no saved step); "
                           "train first")


def _tuplify(x):
    if isinstance(x, dict):
        return {k: _tuplify(v) for k, v in x.items()}
    if isinstance(x, list):
        return tuple(_tuplify(v) for v in x)
    return x


def _read_json(path: str, label: str = "") -> Any:
    """The parsed JSON file at ``path``.

    Raises:
      PredictError: unreadable or invalid JSON, naming ``label + path`` and the line and column.
    """
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise PredictError(f"{label}{path}: cannot read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise PredictError(f"{label}{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None


def load_workdir_config(workdir: str):
    """``<workdir>/config.json`` as an ``ml_collections.ConfigDict`` (JSON lists become tuples again).

    Raises:
      PredictError: the file is unreadable or not a JSON object (names it).
    """
    import ml_collections

    path = os.path.join(workdir, "config.json")
    raw = _read_json(path, "")
    if not isinstance(raw, dict) or "model" not in raw:
        raise PredictError(f"{path}: not a run config (no 'model' section)")
    return ml_collections.ConfigDict(_tuplify(raw))


def _load_ocr_file(path: str) -> dict[str, list[dict]] | list[dict]:
    """A JSON OCR file: ``{image: [tokens]}`` (validated by :func:`openvivqa_jax.data.ocr.load_ocr_file`) or a
    plain token list."""
    from openvivqa_jax.data import ocr as ocr_lib

    raw = _read_json(path, "OCR file ")
    try:
        if isinstance(raw, list):
            return ocr_lib.validate_tokens(raw, source=path, image_id="(all)")
        return ocr_lib.load_ocr_file(path)
    except ocr_lib.OcrFileError as e:
        raise PredictError(f"OCR file {e}") from None


def _ocr_for(table, image_keys: Sequence[str], path: str) -> list[dict]:
    if isinstance(table, list):
        return table
    for k in image_keys:
        if k in table:
            return table[k]
    raise PredictError(f"OCR file {path}: no entry for image {image_keys[0]!r} (tried keys {list(image_keys)}; "
                       f"the file has {len(table)} images, e.g. {sorted(table)[:3]})")


def image_folders(questions_path: str, image_dir: str | None) -> list[str]:
    """Where batch mode looks for the images of a questions file: ``image_dir`` when given, else the
    file's folder, its ``images/`` and ``<file stem>/`` subfolders (as the OpenViVQA builder does)."""
    if image_dir:
        return [image_dir]
    folder = os.path.dirname(os.path.abspath(questions_path))
    stem = os.path.splitext(os.path.basename(questions_path))[0]
    return [folder, os.path.join(folder, "images"), os.path.join(folder, stem)]


def read_questions_file(path: str, image_dir: str | list[str]) -> list[dict]:
    """Reads a questions file in the public release's format (or the older list form).

    Args:
      path: ``{"images": {id: filename}, "annotations": {qid: {image_id, question, answer?}}}`` or
        ``{"images": [{id, filename}], "annotations": [{id, image_id, question, ...}]}``.
      image_dir: folder of the image files, or folders searched in order (an image found in none gets
        the first folder's path, which then fails with "file not found").

    Returns:
      ``[{question_id, image_id, question, image_path}]`` in file order (answers are not needed).

    Raises:
      PredictError: unreadable / invalid JSON, an unknown layout, a record without question or with an
        image id missing from ``images`` (names the file and the question id).
    """
    raw = _read_json(path, "questions file ")
    if not isinstance(raw, dict) or "images" not in raw or "annotations" not in raw:
        raise PredictError(f"questions file {path}: expected an object with 'images' and 'annotations' (the "
                           "OpenViVQA public release layout)")
    images, anns = raw["images"], raw["annotations"]
    if isinstance(images, list):
        try:
            images = {str(x["id"]): x["filename"] for x in images}
        except (TypeError, KeyError):
            raise PredictError(f"questions file {path}: 'images' list entries need 'id' and 'filename'") from None
    if not isinstance(images, dict):
        raise PredictError(f"questions file {path}: 'images' must be an object {{id: filename}} or a list")
    images = {str(k): v for k, v in images.items()}
    if isinstance(anns, dict):
        items = [(str(k), v) for k, v in anns.items()]
    elif isinstance(anns, list):
        items = []
        for i, a in enumerate(anns):
            if not isinstance(a, dict) or "id" not in a:
                raise PredictError(f"questions file {path}: annotation {i} has no 'id'")
            items.append((str(a["id"]), a))
    else:
        raise PredictError(f"questions file {path}: 'annotations' must be an object or a list")
    dirs = [image_dir] if isinstance(image_dir, str) else list(image_dir)

    def locate(name: str) -> str:
        for d in dirs:
            if os.path.isfile(os.path.join(d, name)):
                return os.path.join(d, name)
        return os.path.join(dirs[0], name)

    out = []
    for qid, a in items:
        if not isinstance(a, dict) or "question" not in a or "image_id" not in a:
            raise PredictError(f"questions file {path}: question {qid!r} needs 'image_id' and 'question'")
        image_id = str(a["image_id"])
        if image_id not in images:
            raise PredictError(f"questions file {path}: question {qid!r} refers to image {image_id!r}, which is "
                               "not in 'images'")
        out.append({"question_id": qid, "image_id": image_id,
                    "question": _clean_question(a["question"], f"questions file {path}: question {qid!r}"),
                    "image_path": locate(str(images[image_id]))})
    if not out:
        raise PredictError(f"questions file {path}: no question")
    return out


# ---------------------------------------------------------------------------------------------- provenance
def word_provenance(ids: Sequence[int], vocab, tokenizer, ocr_tokens: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Per answer word, where it came from.

    Steps come from :meth:`AnswerVocab.sources`: runs of vocabulary pieces are decoded by SentencePiece and
    split into words (each ``source="vocab"`` with its piece ids); a copied OCR slot gives the token's
    word(s) (``source="ocr"``, ``ocr_index``, ``box``, ``score``, ``ocr_text``); a slot pointing at no token
    yields nothing, as :meth:`AnswerVocab.decode` skips it. Joining the words with spaces gives exactly
    :meth:`AnswerVocab.decode` of ``ids``.

    Args:
      ids: decoded extended ids ``(steps,)``.
      vocab: the :class:`~openvivqa_jax.text.answer_vocab.AnswerVocab`; tokenizer: its tokenizer.
      ocr_tokens: the example's OCR tokens in slot order (``{"text", "box", "score"}``).

    Returns:
      ``[{"word", "source", ...}]``; vocabulary words also carry ``in_ocr`` (the word equals an OCR token,
      yet was generated).
    """
    texts = {t["text"] for t in ocr_tokens}
    words: list[dict] = []
    run: list[int] = []

    def flush():
        if run:
            for w in tokenizer.decode(list(run)).split():
                words.append({"word": w, "source": "vocab", "piece_ids": list(run), "in_ocr": w in texts})
            run.clear()

    for kind, value in vocab.sources(ids):
        if kind == "ocr":
            flush()
            j = int(value)
            if j < len(ocr_tokens) and j < vocab.num_ocr:
                t = ocr_tokens[j]
                for w in t["text"].split():
                    words.append({"word": w, "source": "ocr", "ocr_index": j, "ocr_text": t["text"],
                                  "box": [round(float(v), 4) for v in t["box"]], "score": float(t.get("score", 1.0))})
        elif value in (tokenizer.pad_id, tokenizer.bos_id):
            continue
        else:
            run.append(int(value))
    flush()
    return words


def attention_layout(model, num_vision: int, num_ocr: int) -> tuple[int, int] | None:
    """Where the image's grid cells / regions sit in the answer decoder's memory: ``(start, stop)``.

    * MLPAG, eq. 9 sum fusion: memory position ``j`` is OCR token ``j`` + image cell ``j`` (zero-padded), so
      cells are ``[0, S)`` (positions ``j < N`` also carry OCR token ``j``); ``concat`` fusion: ``[N, N + S)``.
    * FST (``x_f`` over the grid, then optionally the question) and QuMLAG (``[x_I; x_Q]``): ``[0, S)``.

    Returns None for models without a memory decoder (M4C's multimodal transformer, the classifiers).
    """
    name = type(model).__name__
    if not hasattr(model, "decoder") or not hasattr(model.decoder, "precompute"):
        return None
    if name == "MLPAG":
        return (num_ocr, num_ocr + num_vision) if getattr(model, "fusion", "sum") == "concat" else (0, num_vision)
    if name in ("FST", "QuMLAG"):
        return (0, num_vision)
    return None


# ---------------------------------------------------------------------------------------------- predictor
@dataclasses.dataclass
class Item:
    """One question to answer: ids, normalized question, the image (RGB PIL) and its OCR tokens."""

    question_id: str
    image_id: str
    question: str
    image: Any
    image_path: str
    ocr: list[dict]


class Predictor:
    """Loads a run folder and answers questions about images.

    Args:
      workdir: the run folder (``config.json``, ``spm.model``, checkpoints).
      beam: beam size (None: the config's ``eval.beam_size``).

    Raises:
      PredictError: an unusable workdir, or a model whose vision input is pre-extracted region features
        (a photo cannot feed it).
    """

    def __init__(self, workdir: str, beam: int | None = None):
        workdir = os.path.abspath(os.path.expanduser(workdir))
        check_workdir(workdir)
        cfg = load_workdir_config(workdir)
        kind = cfg.model.vision.get("kind", "cnn")
        if kind not in ("cnn", "vit"):
            raise PredictError(f"workdir {workdir}: model.vision.kind is {kind!r}; predicting from a photo needs a "
                               "pixel backbone ('cnn' or 'vit'), not pre-extracted region features")
        if beam is not None and beam < 1:
            raise PredictError(f"--beam must be >= 1, got {beam}")
        with cfg.unlocked():
            cfg.mesh.shape = (1, 1)  # one example at a time, on one device
            if cfg.model.vision.get("checkpoint"):
                cfg.model.vision.checkpoint = None  # the trained weights come from the run's checkpoint
        from openvivqa_jax import train

        self.cfg = cfg
        self.workdir = workdir
        try:
            self.tr = train.Trainer(cfg, workdir)
            self.step = self.tr.restore_params("best")
        except FileNotFoundError as e:
            raise PredictError(f"workdir {workdir}: {e}") from None
        self.is_generator = self.tr.is_generator
        self.beam = int(beam or cfg.eval.beam_size)
        self.pre = self.tr.pre
        self._attn_fn = None
        self._encoded: dict[str, bytes] = {}

    # ---- OCR
    def ocr(self, image, mode: str, image_keys: Sequence[str], passes: Sequence[str], ocr_table=None,
            stats: dict | None = None, filter_tokens: bool = True) -> list[dict]:
        """OCR tokens of ``image`` by ``mode``: an engine of :data:`OCR_ENGINES`
        (:func:`openvivqa_jax.data.ocr.run_ocr`), or a file path whose table is ``ocr_table``."""
        from openvivqa_jax.data import ocr as ocr_lib

        if mode in OCR_ENGINES:
            try:
                return ocr_lib.run_ocr(image, mode, stats=stats, passes=passes, filter_tokens=filter_tokens)
            except ocr_lib.OcrUnavailableError as e:
                raise PredictError(f"OCR: {e}") from None
        return [dict(t) for t in _ocr_for(ocr_table, image_keys, mode)]

    # ---- features and decoding
    def _features(self, item: Item, index: int) -> dict:
        from openvivqa_jax.data import pipeline

        if item.image_path not in self._encoded:  # lossless, once per image (the Preprocessor decodes bytes)
            buf = io.BytesIO()
            item.image.save(buf, format="PNG", compress_level=1)
            self._encoded[item.image_path] = buf.getvalue()
        ocr = item.ocr
        rec = pipeline.Record(
            index=index, question_id=item.question_id, image_id=item.image_path, question=item.question,
            answers=[], qa_type=-1, ocr_texts=[t["text"] for t in ocr],
            ocr_boxes=np.asarray([t["box"] for t in ocr], np.float32).reshape(-1, 4),
            image_bytes=self._encoded[item.image_path])
        try:
            return self.pre.features(rec, None, for_decoding=True)
        except pipeline.DatasetError as e:
            raise PredictError(f"question {item.question_id!r} ({item.image_path}): {e}") from None

    def _attention(self, batch, ids):
        """Mean cross-attention ``(batch, steps, mem_len)``, vision boxes ``(batch, S, 4)`` and mask, or None."""
        import jax
        import jax.numpy as jnp
        from flax import nnx

        graphdef = self.tr.graphdef
        model = nnx.merge(graphdef, self.tr.state.params)
        if attention_layout(model, 1, self.cfg.model.num_ocr) is None:
            return None
        if self._attn_fn is None:
            bos = self.tr.tokenizer.bos_id

            @jax.jit
            def fn(params, batch, ids):
                m = nnx.merge(graphdef, params)
                enc = m.encode(batch)
                vis = m.vision(batch)
                dec_in = jnp.concatenate([jnp.full(ids[:, :1].shape, bos, ids.dtype), ids[:, :-1]], 1)
                _, weights = m.decoder(dec_in, enc["memory"], enc["memory_mask"], enc["ocr_feats"], enc["ocr_mask"],
                                       return_attention=True)
                w = jnp.mean(jnp.stack(weights, 1), axis=(1, 2))  # (batch, steps, mem_len)
                return w, vis["boxes"], vis["mask"]

            self._attn_fn = fn
        with self.tr.mesh:
            w, boxes, mask = self._attn_fn(self.tr.state.params, batch, ids)
        return np.asarray(w), np.asarray(boxes), np.asarray(mask), model

    def predict(self, items: Sequence[Item], batch_size: int = 8, with_attention: bool = False) -> list[dict]:
        """Answers ``items``; returns per item ``{question_id, question, answer, words, ocr, score, ...}``.

        Batches are padded to ``batch_size`` (one compilation per size; a single question uses 1).
        With ``with_attention`` each result also carries ``heat`` ``(gh, gw)`` (or None) and ``heat_note``.
        """
        import jax.numpy as jnp  # imported here: the CLI checks its input before jax starts

        from openvivqa_jax.data import pipeline

        bs = max(1, min(batch_size, len(items)))
        fn = self.tr.decode_fn(method="beam", beam_size=self.beam) if self.is_generator else self.tr.decode_fn()
        results: list[dict] = []
        for start in range(0, len(items), bs):
            chunk = list(items[start:start + bs])
            feats = [self._features(it, i) for i, it in enumerate(chunk)]
            while len(feats) < bs:
                pad = {k: np.zeros_like(v) for k, v in feats[0].items()}
                pad["valid"] = np.bool_(False)
                feats.append(pad)
            local = {k: np.stack([f[k] for f in feats]) for k in feats[0]}
            batch = pipeline.to_global(local, self.tr.batch_sharding)
            with self.tr.mesh:
                out, scores = fn(self.tr.state.params, batch)
            out, scores = np.asarray(out), np.asarray(scores)
            attn = self._attention(batch, jnp.asarray(out)) if (with_attention and self.is_generator) else None
            for i, it in enumerate(chunk):
                ocr = it.ocr[: self.cfg.model.num_ocr]
                texts = [t["text"] for t in ocr]
                res = {"question_id": it.question_id, "image_id": it.image_id, "image": it.image_path,
                       "question": it.question, "score": float(scores[i]), "ocr": ocr,
                       "ocr_truncated": max(0, len(it.ocr) - len(ocr))}
                if self.is_generator:
                    ids = [int(x) for x in out[i]]
                    res["answer"] = self.tr.vocab.decode(ids, texts)
                    res["words"] = word_provenance(ids, self.tr.vocab, self.tr.tokenizer, ocr)
                    joined = " ".join(w["word"] for w in res["words"])
                    if joined != res["answer"]:  # the provenance must describe exactly the decoded answer
                        raise AssertionError(f"provenance {joined!r} != answer {res['answer']!r}")
                    res["ids"] = ids
                else:
                    cid = int(out[i])
                    alist = self.tr.answer_list
                    res["answer"] = alist.decode(cid, texts)
                    if cid < len(alist):
                        res["words"] = [{"word": w, "source": "answer_class", "class_id": cid}
                                        for w in res["answer"].split()]
                    else:
                        j = cid - len(alist)
                        t = ocr[j] if j < len(ocr) else None
                        res["words"] = [] if t is None else [
                            {"word": w, "source": "ocr", "ocr_index": j, "ocr_text": t["text"],
                             "box": [round(float(v), 4) for v in t["box"]], "score": float(t.get("score", 1.0))}
                            for w in t["text"].split()]
                if with_attention:
                    res["heat"], res["heat_note"] = self._heat(attn, i, res) if attn else (
                        None, f"no decoder attention map for model {self.cfg.model.name}")
                results.append(res)
        return results

    def _heat(self, attn, i: int, res: dict):
        from openvivqa_jax.plot import heat_from_boxes

        w, boxes, mask, model = attn
        S, N = boxes.shape[1], self.cfg.model.num_ocr
        lo, hi = attention_layout(model, S, N)
        ids = res["ids"]
        eos = self.tr.tokenizer.eos_id
        n_steps = next((t for t, x in enumerate(ids) if x == eos), len(ids))
        steps = w[i, : max(1, n_steps)]  # answer steps; the EOS step alone for an empty answer
        vis = steps[:, lo:hi].mean(0) * mask[i]
        share = float(vis.sum())
        if share <= 0:
            return None, "no attention on the image"
        cells = boxes[i]
        xs, ys = np.unique(np.round(cells[:, 0], 6)), np.unique(np.round(cells[:, 1], 6))
        gh, gw = (len(ys), len(xs)) if len(xs) * len(ys) == S else (96, 128)
        heat = heat_from_boxes(cells, vis / share, gh, gw)
        note = (f"heat map: answer-decoder cross-attention over {S} image cells, mean over layers, heads and "
                f"{max(1, n_steps)} answer steps")
        if (lo, hi) != (0, w.shape[-1]):
            note += f"; {share:.0%} of it is on image positions"
        else:
            note += " (MLPAG eq. 9: memory slot j = image cell j + OCR token j)" if N and lo == 0 else ""
        return heat, note


# ---------------------------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="python -m openvivqa_jax.predict",
                                description="Answer questions about photos with a trained run; report OCR, the answer "
                                            "and where each answer word came from.")
    p.add_argument("--workdir", required=True, help="run folder (config.json, spm.model, checkpoints)")
    p.add_argument("--image", help="image file (single question)")
    p.add_argument("--question", help="question text (single question)")
    p.add_argument("--questions", help="batch: questions JSON in the public release's layout")
    p.add_argument("--image_dir", help="batch: folder of the images named in --questions (default: its folder, "
                   "then its images/ and <file stem>/ subfolders)")
    p.add_argument("--output", help="batch: submission file {question_id: answer} (default: submission.json)")
    p.add_argument("--ocr", default=DEFAULT_OCR_ENGINE,
                   help=f"OCR engine ({', '.join(OCR_ENGINES)}; default {DEFAULT_OCR_ENGINE}) or a JSON file of OCR tokens")
    p.add_argument("--ocr_passes", default=",".join(DEFAULT_OCR_PASSES),
                   help="the tesseract engine's passes to merge: gray,R,G,B (default all)")
    p.add_argument("--no_ocr_filter", action="store_true",
                   help="keep every tesseract word (no corroboration / plausibility filter)")
    p.add_argument("--beam", type=int, default=None, help="beam size (default: the run's eval.beam_size)")
    p.add_argument("--batch_size", type=int, default=8, help="batch: questions decoded together")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--plot", help="single: write the picture to this PNG")
    p.add_argument("--plot_dir", help="batch: write one picture per question (<question_id>.png) here")
    p.add_argument("--max_pixels", type=int, default=DEFAULT_MAX_PIXELS, help="largest image accepted (width*height)")
    p.add_argument("--skip_bad", action="store_true",
                   help="batch: answer every question whose image can be used; list the others on stderr and in "
                        "<output stem>.skipped.json {question_id: reason} instead of stopping at the first")
    p.add_argument("--verbose", action="store_true", help="show library logging on stderr")
    return p


def _fmt_box(b) -> str:
    return "(" + ", ".join(f"{float(v):.3f}" for v in b) + ")"


def format_result(res: dict) -> str:
    """Human-readable lines for one result: question, answer, per-word provenance, OCR tokens."""
    lines = [f"question: {res['question']}", f"answer: {res['answer']}", "provenance:"]
    if not res["words"]:
        lines.append("  (empty answer)")
    for w in res["words"]:
        if w["source"] == "ocr":
            lines.append(f"  {w['word']:<14} copied from OCR token {w['ocr_index']} {w['ocr_text']!r} "
                         f"box {_fmt_box(w['box'])} (confidence {w['score']:.2f})")
        elif w["source"] == "answer_class":
            lines.append(f"  {w['word']:<14} answer class {w['class_id']}")
        else:
            lines.append(f"  {w['word']:<14} generated from the vocabulary"
                         + (" (also an OCR token, not copied)" if w.get("in_ocr") else ""))
    lines.append(f"ocr: {len(res['ocr'])} tokens" + (": " + " | ".join(t["text"] for t in res["ocr"]) if res["ocr"] else "")
                 + (f" ({res['ocr_truncated']} more beyond model.num_ocr not used)" if res.get("ocr_truncated") else ""))
    if res.get("plot"):
        lines.append(f"picture: {res['plot']}")
    return "\n".join(lines)


def _json_result(res: dict) -> dict:
    out = {k: v for k, v in res.items() if k not in ("heat", "heat_note", "ids")}
    out["ocr"] = [{"text": t["text"], "box": [round(float(v), 4) for v in t["box"]], "score": round(float(t.get("score", 1.0)), 4)}
                  for t in res["ocr"]]
    return out


def _error(msg: str) -> None:
    print("error: " + " ".join(str(msg).split()), file=sys.stderr)


def _ocr_settings(args) -> dict:
    """``--ocr`` / ``--ocr_passes``: the OCR table of a file (loaded and validated) and the tesseract passes."""
    ocr_table = None
    if args.ocr not in OCR_ENGINES:
        ocr_table = _load_ocr_file(args.ocr)
    passes = tuple(p.strip() for p in args.ocr_passes.split(",") if p.strip())
    bad = [p for p in passes if p not in DEFAULT_OCR_PASSES]
    if bad or not passes:
        raise PredictError(f"--ocr_passes {args.ocr_passes!r}: expected a comma-separated subset of gray,R,G,B")
    return {"table": ocr_table, "passes": passes, "filter": not args.no_ocr_filter}


def _run(args) -> int:
    single = args.image is not None or args.question is not None
    if single and args.questions:
        raise PredictError("give either --image and --question, or --questions (batch), not both")
    if not single and not args.questions:
        raise PredictError("give --image and --question, or --questions with --image_dir")
    if single:
        if args.image is None or args.question is None:
            raise PredictError("a single prediction needs both --image and --question")
        question = _clean_question(args.question, f"--question {args.question!r}")
        records = [{"question_id": "0", "image_id": os.path.basename(args.image), "question": question,
                    "image_path": args.image}]
    else:
        if args.image_dir and not os.path.isdir(args.image_dir):
            raise PredictError(f"--image_dir {args.image_dir}: not a folder")
        records = read_questions_file(args.questions, image_folders(args.questions, args.image_dir))
    ocr_cfg = _ocr_settings(args)
    # Every image is checked before the model is loaded, so bad input fails fast (or, with --skip_bad in batch
    # mode, the questions of unusable images are set aside, answered by no one, and listed at the end).
    images: dict[str, Any] = {}
    bad_images: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for r in records:
        if r["image_path"] in bad_images:
            skipped[r["question_id"]] = bad_images[r["image_path"]]
        elif r["image_path"] not in images:
            try:
                images[r["image_path"]] = load_image(r["image_path"], args.max_pixels,
                                                     question=r["question"] if single else None)
            except PredictError as e:
                if single:
                    raise
                if not args.skip_bad:
                    raise PredictError(f"question {r['question_id']!r}: {e} (--skip_bad answers the other "
                                       "questions and lists the bad ones)") from None
                bad_images[r["image_path"]] = skipped[r["question_id"]] = " ".join(str(e).split())
    if skipped:
        records = [r for r in records if r["question_id"] not in skipped]
        if not records:
            raise PredictError(f"questions file {args.questions}: no question has a usable image "
                               f"({len(skipped)} skipped, e.g. {next(iter(skipped.values()))})")
    check_workdir(os.path.abspath(os.path.expanduser(args.workdir)))
    pred = Predictor(args.workdir, beam=args.beam)
    pred.pre.max_image_pixels = max(pred.pre.max_image_pixels, args.max_pixels)  # the images passed --max_pixels
    ocr_cache: dict[str, list[dict]] = {}
    stats: dict[str, int] = {}
    items = []
    for r in records:
        path = r["image_path"]
        if path not in ocr_cache:
            keys = [r["image_id"], os.path.basename(path), os.path.splitext(os.path.basename(path))[0], path]
            ocr_cache[path] = pred.ocr(images[path], args.ocr, keys, ocr_cfg["passes"], ocr_cfg["table"], stats,
                                       filter_tokens=ocr_cfg["filter"])
        items.append(Item(r["question_id"], r["image_id"], r["question"], images[path], path, ocr_cache[path]))
    want_plot = bool(args.plot or args.plot_dir)
    results = pred.predict(items, batch_size=1 if single else args.batch_size, with_attention=want_plot)
    if want_plot:
        from openvivqa_jax.plot import plot_prediction

        for res, it in zip(results, items):
            out = args.plot if single else os.path.join(args.plot_dir, f"{_safe_name(res['question_id'])}.png")
            res["plot"] = plot_prediction(np.asarray(it.image), out, question=res["question"], answer=res["answer"],
                                          words=res["words"], ocr_tokens=res["ocr"], heat=res.get("heat"),
                                          heat_note=res.get("heat_note", ""),
                                          title=f"{os.path.basename(it.image_path)} - {pred.cfg.model.name} "
                                                f"step {pred.step}, beam {pred.beam}")
    if not single:
        output = args.output or "submission.json"
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w", encoding="utf-8") as f:
            json.dump({r["question_id"]: r["answer"] for r in results}, f, ensure_ascii=False, indent=1)
        if skipped:
            skipped_path = os.path.splitext(output)[0] + ".skipped.json"
            with open(skipped_path, "w", encoding="utf-8") as f:
                json.dump(skipped, f, ensure_ascii=False, indent=1)
    if args.json:
        payload = [_json_result(r) for r in results]
        json.dump(payload[0] if single else payload, sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
    else:
        blocks = []
        for r in results:
            head = "" if single else f"[{r['question_id']}] image {r['image']}\n"
            blocks.append(head + format_result(r))
        print("\n\n".join(blocks))
        if not single:
            print(f"\nwrote {output}: {len(results)} answers")
    if skipped:
        print(f"skipped {len(skipped)} questions whose image could not be used (listed in {skipped_path}):",
              file=sys.stderr)
        for qid, why in skipped.items():
            print(f"  question {qid!r}: {why}", file=sys.stderr)
    if stats:
        from absl import logging

        logging.info("OCR counters: %s", stats)
    return 0


def _safe_name(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s) or "question"


def run(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code (0 success, 2 unusable input)."""
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from absl import logging

    verbosity = logging.get_verbosity()
    if not args.verbose:
        logging.set_verbosity(logging.ERROR)
        warnings.filterwarnings("ignore")
    try:
        return _run(args)
    except PredictError as e:
        _error(e)
        return 2
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    finally:
        logging.set_verbosity(verbosity)


if __name__ == "__main__":
    sys.exit(run())
