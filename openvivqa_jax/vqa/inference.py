"""Answering with a trained run: restore the parameters only, and the jitted decoders.

:func:`load_for_inference` rebuilds a run from its workdir (``config.json``, ``spm.model``,
``answers.json`` for classifiers, a checkpoint) without initializing the model and without the optimizer
state: the model is built abstractly (``nnx.eval_shape``) and only ``step`` and ``params`` of the saved
train state are read (orbax partial restore of the ``state`` item,
:func:`openvivqa_jax.training.checkpoints.restore_params`, as the evaluations after training read them). The
decoders themselves come from :func:`openvivqa_jax.vqa.decoding.make_decode_fn` (beam / greedy search for
generators, arg-max for classifiers). :func:`attention_heat` turns a decoder's attention over the image into
the heat map that ``predict --plot`` draws.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from openvivqa_jax import accelerator
from openvivqa_jax.data import pipeline
from openvivqa_jax.data.records import DatasetError
from openvivqa_jax.models import build_model, model_class
from openvivqa_jax.text.answer_vocab import word_provenance
from openvivqa_jax.training import sharding
from openvivqa_jax.training.checkpoints import restore_params
from openvivqa_jax.vqa import assets, decoding
from openvivqa_jax.vqa.workdir import load_config

__all__ = ["make_attention_fn", "heat_from_boxes", "attention_heat", "PhotoQuestion", "Inference", "abstract_params",
           "load_config", "load_for_inference"]


@functools.lru_cache(maxsize=32)
def make_attention_fn(graphdef, bos_id: int):
    """The jitted ``(params, batch, ids) -> model.answer_attention(batch, ids, bos_id)`` (cached per arguments)."""
    return jax.jit(lambda params, batch, ids: nnx.merge(graphdef, params).answer_attention(batch, ids, bos_id))


def heat_from_boxes(boxes: np.ndarray, weights: np.ndarray, height: int, width: int) -> np.ndarray:
    """Rasterizes attention weights over boxes (grid cells or regions) into a map.

    Args:
      boxes: ``(S, 4)`` xyxy in [0, 1] (image-relative).
      weights: ``(S,)`` non-negative attention weights.
      height, width: raster size in cells.

    Returns:
      ``(height, width)`` float64: each raster cell holds the sum of the weights of the boxes covering its
      centre (for a grid whose cells tile the image at this resolution, exactly the cell weights).
    """
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    weights = np.asarray(weights, np.float64).reshape(-1)
    ys = (np.arange(height) + 0.5) / height
    xs = (np.arange(width) + 0.5) / width
    heat = np.zeros((height, width), np.float64)
    for (x0, y0, x1, y1), w in zip(boxes, weights):
        if w == 0:
            continue
        ry = (ys >= y0) & (ys < y1)
        rx = (xs >= x0) & (xs < x1)
        heat[np.ix_(ry, rx)] += w
    return heat


def attention_heat(step_weights: np.ndarray, boxes: np.ndarray, mask: np.ndarray, layout: tuple[int, int],
                   num_ocr: int) -> tuple[np.ndarray | None, str]:
    """The heat map of one answer's cross-attention over the image, and a note saying what it shows.

    The weights of the image's memory positions (``layout``, from the model's ``decoder_memory_layout``)
    are averaged over the answer steps, masked, normalized to sum 1 and rasterized with
    :func:`heat_from_boxes` (on the cells' own grid when the boxes tile one, else 96 x 128).

    Args:
      step_weights: ``(steps, memory)`` the decoder's cross-attention at the answer's steps (mean over layers
        and heads), e.g. ``answer_attention(...)["weights"][i, :n]``.
      boxes: ``(S, 4)`` the image cells' or regions' xyxy boxes in ``[0, 1]``; mask: ``(S,)`` the valid ones
        (the note says "cells" when the boxes tile a grid, else "regions").
      layout: ``(start, stop)`` of the ``S`` cells in the memory.
      num_ocr: ``N`` (MLPAG's eq. 9 sum fusion puts OCR token ``j`` on cell ``j``, which the note says).

    Returns:
      ``(heat (gh, gw) float64 or None, note)``; None with "no attention on the image" when the image's
      positions get no weight.
    """
    S = boxes.shape[0]
    lo, hi = layout
    vis = step_weights[:, lo:hi].mean(0) * mask
    share = float(vis.sum())
    if share <= 0:
        return None, "no attention on the image"
    xs, ys = np.unique(np.round(boxes[:, 0], 6)), np.unique(np.round(boxes[:, 1], 6))
    grid = len(xs) * len(ys) == S
    gh, gw = (len(ys), len(xs)) if grid else (96, 128)
    heat = heat_from_boxes(boxes, vis / share, gh, gw)
    # Region features and proposals are regions of their own shapes, not cells of a grid.
    what = f"{S} image cells" if grid else f"{int(np.count_nonzero(mask))} image regions"
    slot = "image cell" if grid else "image region"
    note = (f"heat map: answer-decoder cross-attention over {what}, mean over layers, heads and "
            f"{len(step_weights)} answer steps")
    if (lo, hi) != (0, step_weights.shape[-1]):
        note += f"; {share:.0%} of it is on image positions"
    else:
        note += f" (MLPAG eq. 9: memory slot j = {slot} j + OCR token j)" if num_ocr and lo == 0 else ""
    return heat, note


@dataclasses.dataclass
class PhotoQuestion:
    """One question about a photo: ids, the normalized question, the image (RGB ``PIL.Image``), its file and
    its OCR tokens (``{"text", "box", "score"}``, boxes xyxy in ``[0, 1]``)."""

    question_id: str
    image_id: str
    question: str
    image: Any
    image_path: str
    ocr: list[dict]


@dataclasses.dataclass(frozen=True)
class Inference:
    """A restored run, ready to answer.

    Attributes:
      cfg: the run's config (``num_answers`` set from ``answers.json`` for classifiers).
      workdir: the run folder (absolute).
      graphdef: the model's graph (``nnx.split(model, nnx.Param)[0]``).
      params: the restored parameters (``nnx.State``) placed on ``mesh``.
      step: the training step the parameters were saved at.
      mesh, batch_sharding: the device mesh (``cfg.mesh``) and the batch's sharding (leading axis on ``data``).
      inputs: tokenizer, answer list, preprocessors and answer vocabulary (:class:`openvivqa_jax.vqa.assets.Inputs`).
      is_generator: whether the model generates answers (else it classifies).
    """

    cfg: Any
    workdir: str
    graphdef: Any
    params: Any
    step: int
    mesh: Any
    batch_sharding: Any
    inputs: assets.Inputs
    is_generator: bool

    def photo_features(self, index: int, question_id: str, question: str, image_bytes: bytes, image_key: str,
                       ocr_tokens: list[dict]) -> dict:
        """Model inputs of one question about an encoded image with its OCR tokens (``{"text", "box",
        "score"}``), by the run's :class:`~openvivqa_jax.data.pipeline.Preprocessor` (``for_decoding``).

        Raises:
          openvivqa_jax.data.pipeline.DatasetError: an image or OCR token the preprocessor cannot use.
        """
        rec = pipeline.Record(
            index=index, question_id=question_id, image_id=image_key, question=question, answers=[], qa_type=-1,
            ocr_texts=[t["text"] for t in ocr_tokens], image_bytes=image_bytes,
            ocr_boxes=np.asarray([t["box"] for t in ocr_tokens], np.float32).reshape(-1, 4))
        return self.inputs.pre.features(rec, None, for_decoding=True)

    def answer_photos(self, questions: list[PhotoQuestion], beam: int, batch_size: int = 8,
                      with_attention: bool = False) -> list[dict]:
        """Answers questions about photos; returns per question ``{question_id, image_id, image, question, score,
        ocr, ocr_truncated, question_pieces, question_truncated, answer, words[, ids]}`` (``ocr``: the tokens the
        model saw, at most ``N``; ``question_truncated``: the question's tokens past ``model.max_question_len``,
        which the model did not read (:meth:`question_length`); ``words``: :meth:`explain`; ``ids``: a
        generator's decoded ids).

        Batches are padded to ``batch_size`` (one compilation per size). With ``with_attention`` each result
        also carries ``heat`` ``(gh, gw)`` (or None) and ``heat_note`` (:func:`attention_heat`).

        Raises:
          openvivqa_jax.data.pipeline.DatasetError: an image or OCR token the preprocessor cannot use (names the
            question and image).
        """
        encoded: dict[str, bytes] = {}

        def features(q: PhotoQuestion, index: int) -> dict:
            if q.image_path not in encoded:  # lossless, once per image (the Preprocessor decodes bytes)
                buf = io.BytesIO()
                q.image.save(buf, format="PNG", compress_level=1)
                encoded[q.image_path] = buf.getvalue()
            try:
                return self.photo_features(index, q.question_id, q.question, encoded[q.image_path], q.image_path, q.ocr)
            except DatasetError as e:
                raise DatasetError(f"question {q.question_id!r} ({q.image_path}): {e}") from None

        bs, n_ocr = max(1, min(batch_size, len(questions))), self.cfg.model.num_ocr
        eos = self.inputs.tokenizer.eos_id
        results: list[dict] = []
        for start in range(0, len(questions), bs):
            chunk = list(questions[start:start + bs])
            out, scores, batch = self.decode_batch([features(q, i) for i, q in enumerate(chunk)], bs, beam)
            attn = self.answer_attention(batch, out) if with_attention else None
            for i, q in enumerate(chunk):
                ocr = q.ocr[:n_ocr]
                pieces = self.question_length(q.question)
                res = {"question_id": q.question_id, "image_id": q.image_id, "image": q.image_path,
                       "question": q.question, "score": float(scores[i]), "ocr": ocr,
                       "ocr_truncated": max(0, len(q.ocr) - len(ocr)), "question_pieces": pieces,
                       "question_truncated": max(0, pieces - self.inputs.pre.q_len)}
                res["answer"], res["words"] = self.explain(out[i], ocr)
                if self.is_generator:
                    res["ids"] = [int(x) for x in out[i]]
                if with_attention and attn:
                    n_steps = next((t for t, x in enumerate(res["ids"]) if x == eos), len(res["ids"]))
                    # the answer's steps; the EOS step alone for an empty answer
                    res["heat"], res["heat_note"] = attention_heat(attn["weights"][i, : max(1, n_steps)],
                                                                   attn["boxes"][i], attn["mask"][i], attn["layout"],
                                                                   n_ocr)
                elif with_attention:
                    res["heat"], res["heat_note"] = None, f"no decoder attention map for model {self.cfg.model.name}"
                results.append(res)
        return results

    def question_length(self, question: str) -> int:
        """How many tokens of ``question`` the model would read without a limit: the pretrained text encoder's
        tokens where the run has one (M4C with BERT), else SentencePiece pieces; the preprocessor keeps the first
        ``model.max_question_len``."""
        bert = getattr(self.inputs.pre, "_question_bert", None)
        return len(bert.encode(question)) if bert is not None else len(self.inputs.pre.tok.encode(question))

    def decode_batch(self, feats: list[dict], batch_size: int, beam_size: int | None = None):
        """Decodes examples given as feature dicts (:meth:`~openvivqa_jax.data.pipeline.Preprocessor.features`
        with ``for_decoding``), padded to ``batch_size`` with invalid rows (one compilation per size):
        generators by beam search of ``beam_size`` (None: ``eval.beam_size``), classifiers by arg-max.

        Returns:
          ``(ids, scores, batch)``: numpy ids ``(batch_size, max_answer_len)`` over ``V + N`` (classifiers:
          ``(batch_size,)`` class ids), scores ``(batch_size,)``, and the global input batch.
        """
        feats = list(feats)
        while len(feats) < batch_size:
            pad = {k: np.zeros_like(v) for k, v in feats[0].items()}
            pad["valid"] = np.bool_(False)
            feats.append(pad)
        batch = pipeline.to_global({k: np.stack([f[k] for f in feats]) for k in feats[0]}, self.batch_sharding)
        settings = decoding.DecodeSettings.from_config(self.cfg, self.is_generator, method="beam",
                                                       beam_size=beam_size)
        fn = decoding.make_decode_fn(self.graphdef, settings)
        with self.mesh:
            ids, scores = fn(self.params, batch)
        return np.asarray(ids), np.asarray(scores), batch

    def answer_attention(self, batch: dict, ids: np.ndarray) -> dict | None:
        """The model's ``answer_attention`` of decoded ``ids`` ``(batch, steps)`` (numpy ``weights`` ``(batch,
        steps, memory)``, ``boxes`` ``(batch, S, 4)``, ``mask`` ``(batch, S)``) plus ``layout``, the image's
        ``(start, stop)`` in the memory (``decoder_memory_layout``); None for classifiers and for generators
        without a memory decoder (M4C)."""
        n = self.cfg.model.num_ocr
        model = nnx.merge(self.graphdef, self.params)
        if not self.is_generator or model.decoder_memory_layout(1, n) is None:
            return None
        fn = make_attention_fn(self.graphdef, int(self.inputs.tokenizer.bos_id))
        with self.mesh:
            out = {k: np.asarray(v) for k, v in fn(self.params, batch, jnp.asarray(ids)).items()}
        out["layout"] = model.decoder_memory_layout(out["boxes"].shape[1], n)
        return out

    def explain(self, ids, ocr_tokens: list[dict]) -> tuple[str, list[dict]]:
        """The answer text of one decoded row and where each of its words came from.

        Args:
          ids: a generator's ids ``(steps,)`` over ``V + N`` or a classifier's class id.
          ocr_tokens: the example's OCR tokens in slot order (``{"text", "box", "score"}``).

        Returns:
          ``(answer, words)``: :func:`openvivqa_jax.text.answer_vocab.word_provenance` (generators) or
          :meth:`openvivqa_jax.text.answer_list.AnswerList.word_provenance` (classifiers).

        Raises:
          AssertionError: the provenance words, joined, differ from the decoded answer (a bug).
        """
        inp, texts = self.inputs, [t["text"] for t in ocr_tokens]
        if not self.is_generator:
            return inp.answer_list.decode(int(ids), texts), inp.answer_list.word_provenance(int(ids), ocr_tokens)
        ids = [int(x) for x in ids]
        answer = inp.vocab.decode(ids, texts)
        words = word_provenance(ids, inp.vocab, inp.tokenizer, ocr_tokens)
        joined = " ".join(w["word"] for w in words)
        if joined != answer:  # the provenance must describe exactly the decoded answer
            raise AssertionError(f"provenance {joined!r} != answer {answer!r}")
        return answer, words


def abstract_params(cfg, model, mesh) -> tuple[Any, Any]:
    """``(graphdef, params)`` of ``model`` with the parameters as ``jax.ShapeDtypeStruct`` s carrying the
    run's parameter shardings over ``mesh`` (``cfg.sharding_rules``, ``cfg.fsdp``; as in training)."""
    graphdef, params = nnx.split(model, nnx.Param)
    abstract = jax.eval_shape(lambda p: p, params)
    shardings = sharding.param_shardings(abstract, mesh, tuple(cfg.get("sharding_rules", ())),
                                         fsdp=cfg.get("fsdp", False))
    return graphdef, jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)


def load_for_inference(workdir: str, cfg=None) -> Inference:
    """Restores the parameters of a run for answering (no dataset, no model initialization, no optimizer state).

    Args:
      workdir: the run folder: ``config.json`` (used when ``cfg`` is None), ``spm.model``, for classifiers
        ``answers.json``, and a checkpoint in ``best/`` or ``checkpoints/`` (the best step is preferred).
      cfg: the config to use instead of ``config.json`` (e.g. with another ``mesh.shape``); changed in place
        (``model.num_answers``; ``model.vision.checkpoint`` is cleared since the weights come from the run).

    Raises:
      FileNotFoundError: ``spm.model``, ``answers.json`` (classifiers) or every checkpoint is missing.
      openvivqa_jax.evaluation.formats.InputError: an unusable ``config.json``
        (:func:`openvivqa_jax.vqa.workdir.load_config`).
      openvivqa_jax.accelerator.BackendError: ``JAX_PLATFORMS`` names a backend JAX cannot start.
    """
    workdir = os.path.abspath(os.path.expanduser(workdir))
    cfg = load_config(workdir) if cfg is None else cfg
    # The log's backend line; the run's config.platform is not enforced: a run trained on GPUs answers anywhere.
    accelerator.start_backend()
    with cfg.unlocked():
        if cfg.model.get("vision") is not None and cfg.model.vision.get("checkpoint"):
            cfg.model.vision.checkpoint = None  # the trained weights come from the run's checkpoint
    tokenizer = assets.load_tokenizer(cfg, workdir)
    is_generator = model_class(cfg.model.name).is_generator
    answer_list = None if is_generator else assets.load_answer_list(cfg, workdir)
    model = nnx.eval_shape(lambda: build_model(cfg.model, tokenizer.vocab_size, seed=cfg.seed))
    mesh = sharding.create_mesh(cfg.mesh.shape, cfg.mesh.axes)
    graphdef, abstract = abstract_params(cfg, model, mesh)
    params, step = restore_params(workdir, abstract, "best")
    return Inference(cfg, workdir, graphdef, params, step, mesh, sharding.batch_sharding(mesh),
                     assets.make_inputs(cfg, tokenizer, answer_list, model), is_generator)
