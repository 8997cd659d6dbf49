"""The relevance task's train loop (config ``task = "relevance"``, dispatched by :data:`openvivqa_jax.main.TASKS`):
``python -m openvivqa_jax.main --config configs/relevance/w2vvpp.py --workdir runs/w2vvpp_vi``; the task is
described in :mod:`openvivqa_jax.relevance`, its evaluation is :mod:`openvivqa_jax.relevance.evals`.

Training resumes from the last checkpoint; a batch depends only on the seed and the step, so a resumed run draws
what the uninterrupted run would have. Ctrl-C / SIGTERM saves the current step first
(:mod:`openvivqa_jax.training.interrupts`).
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
from openvivqa_jax.errors import ConfigError
from openvivqa_jax.models.w2vvpp import vse_hardest_negative_loss
from openvivqa_jax.relevance import evals
from openvivqa_jax.relevance.data import encode_split, setup
from openvivqa_jax.relevance.model import build, optimizer
from openvivqa_jax.training import checkpoints, interrupts
from openvivqa_jax.training.run_log import MeanAccumulator, write_jsonl

__all__ = ["train_and_evaluate"]


def _writer(workdir: str):
    from clu import metric_writers  # heavy: imports TensorFlow

    return metric_writers.create_default_writer(workdir, just_logging=jax.process_index() > 0)


def _managers(workdir: str, keep: int):
    return checkpoints.checkpoint_managers(workdir, keep=keep, latest_items=("state",))


def train_and_evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """Trains the encoder of ``cfg`` in ``workdir`` (resuming), evaluates dev retrieval every
    ``train.eval_every_steps``, then dev and test with the best checkpoint; returns ``{split: recalls}``.

    Raises:
      ConfigError: a ``data.pair_text``, ``visual.source`` or ``visual.pool_grid`` out of range, or a missing
        ``visual.features_file`` / ``visual.vit_checkpoint``.
      FeatureFileError, RelevanceModelError, DatasetError: unusable inputs (one line).
    """
    from clu import periodic_actions  # heavy: imports TensorFlow

    workdir, data, vocab, meta = setup(cfg, workdir)
    t, mw = cfg.train, int(cfg.model.max_words)
    tr_ids, tr_img, tr_visual, tr_key = encode_split(data, vocab, cfg.data.train_split, mw, meta)
    dev = encode_split(data, vocab, cfg.data.eval_split, mw, meta)
    model = build(meta, cfg.seed)
    graphdef, params = nnx.split(model, nnx.Param)
    tx = optimizer(float(t.grad_clip_norm), float(t.learning_rate))
    state = {"step": jnp.int32(0), "params": params, "opt_state": tx.init(params)}
    latest, best = _managers(workdir, int(t.keep_checkpoints))
    state, start = _resume(latest, state)
    if jax.process_index() == 0:
        outputs.write_text(os.path.join(workdir, "config.json"), cfg.to_json_best_effort(indent=2))
    margin, seed, bsz = float(t.margin), int(cfg.seed), int(t.batch_size)
    batch_indices = _batch_sampler(len(tr_ids), bsz, seed)
    train_step = _make_train_step(graphdef, tx, margin, seed, int(t.get("sum_negatives_steps", 0)))
    run = evals.encode_fn(graphdef, int(cfg.eval.batch_size))
    ks = tuple(int(k) for k in cfg.eval.ks)
    writer = _writer(workdir)
    hooks = [periodic_actions.ReportProgress(num_train_steps=t.num_train_steps, writer=writer,
                                             every_steps=t.log_every_steps)] if jax.process_index() == 0 else []

    def save(step):
        checkpoints.save_step(latest, step, ocp.args.Composite(state=ocp.args.StandardSave(state)))

    acc = MeanAccumulator()
    step = start
    with interrupts.StopSignals(workdir) as signals:
        for step in range(start + 1, int(t.num_train_steps) + 1):
            idx = batch_indices(step - 1)
            img = tr_img[idx]
            same = (img[:, None] == img[None, :]) | (tr_key[idx][:, None] == tr_key[idx][None, :])
            state, m = train_step(state, jnp.asarray(tr_ids[idx]), jnp.asarray(tr_visual[img]), jnp.asarray(same))
            for h in hooks:
                h(step)
            acc.add(m)
            if step % t.log_every_steps == 0 or step == t.num_train_steps:
                vals = acc.pop_means()
                writer.write_scalars(step, {f"train/{k}": v for k, v in vals.items()})
                write_jsonl(workdir, step, "train", vals)
                logging.info("step %d/%d loss %.4f", step, t.num_train_steps, vals["loss"])
            if t.eval_every_steps and (step % t.eval_every_steps == 0 or step == t.num_train_steps):
                r = _eval_dev(workdir, writer, lambda x: run(state["params"], x), dev, ks, step)
                checkpoints.save_step(best, step, ocp.args.Composite(state=ocp.args.StandardSave(state)),
                                      {"score": float(r[t.best_metric])})
            if step % t.checkpoint_every_steps == 0 or step == t.num_train_steps:
                save(step)
            if signals.requested:
                checkpoints.stop_with_checkpoint(signals.requested, step, save, latest, best, warn=False)
    if latest.latest_step() != step and step > start:
        save(step)
    latest.wait_until_finished()
    best.wait_until_finished()
    writer.flush()
    return evals.final_evaluation(cfg, workdir, data, vocab, meta, _best_params(best, state), graphdef)


def _resume(latest: ocp.CheckpointManager, state: dict) -> tuple[dict, int]:
    """``(state, start_step)`` from the latest checkpoint of ``latest``; ``(state, 0)`` when there is none."""
    if latest.latest_step() is None:
        return state, 0
    step = latest.latest_step()
    restored = latest.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(jax.eval_shape(lambda: state))))
    start = int(step)
    logging.info("Resumed from step %d (%s)", start, latest.directory)
    return restored["state"], start


def _batch_sampler(n_pairs: int, bsz: int, seed: int):
    """``step -> indices (bsz,)`` of the train pairs of 0-based ``step``: a permutation of the pairs per epoch,
    drawn from ``(seed, epoch)`` alone, so a resumed run draws what the uninterrupted run would have.

    Raises:
      ConfigError: ``train.batch_size`` larger than the train split's pairs.
    """
    if bsz > n_pairs:
        raise ConfigError(f"config value train.batch_size={bsz} is out of range: the train split has only "
                          f"{n_pairs} pairs (set it with --config.train.batch_size=...)")
    per_epoch = n_pairs // bsz

    def batch_indices(step: int) -> np.ndarray:
        epoch, pos = divmod(step, per_epoch)
        perm = np.random.default_rng([seed, epoch]).permutation(n_pairs)
        return perm[pos * bsz:(pos + 1) * bsz]

    return batch_indices


def _make_train_step(graphdef, tx: optax.GradientTransformation, margin: float, seed: int, warm: int):
    """The jitted step ``(state, ids (batch, words), visual (batch, visual_dim), same (batch, batch)) ->
    (state, {loss, grad_norm})``: the ranking loss over all negatives before step ``warm``, the hardest after;
    dropout keys ``fold_in(key(seed), step)``."""

    def loss_fn(p, ids, visual, same, key, hardest):
        out = nnx.merge(graphdef, p)(ids, deterministic=False, rngs=nnx.Rngs(dropout=key))
        return vse_hardest_negative_loss(out, visual, margin, same, hardest=hardest)

    @jax.jit
    def train_step(state, ids, visual, same):
        key = jax.random.fold_in(jax.random.key(seed), state["step"])
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], ids, visual, same, key, state["step"] >= warm)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        return {"step": state["step"] + 1, "params": optax.apply_updates(state["params"], updates),
                "opt_state": opt_state}, {"loss": loss, "grad_norm": optax.tree.norm(grads)}

    return train_step


def _eval_dev(workdir: str, writer, encode_fn, dev, ks: tuple[int, ...], step: int) -> dict[str, float]:
    """Dev retrieval recalls of ``encode_fn`` (``dev``: :func:`openvivqa_jax.relevance.data.encode_split`'s
    tuple), written to TensorBoard, ``metrics.jsonl`` and one log line."""
    r = evals.retrieval(encode_fn, dev[0], dev[1], dev[2], ks)
    writer.write_scalars(step, {f"dev/{k}": v for k, v in r.items()})
    write_jsonl(workdir, step, "eval", {f"dev/{k}": v for k, v in r.items()})
    logging.info("step %d dev: %s", step, {k: round(v, 4) for k, v in r.items()})
    return r


def _best_params(best: ocp.CheckpointManager, state: dict):
    """The parameters of the best checkpoint in ``best``, else ``state``'s."""
    params = state["params"]
    if best.best_step() is not None:
        params = best.restore(best.best_step(), args=ocp.args.Composite(
            state=ocp.args.StandardRestore(jax.eval_shape(lambda: state))))["state"]["params"]
    return params
