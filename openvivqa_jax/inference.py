"""Answering with a trained run: restore the parameters only, and the jitted decoders.

:func:`load_for_inference` rebuilds a run from its workdir (``config.json``, ``spm.model``,
``answers.json`` for classifiers, a checkpoint) without initializing the model and without the optimizer
state: the model is built abstractly (``nnx.eval_shape``) and only ``step`` and ``params`` of the saved
train state are read (orbax partial restore of the ``state`` item). :func:`restore_params` does the
reading for the trainer's final evaluation too. The decoders themselves come from
:func:`openvivqa_jax.decoding.make_decode_fn` (beam / greedy search for generators, arg-max for classifiers).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import logging as std_logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from flax import nnx

from openvivqa_jax import assets, decoding, sharding
from openvivqa_jax.errors import UserError
from openvivqa_jax.workdir import load_config

__all__ = ["CheckpointMismatchError", "CheckpointCorruptError", "restore_newest", "check_checkpoint_fits",
           "restore_params", "make_attention_fn", "PhotoQuestion", "Inference",
           "abstract_params", "load_config", "load_for_inference"]


class CheckpointMismatchError(UserError, ValueError):
    """A run's checkpoint does not fit the model built from the config (other model settings than the run was
    trained with, e.g. another ``d_model``, vocabulary or ``model.question_over_image``)."""


class CheckpointCorruptError(UserError, ValueError):
    """No checkpoint step of a run restores (each is unreadable: a truncated or missing data file, bad metadata)."""


def _first_line(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quiet_closed_loop_callbacks() -> None:
    """Drops the "Event loop is closed" errors that a failed orbax restore leaves behind.

    When one array of a step cannot be read, orbax closes its asyncio loop while TensorStore still completes
    the reads of the other arrays; each completion then raises ``RuntimeError('Event loop is closed')`` in a
    callback, which Python reports through ``sys.unraisablehook`` (thousands of traceback lines for a real
    model). Those errors say nothing more than the warning line does, so they are dropped; any other unraisable
    error still goes to the previous hook. Installed once per process.
    """
    previous = sys.unraisablehook
    if getattr(previous, "_drops_closed_loop", False):
        return

    def hook(unraisable):
        e = unraisable.exc_value
        if isinstance(e, RuntimeError) and str(e) == "Event loop is closed":
            return
        previous(unraisable)

    hook._drops_closed_loop = True
    sys.unraisablehook = hook


class _UnretrievedReadErrors(std_logging.Filter):
    """Keeps asyncio's "exception was never retrieved" reports of the reads of a corrupt step off stderr.

    When one array of a step fails to read, orbax's gather raises the first error and the reads of the other
    arrays finish later with the same kind of error that nobody awaits; when those tasks are collected, asyncio
    logs each with its traceback, at a time that depends on the garbage collector (even before the failed
    restore has returned). Those errors are summed up in the step's one ``warning:`` line, so only reports whose
    exception names a step folder in :attr:`steps` (those being restored) are dropped, logged at debug level
    instead; a step that restores has no failed read to report, and every other asyncio error still shows.
    """

    def __init__(self):
        super().__init__()
        self.steps: set[str] = set()

    def filter(self, record: std_logging.LogRecord) -> bool:
        if not self.steps or "exception was never retrieved" not in str(record.msg):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        text = f"{exc} {record.getMessage()}"
        if any(step in text for step in self.steps):
            logging.debug("unretrieved read error of a corrupt checkpoint step: %s", _first_line(exc or record.msg))
            return False
        return True


_UNRETRIEVED = _UnretrievedReadErrors()


def _watch_step(directory: str, step: int) -> None:
    """Adds a step folder to the filter of unretrieved read errors (installed on the asyncio logger once)."""
    if _UNRETRIEVED not in std_logging.getLogger("asyncio").filters:
        std_logging.getLogger("asyncio").addFilter(_UNRETRIEVED)
    for d in {directory, os.path.abspath(directory), os.path.realpath(directory)}:
        _UNRETRIEVED.steps.add(os.path.join(d, str(step)) + os.sep)


def restore_newest(directory: str, steps: Sequence[int], restore: Callable[[int], Any],
                   on_bad: Callable[[int], str] | None = None) -> tuple[int, Any]:
    """Restores the first step of ``steps`` (newest first) that restores, passing over corrupt ones.

    A step that fails to restore (orbax / TensorStore raise, e.g. ``OUT_OF_RANGE ... Requested byte range`` for
    a truncated data file) is reported by one ``warning:`` line on stderr naming the step, and the next one is
    tried; the bad step is kept on disk (``on_bad`` may move it aside and say where). A
    :class:`CheckpointMismatchError` (the checkpoint does not fit the model) is not corruption and is raised.

    Args:
      directory: the checkpoint folder, named in messages.
      steps: the steps to try, in order.
      restore: ``step -> restored`` (raises when the step cannot be read).
      on_bad: called with a bad step; returns what to add to the warning (e.g. where it was moved).

    Returns:
      ``(step, restored)`` of the first step that restores.

    Raises:
      CheckpointCorruptError: no step restores (one line naming the steps and the first error).
      CheckpointMismatchError: from ``restore``.
    """
    failed: list[tuple[int, BaseException]] = []
    _quiet_closed_loop_callbacks()  # before the first attempt: a failing one reports from other threads at once
    for step in steps:
        _watch_step(directory, step)
        try:
            out = restore(step)
        except CheckpointMismatchError:
            raise
        except Exception as e:  # noqa: BLE001 - orbax, TensorStore and msgpack raise many types for a bad file
            logging.debug("checkpoint step %s in %s does not restore", step, directory, exc_info=True)
            failed.append((step, e))
            extra = on_bad(step) if on_bad is not None else ""
            print(f"warning: checkpoint step {step} in {directory} does not restore ({_first_line(e, 160)}); "
                  f"kept{extra}, trying the step before it", file=sys.stderr)
            continue
        if failed:
            print(f"warning: restored step {step} from {directory} instead of the newest step {failed[0][0]}, "
                  "which does not restore", file=sys.stderr)
        return step, out
    raise CheckpointCorruptError(
        f"no checkpoint in {directory} restores: step(s) {', '.join(str(s) for s, _ in failed)} fail (step "
        f"{failed[0][0]}: {_first_line(failed[0][1], 160)}); train again with another --workdir, or restore the "
        "files from a copy")


def _saved_param_shapes(item_dir: str) -> dict[str, tuple[int, ...]] | None:
    """``{parameter path: shape}`` of the ``params`` subtree stored in an orbax item folder, from its metadata
    (no array is read); None when the metadata cannot be read (then the restore itself reports)."""
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.ERROR)  # orbax warns that a per-item metadata file is absent: not an error here
    try:
        meta = ocp.PyTreeCheckpointer().metadata(item_dir)
        tree = getattr(getattr(meta, "item_metadata", meta), "tree", None)
        params = tree["params"]
        return {sharding.path_str(p).removesuffix("/value"): tuple(m.shape)
                for p, m in jax.tree_util.tree_leaves_with_path(params)}
    except Exception:  # noqa: BLE001 - any unreadable or other-format metadata: leave it to the restore
        return None
    finally:
        logging.set_verbosity(verbosity)


def check_checkpoint_fits(item_dir: str, abstract_params: Any, config_path: str | None = None) -> None:
    """Compares the parameter shapes stored in a checkpoint with the model's before anything is restored.

    Args:
      item_dir: the checkpoint's ``state`` item folder, ``<workdir>/<checkpoints|best>/<step>/state``.
      abstract_params: the model's parameters (arrays or ``jax.ShapeDtypeStruct`` s, an ``nnx.State``).
      config_path: the run's ``config.json``, named in the message.

    Raises:
      CheckpointMismatchError: one line naming the checkpoint, how many parameters differ in shape, are
        missing from it or are not in the model, with one example of each, and the run's config.
    """
    saved = _saved_param_shapes(item_dir)
    if saved is None:
        return
    want = {sharding.path_str(p).removesuffix("/value"): tuple(a.shape)
            for p, a in jax.tree_util.tree_leaves_with_path(abstract_params)}
    differ = sorted(k for k in saved.keys() & want.keys() if saved[k] != want[k])
    missing = sorted(want.keys() - saved.keys())
    extra = sorted(saved.keys() - want.keys())
    if not (differ or missing or extra):
        return
    parts = []
    if differ:
        k = differ[0]
        parts.append(f"{len(differ)} parameters differ in shape (e.g. {k}: {saved[k]} in the checkpoint, {want[k]} "
                     "in the model)")
    if missing:
        parts.append(f"{len(missing)} of the model's parameters are not in the checkpoint (e.g. {missing[0]})")
    if extra:
        parts.append(f"{len(extra)} of the checkpoint's parameters are not in the model (e.g. {extra[0]})")
    cfg = f"; the run was trained with {config_path}" if config_path else ""
    raise CheckpointMismatchError(
        f"checkpoint {item_dir} does not fit the model of this config: {'; '.join(parts)}{cfg}. Use the model "
        "settings the run was trained with, or another --workdir")


def restore_params(workdir: str, abstract: Any, which: str = "best") -> tuple[Any, int]:
    """Reads the parameters (and the step) of a saved train state, not its optimizer state.

    Looks in ``<workdir>/best`` (its best step, else its latest) and then ``<workdir>/checkpoints``
    (latest) when ``which`` is ``"best"``; only in ``<workdir>/<which>`` otherwise. The checkpoints are
    the trainer's (orbax ``CheckpointManager``, item ``state`` = ``TrainState(step, params, opt_state)``);
    only the ``step`` and ``params`` subtrees are read (``PyTreeRestore(partial_restore=True)``).

    Args:
      workdir: the run folder.
      abstract: the parameters as ``jax.ShapeDtypeStruct`` s carrying their target shardings (an
        ``nnx.State``), e.g. from :func:`abstract_params`.
      which: ``"best"`` or ``"checkpoints"``.

    Returns:
      ``(params, step)``: the restored ``nnx.State`` placed with ``abstract``'s shardings, and the saved step.

    A step that does not restore (a truncated data file) is passed over with one warning line, newest first
    (:func:`restore_newest`): in ``best/`` its other steps, then ``checkpoints/``.

    Raises:
      FileNotFoundError: if the workdir holds no checkpoint there.
      CheckpointCorruptError: checkpoints exist but none restores.
      CheckpointMismatchError: the checkpoint's parameters do not fit ``abstract`` (:func:`check_checkpoint_fits`).
    """
    corrupt: CheckpointCorruptError | None = None
    for sub in ([which, "checkpoints"] if which == "best" else [which]):
        d = os.path.join(workdir, sub)
        if not os.path.isdir(d):
            continue
        mngr = ocp.CheckpointManager(d, item_names=("state",) if sub == "best" else ("state", "data_iter"))
        first = mngr.best_step() if sub == "best" else mngr.latest_step()
        if first is None:
            first = mngr.latest_step()
        if first is None:
            continue
        steps = [first] + sorted((s for s in mngr.all_steps() if s != first), reverse=True)
        repl = jax.sharding.NamedSharding(jax.tree.leaves(abstract)[0].sharding.mesh, jax.sharding.PartitionSpec())
        target = {"step": jax.ShapeDtypeStruct((), jnp.int32, sharding=repl), "params": abstract}

        def restore(step, d=d, mngr=mngr, target=target):
            check_checkpoint_fits(os.path.join(d, str(step), "state"), abstract, os.path.join(workdir, "config.json"))
            return mngr.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
                item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target), partial_restore=True)))

        try:
            step, restored = restore_newest(d, steps, restore)
        except CheckpointCorruptError as e:
            corrupt = corrupt or e
            continue
        state = restored["state"]
        logging.info("Restored the parameters of the %s checkpoint at step %d from %s", sub, step, d)
        return state["params"], int(jax.device_get(state["step"]))
    if corrupt is not None:
        raise corrupt
    raise FileNotFoundError(f"no checkpoint in {workdir} (looked in best/ and checkpoints/)")


@functools.lru_cache(maxsize=32)
def make_attention_fn(graphdef, bos_id: int):
    """The jitted ``(params, batch, ids) -> model.answer_attention(batch, ids, bos_id)`` (cached per arguments)."""
    return jax.jit(lambda params, batch, ids: nnx.merge(graphdef, params).answer_attention(batch, ids, bos_id))


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
      inputs: tokenizer, answer list, preprocessors and answer vocabulary (:class:`openvivqa_jax.assets.Inputs`).
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
        from openvivqa_jax.data import pipeline

        rec = pipeline.Record(
            index=index, question_id=question_id, image_id=image_key, question=question, answers=[], qa_type=-1,
            ocr_texts=[t["text"] for t in ocr_tokens], image_bytes=image_bytes,
            ocr_boxes=np.asarray([t["box"] for t in ocr_tokens], np.float32).reshape(-1, 4))
        return self.inputs.pre.features(rec, None, for_decoding=True)

    def answer_photos(self, questions: list[PhotoQuestion], beam: int, batch_size: int = 8,
                      with_attention: bool = False) -> list[dict]:
        """Answers questions about photos; returns per question ``{question_id, image_id, image, question, score,
        ocr, ocr_truncated, answer, words[, ids]}`` (``ocr``: the tokens the model saw, at most ``N``; ``words``:
        :meth:`explain`; ``ids``: a generator's decoded ids).

        Batches are padded to ``batch_size`` (one compilation per size). With ``with_attention`` each result
        also carries ``heat`` ``(gh, gw)`` (or None) and ``heat_note`` (:func:`openvivqa_jax.plot.attention_heat`).

        Raises:
          openvivqa_jax.data.pipeline.DatasetError: an image or OCR token the preprocessor cannot use (names the
            question and image).
        """
        from openvivqa_jax.data.pipeline import DatasetError
        from openvivqa_jax.plot import attention_heat

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
                res = {"question_id": q.question_id, "image_id": q.image_id, "image": q.image_path,
                       "question": q.question, "score": float(scores[i]), "ocr": ocr,
                       "ocr_truncated": max(0, len(q.ocr) - len(ocr))}
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

    def decode_batch(self, feats: list[dict], batch_size: int, beam_size: int | None = None):
        """Decodes examples given as feature dicts (:meth:`~openvivqa_jax.data.pipeline.Preprocessor.features`
        with ``for_decoding``), padded to ``batch_size`` with invalid rows (one compilation per size):
        generators by beam search of ``beam_size`` (None: ``eval.beam_size``), classifiers by arg-max.

        Returns:
          ``(ids, scores, batch)``: numpy ids ``(batch_size, max_answer_len)`` over ``V + N`` (classifiers:
          ``(batch_size,)`` class ids), scores ``(batch_size,)``, and the global input batch.
        """
        from openvivqa_jax.data import pipeline

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
        from openvivqa_jax.text.answer_vocab import word_provenance

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
        (:func:`openvivqa_jax.workdir.load_config`).
    """
    from openvivqa_jax.models import build_model, model_class

    workdir = os.path.abspath(os.path.expanduser(workdir))
    cfg = load_config(workdir) if cfg is None else cfg
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
