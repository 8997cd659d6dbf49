"""The answer generators' train loop, ``train_and_evaluate`` (docs/design.md §8): jitted steps over the mesh,
checkpoints and resuming. The periodic dev scores and the evaluations after training are
:mod:`openvivqa_jax.vqa.evals`, which the loop calls down into.

The workdir holds everything needed to resume or to predict::

    config.json            the resolved config (written before the run's first file; a resume must keep the
                           settings its files fix: openvivqa_jax/vqa/run_settings.py)
    spm.model              the SentencePiece model (trained on the train split only)
    languages.json         the train split's question languages (predict warns of others)
    checkpoints/<step>/    orbax: train state + grain iterator state (latest ``keep_checkpoints``)
    best/<step>/           orbax: the best train state by the dev metric
    events.out.tfevents.*  TensorBoard scalars (train/*, dev/*, and the final test/*)
    metrics.jsonl          one JSON object per logged step / evaluation
    eval/<role>_metrics.json, eval/<role>_predictions.json   role: dev, test, test_no_ocr

A run killed at any point and restarted with the same command resumes from the last checkpoint with
the data iterator where it was; per-step dropout keys are ``fold_in(seed, step)``, so the resumed run
computes exactly what the uninterrupted run would have.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
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
from openvivqa_jax.data import model_ready, pipeline
from openvivqa_jax.evaluation import grouping
from openvivqa_jax.models.base import pointer_bce_loss, pointer_softmax_loss
from openvivqa_jax.models.counting import COUNTING_FIELDS, counter_weight
from openvivqa_jax.models.verifying import verifier_enabled
from openvivqa_jax.vqa import run_settings
from openvivqa_jax.training import checkpoints, interrupts, sharding, tensorboard_writer
from openvivqa_jax.training.run_log import (IntervalTimer, MeanAccumulator, format_duration, peak_device_memory_mib,
                                           process_cpu_minutes)
from openvivqa_jax.training.state import TrainState, make_schedule
from openvivqa_jax.vqa import counting_stream, decoding, evals, run_length, verifier_start
from openvivqa_jax.vqa.config import parse_kind_weights
from openvivqa_jax.vqa.experiment import Experiment, StateSpec, create_experiment

__all__ = ["make_loss_fn", "add_auxiliary_losses", "forward_with_intermediates", "make_train_step",
           "checkpoint_managers", "train_and_evaluate", "finished_step", "warn_cut_inputs", "warn_warmup"]


def make_loss_fn(spec: StateSpec):
    """``loss_fn(params, batch, key, deterministic=False) -> (loss, metrics)``: the mean loss of ``batch``
    (classifiers: the model's own loss; generators: ``train.loss`` softmax / softmax_prefer_copy / bce over
    ``V + N``, :mod:`openvivqa_jax.models.base`), pure in ``params``; dropout masks from ``key``.

    Raises (when traced):
      ValueError: an unknown ``train.loss``.
    """
    cfg, graphdef, is_generator = spec.cfg, spec.graphdef, spec.is_generator

    def loss_fn(params, batch, key, deterministic: bool = False):
        model = nnx.merge(graphdef, params)
        logits, sown = forward_with_intermediates(model, batch, deterministic=deterministic,
                                                  rngs=nnx.Rngs(dropout=key))
        if not is_generator:
            return model.loss(logits, batch)
        if cfg.train.loss == "bce":
            loss, m = pointer_bce_loss(logits, batch["target_vocab"], batch["target_ocr"], batch["target_mask"],
                                       batch["ocr_mask"])
        elif cfg.train.loss in ("softmax", "softmax_prefer_copy"):
            loss, m = pointer_softmax_loss(logits, batch["target_vocab"], batch["target_ocr"], batch["target_mask"],
                                           prefer_copy=cfg.train.loss == "softmax_prefer_copy")
        else:
            raise ValueError(f"unknown train.loss {cfg.train.loss!r}; expected softmax, softmax_prefer_copy, bce")
        return add_auxiliary_losses(sown, loss, m)

    return loss_fn


def forward_with_intermediates(model, batch, **kw):
    """``(model(batch, **kw), sown)``: the forward pass and the ``nnx.Intermediate`` values the model sowed in it
    (``nnx.capture``; on a Flax without it, popped from the model afterwards)."""
    capture = getattr(nnx, "capture", None)
    if capture is not None:
        return capture(model, nnx.Intermediate)(batch, **kw)
    out = model(batch, **kw)
    return out, nnx.pop(model, nnx.Intermediate)


#: Values a model sows that are metrics, not losses: logged, never added to the loss.
SOWN_METRICS = frozenset({"word_region_words_cut", "counting_exact"})


def add_auxiliary_losses(sown, loss, metrics: dict):
    """Adds the auxiliary losses a model sowed in its training forward pass (``sown``: the ``nnx.Intermediate``
    state, e.g. MLPAG's ``word_region_loss``, already weighted) to ``loss``; each is also a metric under its
    own name, ``loss`` becomes the sum and the answer loss alone is ``answer_loss``. The names in
    :data:`SOWN_METRICS` only become metrics. Returns ``(loss, metrics)``; with nothing sown they are returned
    unchanged."""
    extra, only_metrics = {}, {}
    for path, value in nnx.to_flat_state(sown):
        v = value.get_value() if hasattr(value, "get_value") else value.value
        v = v[0] if isinstance(v, tuple) else v
        name = str(path[-1])
        (only_metrics if name in SOWN_METRICS else extra)[name] = jnp.asarray(v, jnp.float32)
    if not extra:
        return loss, dict(metrics, **only_metrics)
    total = loss + sum(extra.values())
    metrics = dict(metrics, answer_loss=loss, **extra, **only_metrics)
    metrics["loss"] = total
    return total, metrics


def make_train_step(spec: StateSpec):
    """The jitted ``(state, batch) -> (state, metrics)``: in/out shardings of ``spec``, the state donated.

    Metrics are the loss function's plus ``grad_norm`` and ``learning_rate``. Dropout masks come from
    ``fold_in(key(seed, impl=train.dropout_prng), step)``, so a resumed run draws what the uninterrupted
    run would have.

    Raises:
      ValueError: for an unknown ``train.dropout_prng``.
    """
    cfg, tx, schedule = spec.cfg, spec.tx, spec.schedule
    seed = cfg.seed
    impl = cfg.train.get("dropout_prng") or "threefry2x32"
    if impl not in ("threefry2x32", "rbg", "unsafe_rbg"):
        raise ValueError(f"train.dropout_prng must be 'threefry2x32', 'rbg' or 'unsafe_rbg', got {impl!r}")
    loss_fn = make_loss_fn(spec)
    # With grad_accum_steps = K the schedule advances once per K micro-steps (optax.MultiSteps).
    k = max(1, int(cfg.train.get("grad_accum_steps", 1)))

    def step(state: TrainState, batch):
        key = jax.random.fold_in(jax.random.key(seed, impl=impl), state.step)
        (loss, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch, key)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        m = dict(m, grad_norm=optax.tree.norm(grads), learning_rate=schedule(state.step // k))
        return TrainState(state.step + 1, params, opt_state), m

    return jax.jit(step, in_shardings=(spec.state_sharding, spec.batch_sharding),
                   out_shardings=(spec.state_sharding, None), donate_argnums=(0,))


def _set_aside(manager: ocp.CheckpointManager, step: int) -> str:
    """Moves a checkpoint step that does not restore to ``<step>.corrupt`` beside it (kept for inspection, not
    deleted), so that resumed training can save that step again; returns the phrase for the warning."""
    src = os.path.join(str(manager.directory), str(step))
    if jax.process_index() != 0 or not os.path.isdir(src):
        return ""
    dst = f"{src}.corrupt"
    n = 1
    while os.path.exists(dst):
        n += 1
        dst = f"{src}.corrupt{n}"
    os.rename(src, dst)
    return f" as {dst}"


def checkpoint_managers(workdir: str, tcfg) -> tuple[ocp.CheckpointManager, ocp.CheckpointManager]:
    """``(latest, best)`` orbax CheckpointManagers of ``<workdir>/checkpoints`` (items ``state`` and
    ``data_iter``, the last ``tcfg.keep_checkpoints``) and ``<workdir>/best`` (item ``state``, the one with the
    highest ``score``)."""
    return checkpoints.checkpoint_managers(workdir, keep=tcfg.keep_checkpoints,
                                           latest_items=("state", "data_iter"))


def train_and_evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """Trains ``cfg`` in ``workdir`` (resuming if checkpoints exist), evaluates dev periodically and the
    test split at the end; returns ``{role: metrics}`` (:func:`openvivqa_jax.vqa.evals.final_evaluation`).

    A run that has finished (:func:`finished_step`) is not evaluated again: one line says so and how to
    re-score it (``--mode evaluate``); nothing is appended to ``metrics.jsonl`` and no TensorBoard file is
    written. ``train.num_train_steps = 0`` is then set from the data (:mod:`openvivqa_jax.vqa.run_length`).
    Smoke-run settings that train nothing (warm-up past the last step, :func:`warn_warmup`) and inputs
    mostly cut (:func:`warn_cut_inputs`) are WARNING lines. A setting the run's files fix that differs from its
    ``config.json`` raises ``CheckpointMismatchError`` first (:func:`run_settings.check_settings`; a finished run too).
    """
    run_settings.check_settings(cfg, os.path.abspath(os.path.expanduser(workdir)))
    run_length.resolve_train_steps(cfg, lambda: _num_train_questions(cfg))
    finished = finished_step(workdir, cfg.train.num_train_steps)
    if finished is not None:
        _report_finished(workdir, finished)
        return {}
    warn_warmup(cfg)
    exp, state = create_experiment(cfg, workdir)
    spec, t = exp.spec, cfg.train
    logging.info("Model %s: %d parameters; mesh %s", cfg.model.name, spec.num_params, dict(spec.mesh.shape))
    # TensorBoard events with scalar values (not tensor summaries); process 0 only.
    writer = tensorboard_writer.create_writer(exp.workdir, just_logging=jax.process_index() > 0)
    latest, best = checkpoint_managers(exp.workdir, t)
    it, train_pre, draws = _train_inputs(exp)
    state, start, best_score, bad_evals = _resume(exp, latest, state, it)
    if start == 0:  # a resumed run has them from its checkpoint
        state = _set_statistics(state, draws, exp.inputs.tokenizer)
    # Written once the checkpoint (if any) is known to fit, so a resume with other model settings keeps the
    # run's own config.json.
    if jax.process_index() == 0:
        outputs.write_text(os.path.join(exp.workdir, "config.json"), cfg.to_json_best_effort(indent=2))
    step_fn = make_train_step(spec)
    hooks = _profile_hooks(exp)

    def save(step: int) -> None:
        checkpoints.save_step(latest, step, ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data_iter=ocp.args.JsonSave({"iterator": it.get_state(), "best_score": float(best_score),
                                         "bad_evals": int(bad_evals)})))

    acc = MeanAccumulator()
    timer = IntervalTimer()
    step = start
    stopped_early = False
    # Ctrl-C / SIGTERM: finish the step, save it, stop with one line (openvivqa_jax.training.interrupts). With several
    # processes SIGTERM is JAX's preemption notice and orbax says at which step all processes save.
    signals = interrupts.StopSignals(exp.workdir) if jax.process_count() == 1 else contextlib.nullcontext()
    with signals:
        for step in range(start + 1, t.num_train_steps + 1):
            with timer.waiting():
                batch = pipeline.to_global(next(it), spec.batch_sharding)
            with sharding.mesh_context(spec.mesh):
                state, m = step_fn(state, batch)
            for h in hooks:
                h(step)
            acc.add(m)
            _log_progress(exp, writer, step, start, acc, timer)
            if t.eval_every_steps and (step % t.eval_every_steps == 0 or step == t.num_train_steps):
                with timer.excluded():
                    score = _eval_dev(exp, state, step, writer)
                    best_score, bad_evals, stopped_early = _record_dev_score(exp, best, state, step, score,
                                                                             best_score, bad_evals)
            if step % t.checkpoint_every_steps == 0 or step == t.num_train_steps or stopped_early:
                with timer.excluded():
                    save(step)
            if stopped_early:
                break
            signal_name = signals.requested if jax.process_count() == 1 else (
                "SIGTERM" if latest.reached_preemption(step) else None)
            if signal_name:
                checkpoints.stop_with_checkpoint(signal_name, step, save, latest, best)
    latest.wait_until_finished()
    best.wait_until_finished()
    _log_input_counts(exp, train_pre, step)
    results = evals.final_evaluation(exp, step, state, writer=writer)
    writer.flush()
    writer.close()
    return results


def _num_train_questions(cfg) -> int:
    """The number of questions of ``data.train_split`` (the dataset is built first if it is not)."""
    from openvivqa_jax.data import datasets

    return int(datasets.load_builder(cfg.data).info.splits[cfg.data.train_split].num_examples)


def _report_finished(workdir: str, finished: int) -> None:
    """Says (on stdout from process 0, in the log of the others) that the run in ``workdir`` finished at step
    ``finished``, and how to score it again or train it longer."""
    message = (f"{workdir}: this run finished at step {finished} and its final scores are in metrics.jsonl "
               f"and eval/; nothing to do. To score it again: --mode evaluate; to train longer: "
               f"--config.train.num_train_steps=<more than {finished}>")
    if jax.process_index() == 0:
        print(message, flush=True)
    else:
        logging.info(message)


def _train_subset(exp: Experiment, train_name: str) -> list[int] | None:
    """The indices of the training questions an epoch draws from: those of the kinds in ``data.train_kinds``,
    drawn per ``data.train_kind_weights`` (each logged in one line); None: all questions, each once."""
    cfg = exp.cfg
    subset = None
    weights = parse_kind_weights(cfg.data.get("train_kind_weights", ""))
    if cfg.data.get("train_kinds") or weights:
        recs = exp.data.records(cfg.data.train_split)
    if cfg.data.get("train_kinds"):
        subset = pipeline.kind_subset(recs, tuple(cfg.data.train_kinds), train_name)
        logging.info("data.train_kinds %s: training on %d of the %d questions of %s (%d left out)",
                     list(cfg.data.train_kinds), len(subset), len(recs), train_name, len(recs) - len(subset))
        kept = set(subset)
        recs = [r for r in recs if r.index in kept]
    if weights:
        subset = pipeline.kind_weighted_indices(recs, weights, train_name)
        kind_of = {r.index: r.kind for r in recs}
        share = collections.Counter(kind_of[i] for i in subset)
        logging.info("data.train_kind_weights %s: an epoch is %d questions of %s (%d unweighted); share per kind: %s",
                     weights, len(subset), train_name, len(recs),
                     ", ".join(f"{k} {100 * v / len(subset):.1f}%" for k, v in share.most_common()))
    return subset


def _train_inputs(exp: Experiment):
    """``(iterator, train_pre, draws)``: the training batches of this process (from the model-ready
    records when the workdir has them, else encoded per example), the preprocessor that encodes them, with
    counters of its own so that the truncation rates logged at the end are the training batches' (evaluation
    encodes other splits), and functions drawing batches for input statistics: ``draws["counter"]``, with
    ``model.counter`` and a split that has counting questions, batches of them for the counter's (the counter's
    stream, :mod:`openvivqa_jax.vqa.counting_stream`, is then part of the iterator), and
    ``draws["verifier"]``, with ``model.verifier``, training batches for the region verifier's."""
    cfg = exp.cfg
    local_batch = cfg.train.batch_size // jax.process_count()
    train_src = exp.data.source(cfg.data.train_split)
    train_pre = copy.copy(exp.inputs.pre)
    train_pre.counter = pipeline.SkipCounter()
    train_name = f"{exp.data.builder.name}/{cfg.data.train_split}"
    subset = _train_subset(exp, train_name)
    ready = exp.data.model_ready(cfg.data.train_split, train_pre, exp.workdir)
    if ready is not None:  # the same batches and iterator state, gathered from the one-time records
        it = model_ready.train_iterator(ready, batch_size=local_batch, seed=cfg.seed, source_name=train_name,
                                        num_threads=cfg.data.num_threads, prefetch=cfg.data.prefetch, indices=subset)
    else:
        it = pipeline.train_iterator(train_src, train_pre, batch_size=local_batch, seed=cfg.seed,
                                     source_name=train_name, num_threads=cfg.data.num_threads,
                                     prefetch=cfg.data.prefetch, indices=subset)
    draws = {}
    if verifier_enabled(cfg.model):  # a draw of its own for the statistics, as the counter's below
        def plain(seed: int):
            if ready is not None:
                return model_ready.train_iterator(ready, batch_size=local_batch, seed=seed, source_name=train_name,
                                                  num_threads=cfg.data.num_threads, prefetch=cfg.data.prefetch)
            return pipeline.train_iterator(train_src, train_pre, batch_size=local_batch, seed=seed,
                                           source_name=train_name, num_threads=cfg.data.num_threads,
                                           prefetch=cfg.data.prefetch)
        draws["verifier"] = counting_stream.first_use_draw(lambda: plain(cfg.seed + 3))
    if not counter_weight(cfg.model) > 0:
        return it, train_pre, draws
    counter = cfg.model.counter
    counting = counting_stream.counting_indices(exp.data.records(cfg.data.train_split), train_name)
    if not counting:
        return it, train_pre, draws
    size = int(counter.batch_size) // jax.process_count()
    if len(counting) < int(counter.batch_size):  # a small set: the stream repeats them to fill one batch
        logging.info("Region counter: its %d counting questions, fewer than model.counter.batch_size=%d, are "
                     "each repeated %d times per epoch of the stream", len(counting), int(counter.batch_size),
                     -(-int(counter.batch_size) // len(counting)))
        counting = counting * -(-int(counter.batch_size) // len(counting))

    def stream(seed: int):
        if ready is not None:
            return model_ready.train_iterator(ready, batch_size=size, seed=seed, source_name=train_name,
                                              num_threads=cfg.data.num_threads, prefetch=cfg.data.prefetch,
                                              indices=counting, fields=COUNTING_FIELDS)
        return pipeline.train_iterator(train_src, train_pre, batch_size=size, seed=seed, source_name=train_name,
                                       num_threads=cfg.data.num_threads, prefetch=cfg.data.prefetch,
                                       indices=counting)

    # its own draw, made on first use: the statistics leave the training stream as it is
    draws["counter"] = counting_stream.first_use_draw(lambda: stream(cfg.seed + 2))
    return counting_stream.WithCountingStream(it, stream(cfg.seed + 1)), train_pre, draws


def _set_statistics(state: TrainState, draws: dict, tokenizer) -> TrainState:
    """``state`` with what the region counter and the region verifier take from the data before the first step
    (:func:`_set_counter_statistics`, :func:`openvivqa_jax.vqa.verifier_start.set_verifier_inputs`), for those
    of :func:`_train_inputs`' ``draws``."""
    if "counter" in draws:
        state = _set_counter_statistics(state, draws["counter"])
    if "verifier" in draws:
        state = verifier_start.set_verifier_inputs(state, draws["verifier"], tokenizer)
    return state


def _set_counter_statistics(state: TrainState, batches) -> TrainState:
    """``state`` with the region counter's input statistics (``counter/input_mean``, ``counter/input_std``,
    which the optimizer leaves as set) computed from 8 batches of counting questions (``batches()``), in each
    parameter's sharding; one log line."""
    params = state.params
    mean, std, n = counting_stream.input_statistics(batches, 8,
                                                    read_features=counting_stream.read_features(params["counter"]))
    for name, value in (("input_mean", mean), ("input_std", std)):
        var = params["counter"][name]
        var[...] = jax.device_put(value, var[...].sharding)
    logging.info("Region counter: input statistics from %d regions of 8 batches of counting questions", n)
    return state.replace(params=params)


def _resume(exp: Experiment, latest: ocp.CheckpointManager, state: TrainState, it):
    """``(state, start_step, best_score, bad_evals)`` from the newest checkpoint of ``latest`` that restores
    (those that do not are set aside, :func:`_set_aside`), with ``it`` moved to where that checkpoint's
    iterator was; ``(state, 0, -inf, 0)`` when there is none."""
    spec = exp.spec
    if latest.latest_step() is None:
        logging.info("No checkpoint in %s: training starts at step 0", latest.directory)
        return state, 0, -np.inf, 0

    def restore(step):
        checkpoints.check_checkpoint_fits(os.path.join(str(latest.directory), str(step), "state"),
                                        spec.abstract_state.params, os.path.join(exp.workdir, "config.json"))
        return latest.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(spec.abstract_state), data_iter=ocp.args.JsonRestore()))

    step, restored = checkpoints.restore_newest(str(latest.directory), sorted(latest.all_steps(), reverse=True),
                                              restore, on_bad=lambda s: _set_aside(latest, s))
    latest.reload()  # the steps set aside are no longer the manager's: later saves of those steps proceed
    it.set_state(restored["data_iter"]["iterator"])
    start = int(step)
    logging.info("Resumed from step %d (%s)", start, latest.directory)
    return (restored["state"], start, restored["data_iter"].get("best_score", -np.inf),
            restored["data_iter"].get("bad_evals", 0))


def _profile_hooks(exp: Experiment) -> list:
    """The per-step hooks: a profiler trace of 5 steps into the workdir when ``train.profile`` (process 0)."""
    hooks = []
    if jax.process_index() == 0 and exp.cfg.train.get("profile"):
        from clu import periodic_actions  # imports TensorFlow (clu.metric_writers): only when profiling

        hooks.append(periodic_actions.Profile(logdir=exp.workdir, num_profile_steps=5))
    return hooks


#: Workdirs whose run has said that questions were cut for the word-region loss (once per run).
_WORDS_CUT_WARNED: set[str] = set()


def _log_progress(exp: Experiment, writer, step: int, start: int, acc: MeanAccumulator, timer: IntervalTimer) -> None:
    """After training step ``step`` of a run that began at ``start``: the training means every
    ``train.log_every_steps`` and at the last step (:func:`_log_train_means`); after the run's first step, when it
    is not logged, one line with its time, which the first interval's steps per second leaves out."""
    t = exp.cfg.train
    if step % t.log_every_steps == 0 or step == t.num_train_steps:
        _log_train_means(exp, writer, step, acc, timer)
    elif step == start + 1:
        timer.first_step_done(step)


def _log_train_means(exp: Experiment, writer, step: int, acc: MeanAccumulator, timer: IntervalTimer) -> None:
    """Writes the training means accumulated since the last log, the training steps per second, the input wait
    (:class:`~openvivqa_jax.training.run_log.IntervalTimer`), the process's CPU minutes and, on accelerators, the
    peak device memory to TensorBoard, ``metrics.jsonl`` and one log line, which also gives the time left to the
    last step at this rate."""
    t = exp.cfg.train
    vals = acc.pop_means()
    speed = timer.pop()
    if vals.get("word_region_words_cut", 0.0) > 0 and exp.workdir not in _WORDS_CUT_WARNED:
        _WORDS_CUT_WARNED.add(exp.workdir)
        logging.warning("%.1f%% of the training questions at step %d have tokens past "
                        "model.word_region_loss.max_words=%d, which the word-region loss leaves out (the answer "
                        "loss sees them); raise it to match them all", 100 * vals["word_region_words_cut"], step,
                        exp.cfg.model.word_region_loss.max_words)
    memory = peak_device_memory_mib()
    if memory is not None:
        speed["peak_device_memory_mib"] = memory
    speed["cpu_minutes"] = process_cpu_minutes()
    writer.write_scalars(step, {**{f"train/{k}": v for k, v in vals.items()}, **speed})
    exp.jsonl.write(step, "train", {**vals, **speed})
    # The time left is the steps left at this interval's rate (evaluations and checkpoint saves not counted).
    left = (t.num_train_steps - step) / max(speed["steps_per_sec"], 1e-9)
    logging.info("step %d/%d loss %.4f acc %.3f lr %.2e (%.1f steps/s, input wait %.0f%%, %s left; CPU %.1f min%s)",
                 step, t.num_train_steps, vals["loss"], vals.get("token_accuracy", vals.get("accuracy", float("nan"))),
                 vals["learning_rate"], speed["steps_per_sec"], 100 * speed["input_wait"], format_duration(left),
                 speed["cpu_minutes"], "" if memory is None else f", peak device memory {memory:.0f} MiB")


def _eval_dev(exp: Experiment, state: TrainState, step: int, writer) -> float:
    """Scores the dev split with ``state``'s parameters (writes ``eval/dev_*``, TensorBoard, ``metrics.jsonl``
    and one log line); returns the ``train.best_metric`` score (0 when missing)."""
    cfg = exp.cfg
    # eval.select_decoding: how the periodic dev scores that choose the best checkpoint are decoded
    # ("" = eval.decoding); the final dev and test scores always use eval.decoding.
    settings = decoding.DecodeSettings.from_config(cfg, exp.spec.is_generator,
                                                   method=cfg.eval.get("select_decoding") or None)
    metrics, _ = evals.evaluate_split(exp, state.params, int(jax.device_get(state.step)), cfg.data.eval_split,
                                      write=True, tag="dev", settings=settings)
    overall = metrics["overall"]
    # Exact match per question kind / QA type as curves of their own: a corpus score hides a kind that is
    # learned late (or never) behind the kinds learned early.
    per_field = grouping.field_scalars(metrics.get("by_field") or {}, "dev")
    scalars = {**{f"dev/{k}": v for k, v in overall.items() if v is not None}, **per_field}
    writer.write_scalars(step, scalars)
    exp.jsonl.write(step, "eval", scalars)
    logging.info("step %d dev: %s", step, {k: round(v, 4) for k, v in overall.items() if v is not None})
    for field, by_value in (metrics.get("by_field") or {}).items():
        logging.info("step %d dev exact match by %s: %s", step, field,
                     ", ".join(f"{value} {r['exact_match']:.1%}" for value, r in by_value.items()))
    return float(overall.get(cfg.train.best_metric) or 0.0)


def _record_dev_score(exp: Experiment, best: ocp.CheckpointManager, state: TrainState, step: int, score: float,
                      best_score: float, bad_evals: int) -> tuple[float, int, bool]:
    """Saves ``state`` to ``best`` with its dev ``score`` and counts evaluations without improvement; returns
    ``(best_score, bad_evals, stop)``, ``stop`` True (with a log line) when ``train.patience`` of them ran out."""
    t = exp.cfg.train
    checkpoints.save_step(best, step, ocp.args.Composite(state=ocp.args.StandardSave(state)), {"score": score})
    if score > best_score:
        best_score, bad_evals = score, 0
    else:
        bad_evals += 1
    stop = False
    if t.patience and bad_evals >= t.patience:
        logging.info("Early stop at step %d: no dev %s improvement in %d evaluations", step, t.best_metric,
                     bad_evals)
        stop = True
    return best_score, bad_evals, stop


def _log_input_counts(exp: Experiment, train_pre, step: int) -> None:
    """Logs the training and evaluation inputs truncated or skipped, the training truncation rates (also to
    ``metrics.jsonl`` at ``step``), and a WARNING for each rate too high (:func:`warn_cut_inputs`)."""
    cfg = exp.cfg
    train_pre.counter.log("Training input counts (truncated/skipped)")
    exp.inputs.counter.log("Evaluation input counts (truncated/skipped)")
    rates = train_pre.counter.truncation_rates()
    if rates:
        m = cfg.model
        logging.info("Training inputs cut: %s of questions at model.max_question_len=%d, %s of answers at "
                     "model.max_answer_len=%d", _pct(rates.get("question_truncation_rate")), m.max_question_len,
                     _pct(rates.get("answer_truncation_rate")), m.max_answer_len)
        exp.jsonl.write(step, "train_inputs", {f"train/{k}": v for k, v in rates.items()})
    beyond = train_pre.counter.counts.get("proposal_segments_beyond_num_regions", 0)
    if beyond:
        # Large by design: a picture has more segments than slots, and its smallest are mostly strokes of its
        # text and specks, whose words the OCR tokens carry.
        logging.info("Region proposals: %d segments beyond model.vision.num_regions=%d were left out of the "
                     "training pictures, each picture's smallest (openvivqa_jax/data/proposals.py)", beyond,
                     int(cfg.model.vision.num_regions))
    warn_cut_inputs("training", rates, cfg.model)
    warn_cut_inputs("evaluation", exp.inputs.counter.truncation_rates(), cfg.model)


#: Share of questions or answers cut at ``model.max_question_len`` / ``max_answer_len`` above which the run
#: warns: the model then never sees (or is never asked for) whole inputs.
CUT_WARNING_RATE = 0.5


def warn_cut_inputs(what: str, rates: dict, model_cfg) -> None:
    """Logs a WARNING for each truncation rate of :meth:`~openvivqa_jax.data.pipeline.SkipCounter.truncation_rates`
    above :data:`CUT_WARNING_RATE` (``what``: ``training`` or ``evaluation``), naming the flag that fixes it."""
    for kind, field in (("question", "max_question_len"), ("answer", "max_answer_len")):
        rate = rates.get(f"{kind}_truncation_rate")
        if rate is not None and rate > CUT_WARNING_RATE:
            # A tokenizer trained on a few dozen sentences splits unseen words into letters or bytes, so
            # short questions are cut too; the flag is the same fix, but the cause is worth naming.
            hint = ("; a tokenizer trained on little text splits words into many short pieces "
                    "(docs/datasets.md, Tiny folders)" if kind == "question" else "")
            logging.warning("%s of the %s %ss were cut at model.%s=%d: raise --config.model.%s%s", _pct(rate), what,
                            kind, field, model_cfg.get(field), field, hint)


def warn_warmup(cfg) -> None:
    """Logs a WARNING when ``train.warmup_steps`` exceeds ``train.num_train_steps`` (a paper config's 10,000
    warm-up steps in a short smoke run): the run ends in warm-up, with a learning rate far below the
    schedule's peak, and learns next to nothing. Names the rate reached and the flag that fixes it."""
    t = cfg.train
    warm, steps = int(t.get("warmup_steps", 0) or 0), int(t.num_train_steps)
    if t.get("schedule") not in ("noam", "m4c") or warm <= steps:
        return
    schedule = make_schedule(t, cfg.model.d_model)
    last, peak = float(schedule(steps - 1)), float(schedule(warm - 1))
    logging.warning("train.warmup_steps=%d > train.num_train_steps=%d: the run ends in warm-up; its learning rate "
                    "reaches %.2e at the last step (the schedule's peak %.2e is at step %d), so it learns next to "
                    "nothing. For a short run set --config.train.warmup_steps=%d (a tenth of the steps)", warm,
                    steps, last, peak, warm, max(1, steps // 10))


def finished_step(workdir: str, num_train_steps: int) -> int | None:
    """The last step of a finished run in ``workdir``: its newest checkpoint is at ``num_train_steps`` (or
    more) and ``metrics.jsonl`` holds the ``final`` records of that step. None otherwise (a new run, one to
    resume, or one whose final evaluation did not complete)."""
    last = interrupts.last_checkpoint_step(workdir)
    if last is None or last < num_train_steps:
        return None
    try:
        with open(os.path.join(os.path.expanduser(workdir), "metrics.jsonl"), encoding="utf-8") as f:
            lines = f.readlines()
    except OSError:
        return None
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash: not a final record
        if isinstance(rec, dict) and rec.get("kind") == "final" and rec.get("step") == last:
            return last
    return None


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"
