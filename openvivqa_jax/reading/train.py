"""The span reader's train loop (config ``task = "reading"``, dispatched by :data:`openvivqa_jax.main.TASKS`):
``python -m openvivqa_jax.main --config configs/viquad/reader.py --workdir DIR``; its evaluation is
:mod:`openvivqa_jax.reading.evals`.

The run folder is laid out as the answer generators' (:mod:`openvivqa_jax.vqa.train`): ``config.json``,
``spm.model`` (SentencePiece, trained on the train split's normalized passages and questions when absent),
orbax checkpoints in ``checkpoints/<step>/`` (items ``state`` = :class:`~openvivqa_jax.training.state.TrainState` and
``data_iter`` = the batches read from the shuffled window stream, :class:`.batching.WindowStream`, so a killed
run resumes where it stopped) and ``best/<step>/`` (the best dev ``train.best_metric``), TensorBoard event files and
``metrics.jsonl`` (clu), and per evaluated split ``eval/<split>_metrics.json`` (EM, F1 and the ViQuAD
human-performance protocol, :func:`openvivqa_jax.evaluation.evaluate_split`), ``eval/<split>_predictions.json``
and ``eval/<split>_spans.json`` (each prediction's characters ``[start, end)`` in its original passage and its
span score).

Predictions are cut from the original passage by character offsets (:mod:`.features`), then scored by the
project's SQuAD EM/F1 (:mod:`openvivqa_jax.evaluation.squad`) against the answers as written.

One device: the reader is small; the batch is not sharded.

Ctrl-C / SIGTERM save the current step and stop with one line (:mod:`openvivqa_jax.training.interrupts`).

The log speaks as the answer generators' (:mod:`openvivqa_jax.vqa.train`): one line per ``train.log_every_steps``
(means since the last line, finished steps per second and the time left to the last step at that rate, both
measured after the steps' results are fetched, and the process's CPU minutes so far), one per dev evaluation, TensorBoard scalar events written without
logging them again, and at the end the dev/test tables and the comparison with the paper's Table 5
(:mod:`.report`). A schedule whose peak rate is too high for a reader trained from scratch, or whose warmup
outlasts the run, is a WARNING line (:func:`warn_schedule`).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl import logging
from flax import nnx

from openvivqa_jax import outputs
from openvivqa_jax.data.records import DatasetError
from openvivqa_jax.reading import evals
from openvivqa_jax.reading.batching import WindowStream
from openvivqa_jax.reading.data import read_split, reader_windows, setup
from openvivqa_jax.reading.model import build_reader, span_loss
from openvivqa_jax.reading.vectors import vectors_trained_here
from openvivqa_jax.text.tokenizer import Tokenizer
from openvivqa_jax.training import checkpoints, interrupts, tensorboard_writer
from openvivqa_jax.training.run_log import (IntervalTimer, MeanAccumulator, format_duration, process_cpu_minutes,
                                           write_jsonl)
from openvivqa_jax.reading.pretrained import WORD_EMBEDDING, initialize_word_vectors
from openvivqa_jax.training.state import TrainState, freeze_params, make_optimizer, make_schedule

__all__ = ["train_and_evaluate", "warn_schedule", "MAX_SCRATCH_LR"]

#: The highest peak learning rate :func:`warn_schedule` lets pass silently. A smoke run of the transformer reader
#: with the warmup cut to a tenth of its steps peaks at 1.1e-2 on the Noam schedule and learns nothing; the synthetic
#: quick start peaks at 8.8e-3 and learns; DrQA's Adamax and QANet's Adam use 2e-3 and 1e-3.
MAX_SCRATCH_LR = 1e-2


def warn_schedule(cfg) -> str | None:
    """Logs (and returns) a WARNING when ``train``'s schedule peaks above :data:`MAX_SCRATCH_LR` or its warmup
    outlasts the run, with the rate reached and the flags that fix it; None otherwise.

    The Noam schedule peaks at ``lr_scale * d_model^-0.5 * warmup^-0.5``, so a smoke run that shortens the
    warmup to a tenth of its steps raises the peak (500 steps, warmup 50, d_model 64: 1.8e-2).
    """
    t = cfg.train
    if t.get("schedule") not in ("noam", "m4c", "warmup_constant"):
        return None
    d = int(cfg.model.get("d_model", 128))
    schedule = make_schedule(t, d)
    warm, steps = int(t.get("warmup_steps", 0) or 0), int(t.num_train_steps)
    peak = float(schedule(max(warm, 1) - 1))
    msg = None
    if warm > steps:
        msg = (f"train.warmup_steps={warm} > train.num_train_steps={steps}: the run ends in warmup at a learning rate "
               f"of {float(schedule(steps - 1)):.2e} (the peak {peak:.2e} is at step {warm})")
    elif peak > MAX_SCRATCH_LR:
        msg = f"the {t.schedule} schedule peaks at a learning rate of {peak:.2e} at step {warm}"
        if t.schedule == "noam":
            scale = float(t.lr_scale) * MAX_SCRATCH_LR / peak
            msg += (f" (lr_scale * d_model^-0.5 * warmup^-0.5), above {MAX_SCRATCH_LR:.0e}, where a reader trained "
                    f"from scratch learns nothing (a short warmup raises the Noam peak); keep the peak at "
                    f"{MAX_SCRATCH_LR:.0e} with --config.train.lr_scale={scale:.3g}, or use "
                    f"--config.train.schedule=warmup_constant --config.train.learning_rate=1e-3")
        else:
            msg += f", above {MAX_SCRATCH_LR:.0e}, where a reader trained from scratch learns nothing"
    if msg:
        logging.warning("%s", msg)
    return msg


def train_and_evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """Trains the reader in ``workdir`` (resuming from its latest checkpoint), evaluates dev every
    ``train.eval_every_steps``, then scores dev and test with the best checkpoint; returns ``{split: metrics}``.

    Raises:
      ConfigError: see :func:`openvivqa_jax.reading.config.check_reading_config`;
      DatasetError, DatasetInputError: the data;
      CheckpointMismatchError: the workdir's checkpoint was made with other model sizes.
    """
    workdir = os.path.abspath(os.path.expanduser(workdir))
    os.makedirs(workdir, exist_ok=True)
    warn_schedule(cfg)
    builder, tokenizer, train_records = setup(cfg, workdir)
    train_records = vectors_trained_here(cfg, workdir, builder, train_records)
    windows = _train_windows(cfg, builder, tokenizer, train_records)
    dev_records = read_split(builder, cfg.data.eval_split) if cfg.data.eval_split in builder.info.splits else None

    model = build_reader(cfg.model, tokenizer.vocab_size, seed=cfg.seed, num_chars=getattr(tokenizer, "num_chars", 0))
    if hasattr(model.encoder, "load_pretrained"):  # a resumed run restores these weights from its checkpoint
        logging.info("%s", model.encoder.load_pretrained())
    initialize_word_vectors(model, cfg.model, tokenizer)
    graphdef, params = nnx.split(model, nnx.Param)
    del model
    t = cfg.train
    tx, schedule = make_optimizer(t, cfg.model.d_model)
    if (cfg.model.get("fasttext") or {}).get("freeze") and (cfg.model.get("fasttext") or {}).get("path"):
        tx = freeze_params(tx, params, WORD_EMBEDDING)
    state = TrainState(jnp.int32(0), params, tx.init(params))
    num_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))
    logging.info("Span reader: %d parameters, %d train windows of %d pieces", num_params, len(windows),
                 cfg.model.max_seq_len)
    latest, best = checkpoints.checkpoint_managers(workdir, keep=t.keep_checkpoints,
                                                   latest_items=("state", "data_iter"))
    stream = WindowStream(windows.lengths(), int(t.batch_size), int(cfg.seed),
                          bucket_width=int(t.get("bucket_width", 0) or 0), max_len=int(cfg.model.max_seq_len))
    state, start, best_score = _resume(workdir, latest, state, stream)
    outputs.write_text(os.path.join(workdir, "config.json"), cfg.to_json_best_effort(indent=2))
    writer = tensorboard_writer.create_writer(workdir)
    train_step = _make_train_step(graphdef, tx, schedule, int(cfg.seed))

    def save(step: int) -> None:
        checkpoints.save_step(latest, step, ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data_iter=ocp.args.JsonSave({"iterator": stream.get_state(), "best_score": float(best_score)})))

    acc = MeanAccumulator()
    timer = IntervalTimer()
    step, last_dev = start, None
    with interrupts.StopSignals(workdir) as signals:
        for step in range(start + 1, t.num_train_steps + 1):
            with timer.waiting():
                batch = windows.batch(*stream.next())
            state, m = train_step(state, batch)
            acc.add(m)
            if step % t.log_every_steps == 0 or step == t.num_train_steps:
                _log_train_means(cfg, workdir, writer, step, acc, timer)
            elif step == start + 1:
                timer.first_step_done(step)
            if dev_records is not None and t.eval_every_steps and (
                    step % t.eval_every_steps == 0 or step == t.num_train_steps):
                with timer.excluded():
                    score, last_dev = _eval_dev(cfg, workdir, writer, graphdef, state.params, tokenizer,
                                                dev_records, step)
                    checkpoints.save_step(best, step, ocp.args.Composite(state=ocp.args.StandardSave(state)),
                                          {"score": score})
                best_score = max(best_score, score)
            if step % t.checkpoint_every_steps == 0 or step == t.num_train_steps:
                with timer.excluded():
                    save(step)
            if signals.requested:
                checkpoints.stop_with_checkpoint(signals.requested, step, save, latest, best)
    latest.wait_until_finished()
    best.wait_until_finished()
    writer.flush()
    writer.close()
    return evals.final_evaluation(cfg, workdir, builder, tokenizer, graphdef, evals.one_device_abstract(state.params),
                                  fallback=(state.params, int(jax.device_get(state.step))), scored=last_dev)


def _train_windows(cfg, builder, tokenizer: Tokenizer, train_records):
    """The training windows of the train split (``train_records``, read here when None), their counts logged.

    Raises:
      DatasetError: no question has its first answer inside a window.
    """
    if train_records is None:
        train_records = read_split(builder, cfg.data.train_split)
    train_windows = reader_windows(cfg, tokenizer, train_records, train=True)
    logging.info("train windows: %s", train_windows.counts)
    if len(train_windows) == 0:
        raise DatasetError(f"{builder.name}/{cfg.data.train_split}: no question has its first answer inside a "
                           f"window of model.max_seq_len={cfg.model.max_seq_len} pieces ({train_windows.counts})")
    return train_windows


def _resume(workdir: str, latest: ocp.CheckpointManager, state: TrainState, stream: WindowStream):
    """``(state, start_step, best_score)`` from the latest checkpoint of ``latest``, with ``stream`` moved to
    where that checkpoint's was; ``(state, 0, -inf)`` when there is none.

    Raises:
      CheckpointMismatchError: the checkpoint was made with other model sizes.
    """
    if latest.latest_step() is None:
        return state, 0, -np.inf
    step = latest.latest_step()
    checkpoints.check_checkpoint_fits(os.path.join(str(latest.directory), str(step), "state"), state.params,
                                    os.path.join(workdir, "config.json"))
    restored = latest.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(evals.one_device_abstract(state)), data_iter=ocp.args.JsonRestore()))
    stream.set_state(restored["data_iter"]["iterator"])
    start = int(step)
    logging.info("Resumed from step %d (%s)", start, latest.directory)
    return restored["state"], start, restored["data_iter"].get("best_score", -np.inf)


def _make_train_step(graphdef, tx: optax.GradientTransformation, schedule: optax.Schedule, seed: int):
    """The jitted training step ``(state, batch) -> (state, metrics)``; dropout keys are
    ``fold_in(key(seed), step)``, so a resumed run computes what the uninterrupted one would."""

    @jax.jit
    def train_step(state: TrainState, batch):
        key = jax.random.fold_in(jax.random.key(seed), state.step)

        def loss_fn(p):
            model = nnx.merge(graphdef, p)
            s, e = model(batch, deterministic=False, rngs=nnx.Rngs(dropout=key))
            return span_loss(s, e, batch["start_positions"], batch["end_positions"])

        (_, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        m = dict(m, grad_norm=optax.tree.norm(grads), learning_rate=schedule(state.step))
        return TrainState(state.step + 1, params, opt_state), m

    return train_step


def _log_train_means(cfg, workdir: str, writer, step: int, acc: MeanAccumulator, timer: IntervalTimer) -> None:
    """Writes the training means accumulated since the last log, the training steps per second and the input
    wait (:class:`~openvivqa_jax.training.run_log.IntervalTimer`) to TensorBoard, ``metrics.jsonl`` and one log
    line. The means are fetched first, which waits for the interval's steps to finish, so the rate and the time
    left count finished steps (evaluations and checkpoint saves excluded)."""
    t = cfg.train
    vals = acc.pop_means()
    speed = timer.pop()
    speed["cpu_minutes"] = process_cpu_minutes()
    writer.write_scalars(step, {**{f"train/{k}": v for k, v in vals.items()}, **speed})
    write_jsonl(workdir, step, "train", {**vals, **speed})
    left = (t.num_train_steps - step) / max(speed["steps_per_sec"], 1e-9)
    logging.info("step %d/%d loss %.4f start acc %.3f end acc %.3f lr %.2e (%.2f steps/s, input wait %.0f%%, "
                 "%s left; CPU %.1f min)", step, t.num_train_steps, vals["loss"], vals["start_accuracy"],
                 vals["end_accuracy"], vals["learning_rate"], speed["steps_per_sec"], 100 * speed["input_wait"],
                 format_duration(left), speed["cpu_minutes"])


def _eval_dev(cfg, workdir: str, writer, graphdef, params, tokenizer: Tokenizer, dev_records,
              step: int) -> tuple[float, tuple]:
    """Scores the dev split with ``params`` (``eval/`` files, TensorBoard, ``metrics.jsonl``, one log line);
    returns its ``train.best_metric`` (0 when missing) and ``(step, metrics, predictions)``, which the final
    evaluation reuses when the best checkpoint is this step."""
    metrics, preds = evals.evaluate_split(cfg, workdir, graphdef, params, tokenizer, dev_records, cfg.data.eval_split,
                                      step)
    overall = {k: v for k, v in metrics["overall"].items() if v is not None}
    writer.write_scalars(step, {f"dev/{k}": v for k, v in overall.items()})
    write_jsonl(workdir, step, "eval", {**{f"dev/{k}": v for k, v in overall.items()},
                                        "cpu_minutes": process_cpu_minutes()})
    logging.info("step %d dev: %s", step, {k: round(v, 4) for k, v in overall.items()})
    return float(overall.get(cfg.train.best_metric, 0.0)), (step, metrics, preds)
