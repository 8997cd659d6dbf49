"""The evaluations of answer generation: decode a split with a model's parameters, score it, print and write the
tables (``eval/<role>_metrics.json``, ``eval/<role>_predictions.json``, ``metrics.jsonl``, TensorBoard); the
driver that the train loop (:mod:`openvivqa_jax.vqa.train`) calls down into for the periodic dev scores and the
evaluations after training, as big_vision's evaluators are, and ``--mode evaluate`` (:func:`evaluate`) runs alone.

What runs after training is ``config.evals`` (:func:`run`; the entries and their checks:
:mod:`openvivqa_jax.vqa.config`), with the best checkpoint's parameters (:func:`final_evaluation`).
"""

from __future__ import annotations

import dataclasses
import os

import jax
import ml_collections
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from openvivqa_jax import outputs
from openvivqa_jax import evaluation
from openvivqa_jax.data import model_ready, pipeline
from openvivqa_jax.evaluation import copying
from openvivqa_jax.training import checkpoints, interrupts, sharding
from openvivqa_jax.training.state import TrainState
from openvivqa_jax.vqa import config as vqa_config
from openvivqa_jax.vqa import decoding, run_settings
from openvivqa_jax.vqa.experiment import Experiment, create_experiment
from openvivqa_jax.vqa.workdir import check_workdir

__all__ = ["predict_split", "evaluate_split", "print_table", "write_metrics_file", "run", "final_evaluation",
           "evaluate"]


def predict_split(exp: Experiment, params, split: str, mask_ocr: bool = False, max_examples: int = 0,
                  settings: decoding.DecodeSettings | None = None) -> list[dict]:
    """Decodes ``split`` with ``params`` (``settings``: how; None: the run's ``eval`` settings); returns
    prediction records ``{question_id, question, prediction, references, qa_type}`` (plus ``language`` and
    ``kind`` where the dataset has them) in split order (each example exactly once).

    Raises:
      RuntimeError: a question of the split got no prediction.
    """
    src = exp.data.source(split)
    recs = exp.data.records(split)
    if max_examples:
        src = _Head(src, max_examples)
        recs = recs[:max_examples]
    inp, spec = exp.inputs, exp.spec
    pre = inp.pre_no_ocr if mask_ocr else inp.pre
    settings = settings or decoding.DecodeSettings.from_config(exp.cfg, spec.is_generator)
    fn = decoding.make_decode_fn(spec.graphdef, settings)
    preds: dict[int, str] = {}
    decode_notes: dict[int, dict] = {}  # dropped byte-fallback bytes / unknown pieces, for the metrics notes
    ready = exp.data.model_ready(split, pre, exp.workdir)
    if ready is not None:
        batches = model_ready.eval_batches(ready, batch_size=_local_eval_batch(exp), max_examples=max_examples)
    else:
        batches = pipeline.eval_batches(src, pre, batch_size=_local_eval_batch(exp), source_name=split)
    for local in batches:
        batch = pipeline.to_global(local, spec.batch_sharding)
        with sharding.mesh_context(spec.mesh):
            ids, _ = fn(params, batch)
        ids, index, valid = _gather(ids), _gather(batch["index"]), _gather(batch["valid"])
        for row, i, v in zip(ids, index, valid):
            if v:
                ocr = [] if mask_ocr else recs[int(i)].ocr_texts[: exp.cfg.model.num_ocr]
                if spec.is_generator:
                    preds[int(i)], notes = inp.vocab.decode_with_notes(row, ocr)
                    if notes:
                        decode_notes[int(i)] = dataclasses.asdict(notes)
                else:
                    preds[int(i)] = inp.answer_list.decode(int(row), ocr)
    missing = [r.question_id for r in recs if r.index not in preds]
    if missing:
        raise RuntimeError(f"evaluation of {split} produced no prediction for {len(missing)} questions, "
                           f"e.g. {missing[:3]}")
    return [{"question_id": r.question_id, "image_id": r.image_id, "question": r.question,
             "prediction": preds[r.index], "references": r.answers, "qa_type": r.qa_type,
             **({"language": r.extra["language"]} if "language" in r.extra else {}),
             **({"kind": r.kind} if r.kind else {}),
             **({"decode_notes": decode_notes[r.index]} if r.index in decode_notes else {})} for r in recs]


def _local_eval_batch(exp: Experiment) -> int:
    b = exp.cfg.eval.batch_size
    data = exp.spec.mesh.shape["data"]
    b = -(-b // data) * data
    return b // jax.process_count()


def evaluate_split(exp: Experiment, params, step: int | None, split: str, write: bool = True,
                   mask_ocr: bool = False, tag: str | None = None,
                   settings: decoding.DecodeSettings | None = None) -> tuple[dict, list]:
    """Decodes and scores ``split`` with ``params`` (saved at training ``step``; ``settings``: how to decode,
    None: the run's ``eval`` settings); writes ``eval/<tag>_metrics.json`` and ``_predictions.json`` when
    ``write`` (process 0).

    The metrics carry ``decoding``: how the predictions were made (``method`` greedy/beam/argmax,
    ``beam_size``, ``alpha``, ``ocr_masked``, the parameters' training ``step``), so files rewritten by a
    later ``--mode evaluate`` with other decoding settings say so.

    Raises:
      KeyboardInterrupt: a Ctrl-C/SIGTERM recorded earlier whose exception was swallowed
        (:func:`openvivqa_jax.training.interrupts.raise_if_received`).
    """
    interrupts.raise_if_received()
    cfg = exp.cfg
    settings = settings or decoding.DecodeSettings.from_config(cfg, exp.spec.is_generator)
    preds = predict_split(exp, params, split, mask_ocr=mask_ocr, max_examples=cfg.eval.max_eval_examples,
                          settings=settings)
    out_dir = os.path.join(exp.workdir, "eval")
    writes = write and jax.process_index() == 0
    metrics = evaluation.evaluate_split(preds, out_dir if writes else None, tag or split,
                                        metrics=tuple(cfg.eval.metrics),
                                        answer_rules=cfg.eval.get("answer_rules", "vietnamese"),
                                        text_mode=cfg.eval.get("text_mode", "openvivqa"))
    metrics["decoding"] = dict(settings.describe(), ocr_masked=bool(mask_ocr), step=None if step is None else int(step))
    if writes:
        write_metrics_file(exp, tag or split, metrics)
    return metrics, preds


class _Head:
    def __init__(self, src, n):
        self.src, self.n = src, min(n, len(src))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.src[i]


def _gather(x) -> np.ndarray:
    if jax.process_count() > 1:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def print_table(title: str, metrics: dict) -> str:
    """The text of one metrics table (:func:`openvivqa_jax.evaluation.format_table`) under a ``== title ==`` line."""
    text = evaluation.format_table(metrics)
    return f"\n== {title} ==\n{text}"


def write_metrics_file(exp: Experiment, tag: str, metrics: dict) -> None:
    """Writes ``metrics`` to ``<workdir>/eval/<tag>_metrics.json`` (process 0; replaces the file)."""
    if jax.process_index() == 0:
        outputs.write_json(os.path.join(exp.workdir, "eval", f"{tag}_metrics.json"), metrics, indent=2)


def run(exp, params, params_step: int, step: int, writer=None, record_kind: str = "final") -> dict[str, dict]:
    """Runs the planned evaluations of ``exp.cfg`` with ``params`` (saved at ``params_step``); logs them in
    ``metrics.jsonl`` at ``step`` and prints the tables (process 0).

    Args:
      exp: the run (:class:`openvivqa_jax.vqa.experiment.Experiment`).
      params: the parameters to score.
      params_step: the training step ``params`` were saved at (in each metrics file's ``decoding``).
      step: the step of the ``metrics.jsonl`` records and of the TensorBoard scalars.
      writer: a ``clu`` metric writer for the decode entries with ``tensorboard`` and the reports over them
        (``<name>/shop_name_copy_rate``, ``<with_ocr>/text_qa_cider_ocr_ratio``); None: no TensorBoard.
      record_kind: the ``kind`` of the ``metrics.jsonl`` records: ``final`` at the end of training,
        ``evaluate`` for a later re-scoring (so a file's ``final`` records stay the training's own).

    Returns:
      ``{name: metrics}`` of the decode entries scored.
    """
    results: dict[str, dict] = {}
    preds_of: dict[str, list] = {}
    lines: list[str] = []
    boarded: set[str] = set()  # decode entries written to TensorBoard

    def record(scalars: dict, tensorboard: bool) -> None:
        exp.jsonl.write(step, record_kind, scalars)
        if writer is not None and tensorboard:
            writer.write_scalars(step, scalars)

    for spec in vqa_config.deduplicated(vqa_config.plan(exp.cfg)):
        if spec.kind == "decode":
            metrics, preds = evaluate_split(exp, params, params_step, spec.split, mask_ocr=spec.mask_ocr,
                                             tag=spec.name)
            results[spec.name], preds_of[spec.name] = metrics, preds
            masked = " with OCR tokens masked out" if spec.mask_ocr else ""
            lines.append(print_table(f"{spec.name}: {spec.split}{masked} ({len(preds)} questions)", metrics))
            if spec.print_examples:
                lines.append(f"\n== example answers ({spec.split}) ==")
                for p in preds[: spec.print_examples]:
                    lines.append(f"Q: {p['question']}\n   predicted: {p['prediction']}\n   reference: "
                                 f"{' | '.join(p['references'])}")
            record({f"{spec.name}/{k}": v for k, v in metrics["overall"].items() if v is not None}, spec.tensorboard)
            if spec.tensorboard:
                boarded.add(spec.name)
        elif spec.kind == "copy_rate":
            for name in spec.of:
                if name not in preds_of:
                    continue
                copy = copying.shop_name_copy_rate(preds_of[name])
                if copy["rate"] is None:
                    continue  # no shop-name questions (not the synthetic set)
                results[name]["shop_name_copy_rate"] = copy
                lines.append(f"{name}: unseen shop names copied (shop-name questions whose answer contains the full "
                             f"name; these names never occur in training): {copy['rate']:.1%} "
                             f"({copy['num_copied']}/{copy['num_questions']})")
                record({f"{name}/shop_name_copy_rate": copy["rate"]}, name in boarded)
                write_metrics_file(exp, name, results[name])
        elif spec.kind == "ocr_ratio":
            missing = [n for n in (spec.with_ocr, spec.without_ocr) if n not in results]
            if missing:
                logging.info("evals.%s: no ratio, %s was not scored (switched off)", spec.name, " and ".join(missing))
                continue
            with_ocr = (results[spec.with_ocr].get("text_qa") or {}).get("CIDEr")
            without = (results[spec.without_ocr].get("text_qa") or {}).get("CIDEr")
            if with_ocr is not None and without is not None:
                ratio = with_ocr / without if without > 0 else float("inf")
                lines.append(f"text-QA CIDEr {spec.with_ocr} {with_ocr:.3f} vs {spec.without_ocr} {without:.3f}: "
                             f"ratio {ratio:.2f}")
                record({f"{spec.with_ocr}/text_qa_cider_ocr_ratio": ratio}, spec.with_ocr in boarded)
    if jax.process_index() == 0:
        print("\n".join(lines), flush=True)
    return results


def final_evaluation(exp: Experiment, step: int | None, state: TrainState | None = None, writer=None,
                     record_kind: str = "final") -> dict:
    """Runs the evaluations of ``config.evals`` (:func:`run`; :mod:`openvivqa_jax.vqa.config`: by default dev,
    test, test with OCR tokens masked out, the copy rate of unseen shop names and the OCR ratio) with the best
    checkpoint's parameters (:func:`openvivqa_jax.training.checkpoints.restore_params`: ``best/``, else the
    latest of ``checkpoints/``; no optimizer state), and prints their tables and example answers.

    Files, ``metrics.jsonl`` keys and TensorBoard tags name the splits by their role (the entry's name:
    ``dev``, ``test``, ``test_no_ocr``), whatever the dataset calls them (``validation``, ``val``,
    ``train[90%:]``).

    Args:
      exp: the run.
      step: the step logged in ``metrics.jsonl`` (None: the restored parameters' step).
      state: the current train state, evaluated when the workdir holds no checkpoint.
      writer: a ``clu`` metric writer for the entries with ``tensorboard`` (``test/<metric>``,
        ``test_no_ocr/<metric>``) at ``step``. None: no TensorBoard.
      record_kind: the ``kind`` of the ``metrics.jsonl`` records (``final``; ``evaluate`` for ``--mode
        evaluate``, which leaves the training's ``final`` records the only ones).

    Returns:
      ``{role: metrics}`` for the roles scored.

    Raises:
      FileNotFoundError: no checkpoint and no ``state``.
    """
    try:
        params, p_step = checkpoints.restore_params(exp.workdir, exp.spec.abstract_state.params, "best")
    except FileNotFoundError:
        if state is None:
            raise
        logging.warning("no best checkpoint; evaluating the current parameters")
        params, p_step = state.params, int(jax.device_get(state.step))
    return run(exp, params, p_step, p_step if step is None else step, writer=writer, record_kind=record_kind)


def evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """``--mode evaluate``: runs the evaluations of ``config.evals`` again with the best checkpoint of ``workdir``
    (:func:`final_evaluation`; records of kind ``evaluate``). The model is built abstractly and only the
    parameters of the best checkpoint are restored.

    Raises:
      RunFolderError: ``workdir`` holds no checkpoint, tokenizer or config (checked before anything is made).
      CheckpointMismatchError: a setting the run's files fix differs (:func:`run_settings.check_settings`).
    """
    folder = os.path.abspath(os.path.expanduser(workdir))
    check_workdir(folder)  # nothing to score: say so before a tokenizer is made
    run_settings.check_settings(cfg, folder, mode="evaluate")
    exp, _ = create_experiment(cfg, workdir, initialize=False)
    return final_evaluation(exp, step=None, record_kind="evaluate")
