"""``train_and_evaluate``: mesh, shardings, jitted steps, checkpoints, periodic evaluation (docs/design.md §8).

The workdir holds everything needed to resume or to predict::

    config.json            the resolved config
    spm.model              the SentencePiece model (trained on the train split only)
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
import dataclasses
import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl import logging
from flax import nnx, struct

from openvivqa_jax import (assets, checkpoints, config_check, decoding, evals, evaluation, inference, interrupts,
                           sharding, tensorboard_writer)
from openvivqa_jax.data import model_ready, pipeline
from openvivqa_jax.models import build_model, model_class
from openvivqa_jax.models.base import pointer_bce_loss, pointer_softmax_loss
from openvivqa_jax.run_log import JsonlWriter, MeanAccumulator

__all__ = ["TrainState", "make_schedule", "make_optimizer", "frozen_param_regex", "freeze_params", "StateSpec",
           "create_train_state", "make_loss_fn", "make_train_step", "DataSplits", "Experiment", "create_experiment",
           "checkpoint_managers", "predict_split", "evaluate", "print_table", "write_metrics_file",
           "train_and_evaluate", "final_evaluation"]



class TrainState(struct.PyTreeNode):
    """``step`` (int32 scalar), ``params`` (nnx.State of float32 master weights), ``opt_state``."""

    step: jax.Array
    params: Any
    opt_state: Any


def make_schedule(tcfg, d_model: int) -> optax.Schedule:
    """Learning-rate schedule.

    * ``noam`` (the OpenViVQA authors' code; Vaswani et al. 2017):
      ``lr = lr_scale * d^-0.5 * min(step^-0.5, step * warmup^-1.5)``, steps counted from 1. (The
      authors' code squared this rate; we do not.)
    * ``m4c``: linear warmup to ``learning_rate`` over ``warmup_steps`` from ``warmup_factor``,
      then multiply by ``decay_factor`` at each of ``decay_steps`` (M4C: 1e-4, 1k, x0.1 at 14k, 19k).
    * ``constant``: ``learning_rate``.

    Raises:
      ValueError: for an unknown schedule.
    """
    kind = tcfg.schedule
    if kind == "noam":
        scale, warm = float(tcfg.lr_scale), float(max(1, tcfg.warmup_steps))

        def noam(step):
            s = jnp.asarray(step, jnp.float32) + 1.0
            return scale * d_model ** -0.5 * jnp.minimum(s ** -0.5, s * warm ** -1.5)

        return noam
    if kind == "m4c":
        base = float(tcfg.learning_rate)
        warm = int(tcfg.warmup_steps)
        factor = float(tcfg.get("warmup_factor", 0.2))
        boundaries = {int(s): float(tcfg.decay_factor) for s in tcfg.decay_steps}
        warmup = optax.linear_schedule(base * factor, base, max(1, warm))
        decay = optax.piecewise_constant_schedule(base, {s - warm: f for s, f in boundaries.items() if s > warm})
        return optax.join_schedules([warmup, decay], [warm])
    if kind == "constant":
        return optax.constant_schedule(float(tcfg.learning_rate))
    raise ValueError(f"unknown schedule {kind!r}; expected 'noam', 'm4c' or 'constant'")


def make_optimizer(tcfg, d_model: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """Adam/AdamW with the schedule, global-norm clipping and optional gradient accumulation.

    Raises:
      ValueError: for an unknown optimizer.
    """
    schedule = make_schedule(tcfg, d_model)
    if tcfg.optimizer == "adam":
        opt = optax.adam(schedule, b1=tcfg.b1, b2=tcfg.b2, eps=1e-9)
    elif tcfg.optimizer == "adamw":
        opt = optax.adamw(schedule, b1=tcfg.b1, b2=tcfg.b2, eps=1e-9, weight_decay=tcfg.weight_decay)
    else:
        raise ValueError(f"unknown optimizer {tcfg.optimizer!r}; expected 'adam' or 'adamw'")
    chain = [opt]
    if tcfg.grad_clip_norm and tcfg.grad_clip_norm > 0:
        chain.insert(0, optax.clip_by_global_norm(tcfg.grad_clip_norm))
    tx = optax.chain(*chain)
    if tcfg.get("grad_accum_steps", 1) > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=int(tcfg.grad_accum_steps))
    return tx, schedule


def frozen_param_regex(cfg) -> str | None:
    """The regex of parameter paths not trained: ``train.frozen_params`` (a regex over paths such as
    ``vision/backbone/blocks/0/attn/query/kernel``), plus ``vision/backbone/...`` when
    ``model.vision.freeze`` (a pretrained backbone kept as loaded), ``question/embedding/embedding`` when
    ``model.fasttext.freeze`` (fastText question vectors kept as loaded) and ``text_bert/...`` when
    ``model.text_encoder.freeze``. None when nothing is frozen."""
    pats = [p for p in [cfg.train.get("frozen_params")] if p]
    if cfg.model.get("vision") is not None and cfg.model.vision.get("freeze"):
        pats.append(r"(.*/)?vision/backbone/.*")
    if cfg.model.get("question_embedding") == "fasttext" and (cfg.model.get("fasttext") or {}).get("freeze"):
        pats.append(r"(.*/)?question/embedding/embedding(/.*)?")
    if (cfg.model.get("text_encoder") or {}).get("freeze"):
        pats.append(r"(.*/)?text_bert/.*")
    return "|".join(f"(?:{p})" for p in pats) or None


def freeze_params(tx: optax.GradientTransformation, params, regex: str | None) -> optax.GradientTransformation:
    """``tx`` for parameters whose path does not fully match ``regex``; zero updates (``optax.set_to_zero``,
    no optimizer state) for the others, via ``optax.multi_transform``. ``tx`` unchanged when ``regex`` is None.

    Raises:
      ValueError: if ``regex`` matches no parameter (a typo would otherwise train everything silently).
    """
    if not regex:
        return tx
    import re

    from openvivqa_jax.sharding import path_str

    pattern = re.compile(regex)

    def labels(p):
        return jax.tree_util.tree_map_with_path(
            lambda path, _: "frozen" if pattern.fullmatch(path_str(path)) else "trainable", p)

    n = sum(x == "frozen" for x in jax.tree.leaves(labels(params)))
    if n == 0:
        raise ValueError(f"frozen parameter regex {regex!r} matches no parameter path")
    logging.info("Frozen parameters (%r): %d arrays", regex, n)
    return optax.multi_transform({"trainable": tx, "frozen": optax.set_to_zero()}, labels)



# ----------------------------------------------------------------------------------------- train state
@dataclasses.dataclass(frozen=True)
class StateSpec:
    """The fixed half of a train state: everything the jitted step needs besides the arrays.

    Attributes:
      cfg: the experiment config.
      mesh: the device mesh (``cfg.mesh``); batch_sharding: the batch's leading axis along ``data``.
      graphdef: the model's graph (``nnx.split(model, nnx.Param)[0]``).
      tx: the optimizer (frozen parameters masked); schedule: its learning rate by step.
      state_sharding: a :class:`TrainState` of shardings (parameters by ``sharding_rules`` / FSDP; frozen
        parameters have no optimizer state).
      abstract_state: a :class:`TrainState` of ``jax.ShapeDtypeStruct`` s with those shardings (the target
        of checkpoint restores and of lowering).
      num_params: the number of parameters.
      is_generator: whether the model generates answers (else it classifies).
    """

    cfg: ml_collections.ConfigDict
    mesh: Any
    batch_sharding: Any
    graphdef: Any
    tx: optax.GradientTransformation
    schedule: optax.Schedule
    state_sharding: TrainState
    abstract_state: TrainState
    num_params: int
    is_generator: bool


def create_train_state(cfg: ml_collections.ConfigDict, model: nnx.Module, mesh,
                       initialize: bool = True) -> tuple[StateSpec, TrainState | None]:
    """Splits ``model`` into graph and parameters, builds the optimizer (frozen parameters masked), the
    train-state shardings over ``mesh`` and, with ``initialize``, the sharded initial state (step 0,
    ``tx.init`` of the parameters, made by one jit with those output shardings).

    Args:
      cfg: the experiment config (``train``, ``model.d_model``, ``sharding_rules``, ``fsdp``).
      model: the model; may be abstract (``nnx.eval_shape``) when ``initialize`` is False.
      mesh: the device mesh (:func:`openvivqa_jax.sharding.create_mesh`).

    Returns:
      ``(spec, state)``; ``state`` is None when ``initialize`` is False.

    Raises:
      ValueError: an unknown optimizer or schedule, or a frozen-parameter regex matching nothing.
    """
    graphdef, params = nnx.split(model, nnx.Param)
    tx, schedule = make_optimizer(cfg.train, cfg.model.d_model)
    tx = freeze_params(tx, params, frozen_param_regex(cfg))
    num_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))
    abstract = jax.eval_shape(lambda p: TrainState(jnp.int32(0), p, tx.init(p)), params)
    p_shard = sharding.param_shardings(abstract.params, mesh, tuple(cfg.get("sharding_rules", ())),
                                       fsdp=cfg.get("fsdp", False))
    repl = sharding.replicated(mesh)
    masked = lambda v: isinstance(v, optax.MaskedNode)  # noqa: E731  (frozen parameters have no state)
    o_shard = optax.tree_map_params(tx, lambda v, s: v if masked(v) else s, abstract.opt_state, p_shard,
                                    transform_non_params=lambda _: repl, is_leaf=masked)
    state_sharding = TrainState(repl, p_shard, o_shard)
    abstract_state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, state_sharding)
    spec = StateSpec(cfg, mesh, sharding.batch_sharding(mesh), graphdef, tx, schedule, state_sharding,
                     abstract_state, num_params, model_class(cfg.model.name).is_generator)
    state = None
    if initialize:
        init_fn = jax.jit(lambda p: TrainState(jnp.int32(0), p, tx.init(p)), out_shardings=state_sharding)
        with sharding.mesh_context(mesh):
            state = init_fn(params)
    return spec, state


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
        logits = model(batch, deterministic=deterministic, rngs=nnx.Rngs(dropout=key))
        if not is_generator:
            return model.loss(logits, batch)
        if cfg.train.loss == "bce":
            return pointer_bce_loss(logits, batch["target_vocab"], batch["target_ocr"], batch["target_mask"],
                                    batch["ocr_mask"])
        if cfg.train.loss not in ("softmax", "softmax_prefer_copy"):
            raise ValueError(f"unknown train.loss {cfg.train.loss!r}; expected softmax, softmax_prefer_copy, bce")
        return pointer_softmax_loss(logits, batch["target_vocab"], batch["target_ocr"], batch["target_mask"],
                                    prefer_copy=cfg.train.loss == "softmax_prefer_copy")

    return loss_fn


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


# ----------------------------------------------------------------------------------------- experiment
class DataSplits:
    """The TFDS builder of ``data_cfg`` (built on first use: predicting from a workdir needs no dataset), and
    per split its data source and metadata records (each read once)."""

    def __init__(self, data_cfg):
        self.data_cfg = data_cfg
        self._builder = None
        self._sources: dict[str, Any] = {}
        self._records: dict[str, list] = {}
        self._model_ready: dict[str, Any] = {}

    @property
    def builder(self):
        """The TFDS builder (:func:`openvivqa_jax.data.pipeline.load_builder`)."""
        if self._builder is None:
            self._builder = pipeline.load_builder(self.data_cfg)
        return self._builder

    def source(self, split: str):
        """The random-access data source of ``split``."""
        if split not in self._sources:
            self._sources[split] = pipeline.load_source(self.builder, split)
        return self._sources[split]

    def records(self, split: str) -> list:
        """The :class:`~openvivqa_jax.data.pipeline.Record` s of ``split`` in split order."""
        if split not in self._records:
            self._records[split] = pipeline.read_records(self.source(split), f"{self.builder.name}/{split}")
        return self._records[split]

    def check_splits(self, named: dict[str, str]) -> None:
        """Checks that every split the run will read is in the dataset, before anything is trained or compiled.

        Args:
          named: ``{config field: split spec}``, e.g. ``{"data.eval_split": "dev"}``; a spec may slice
            (``train[90%:]``) or join (``train+test``) the builder's splits.

        Raises:
          DatasetError: a split is not in the dataset (one line: the field, the dataset's splits, the flag).
        """
        have = sorted(self.builder.info.splits)
        for field, spec in named.items():
            missing = [n for n in (s.split("[", 1)[0].strip() for s in str(spec).split("+")) if n not in have]
            if missing:
                raise pipeline.DatasetError(
                    f"config value {field}={spec!r} names split {missing[0]!r}, which {self.builder.name} does not "
                    f"have (its splits: {', '.join(have)}); set --config.{field}=... to one of them")

    def model_ready(self, split: str, pre, workdir: str):
        """The model-ready records of ``split`` (:mod:`openvivqa_jax.data.model_ready`, opened once, built when
        missing, stale or corrupt) when ``data.model_ready`` is on and they cover ``pre``'s batches, else None."""
        if not self.data_cfg.get("model_ready"):
            return None
        why = model_ready.usable(pre)
        if why:
            logging.info("data.model_ready: %s/%s is read per example (%s)", self.builder.name, split, why)
            return None
        if split not in self._model_ready:
            root = self.data_cfg.get("model_ready_dir") or os.path.join(workdir, "model_ready")
            self._model_ready[split] = model_ready.open_split(
                self.source(split), pre, root, split, self.builder, source_name=f"{self.builder.name}/{split}",
                num_workers=int(self.data_cfg.get("preprocess_workers", 0) or 0))
        return self._model_ready[split]


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One run's fixed parts: config, folder, train-state spec, text assets, data, metrics log.

    Attributes:
      cfg: the experiment config; workdir: the run folder (absolute, created).
      spec: the :class:`StateSpec` (mesh, shardings, model graph, optimizer).
      inputs: tokenizer, answer list, preprocessors, answer vocabulary (:class:`openvivqa_jax.assets.Inputs`).
      data: the dataset's splits (:class:`DataSplits`).
      jsonl: appends to ``<workdir>/metrics.jsonl`` (process 0).
    """

    cfg: ml_collections.ConfigDict
    workdir: str
    spec: StateSpec
    inputs: assets.Inputs
    data: DataSplits
    jsonl: JsonlWriter


def create_experiment(cfg: ml_collections.ConfigDict, workdir: str,
                      initialize: bool = True) -> tuple[Experiment, TrainState | None]:
    """Builds a run's :class:`Experiment` and, with ``initialize``, its initial :class:`TrainState`.

    The tokenizer (and the classifiers' answer list) are loaded from ``workdir`` or made from the train
    split (:mod:`openvivqa_jax.assets`); the model is built with ``cfg.seed`` (abstractly, with its
    pretrained-backbone checkpoint cleared, when ``initialize`` is False: the parameters then come from a
    checkpoint).

    Raises:
      ValueError: ``train.best_metric`` is not among the computed ``eval.metrics``; see also
        :func:`create_train_state`.
    """
    metric_names = evaluation.evaluator.resolve_metrics(tuple(cfg.eval.metrics))
    if cfg.train.best_metric not in metric_names:
        raise ValueError(f"train.best_metric {cfg.train.best_metric!r} is not among the computed eval.metrics "
                         f"{metric_names}; add it or choose one of them")
    workdir = os.path.abspath(os.path.expanduser(workdir))
    mesh = sharding.create_mesh(cfg.mesh.shape, cfg.mesh.axes)
    data = DataSplits(cfg.data)
    # Every split the run reads is checked now, not after training (the periodic and final evaluations), and
    # before the workdir is made: a wrong split leaves no empty run folder behind.
    data.check_splits({**({"data.train_split": cfg.data.train_split} if initialize else {}),
                       "data.eval_split": cfg.data.eval_split, **evals.split_fields(cfg)})
    os.makedirs(workdir, exist_ok=True)
    train_records = None
    if not assets.exists_on_process_0(os.path.join(workdir, "spm.model")):
        train_records = data.records(cfg.data.train_split)
    tokenizer = assets.load_tokenizer(cfg, workdir, train_records)
    answer_list = None
    if not model_class(cfg.model.name).is_generator:
        answer_list = assets.load_answer_list(cfg, workdir, lambda: data.records(cfg.data.train_split))
    if initialize:
        model = build_model(cfg.model, tokenizer.vocab_size, seed=cfg.seed, tokenizer=tokenizer)
    else:
        with cfg.unlocked():
            if cfg.model.get("vision") is not None and cfg.model.vision.get("checkpoint"):
                cfg.model.vision.checkpoint = None  # the trained weights come from the run's checkpoint
        model = nnx.eval_shape(lambda: build_model(cfg.model, tokenizer.vocab_size, seed=cfg.seed))
    inputs = assets.make_inputs(cfg, tokenizer, answer_list, model)
    spec, state = create_train_state(cfg, model, mesh, initialize=initialize)
    del model
    return Experiment(cfg, workdir, spec, inputs, data, JsonlWriter(os.path.join(workdir, "metrics.jsonl"))), state


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


# ----------------------------------------------------------------------------------------- evaluation
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


def evaluate(exp: Experiment, params, step: int | None, split: str, write: bool = True, mask_ocr: bool = False,
             tag: str | None = None, settings: decoding.DecodeSettings | None = None) -> tuple[dict, list]:
    """Decodes and scores ``split`` with ``params`` (saved at training ``step``; ``settings``: how to decode,
    None: the run's ``eval`` settings); writes ``eval/<tag>_metrics.json`` and ``_predictions.json`` when
    ``write`` (process 0).

    The metrics carry ``decoding``: how the predictions were made (``method`` greedy/beam/argmax,
    ``beam_size``, ``alpha``, ``ocr_masked``, the parameters' training ``step``), so files rewritten by a
    later ``--mode evaluate`` with other decoding settings say so.

    Raises:
      KeyboardInterrupt: a Ctrl-C/SIGTERM recorded earlier whose exception was swallowed
        (:func:`openvivqa_jax.interrupts.raise_if_received`).
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
                                        answer_rules=cfg.eval.get("answer_rules", "vietnamese"))
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
        from jax.experimental import multihost_utils
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def print_table(title: str, metrics: dict) -> str:
    """The text of one metrics table (:func:`openvivqa_jax.evaluation.format_table`) under a ``== title ==`` line."""
    text = evaluation.format_table(metrics)
    return f"\n== {title} ==\n{text}"


def train_and_evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """Trains ``cfg`` in ``workdir`` (resuming if checkpoints exist), evaluates dev periodically and the
    test split at the end; returns ``{role: metrics}`` (:func:`final_evaluation`).

    A run that has finished (:func:`finished_step`) is not evaluated again: one line says so and how to
    re-score it (``--mode evaluate``); nothing is appended to ``metrics.jsonl`` and no TensorBoard file is
    written. Smoke-run settings that train nothing (warm-up past the last step, :func:`warn_warmup`) and inputs
    mostly cut (:func:`warn_cut_inputs`) are WARNING lines.
    """
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
    it, train_pre = _train_inputs(exp)
    state, start, best_score, bad_evals = _resume(exp, latest, state, it)
    # Written once the checkpoint (if any) is known to fit, so a resume with other model settings keeps the
    # run's own config.json.
    if jax.process_index() == 0:
        with open(os.path.join(exp.workdir, "config.json"), "w", encoding="utf-8") as f:
            f.write(cfg.to_json_best_effort(indent=2))
    step_fn = make_train_step(spec)
    hooks = _profile_hooks(exp)

    def save(step: int) -> None:
        latest.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data_iter=ocp.args.JsonSave({"iterator": it.get_state(), "best_score": float(best_score),
                                         "bad_evals": int(bad_evals)})))

    acc = MeanAccumulator()
    t0 = time.time()
    step = start
    stopped_early = False
    # Ctrl-C / SIGTERM: finish the step, save it, stop with one line (openvivqa_jax.interrupts). With several
    # processes SIGTERM is JAX's preemption notice and orbax says at which step all processes save.
    signals = interrupts.StopSignals() if jax.process_count() == 1 else contextlib.nullcontext()
    with signals:
        for step in range(start + 1, t.num_train_steps + 1):
            batch = pipeline.to_global(next(it), spec.batch_sharding)
            with sharding.mesh_context(spec.mesh):
                state, m = step_fn(state, batch)
            for h in hooks:
                h(step)
            acc.add(m)
            if step % t.log_every_steps == 0 or step == t.num_train_steps:
                t0 = _log_train_means(exp, writer, step, acc, t0)
            if t.eval_every_steps and (step % t.eval_every_steps == 0 or step == t.num_train_steps):
                score = _eval_dev(exp, state, step, writer)
                best_score, bad_evals, stopped_early = _record_dev_score(exp, best, state, step, score, best_score,
                                                                         bad_evals)
            if step % t.checkpoint_every_steps == 0 or step == t.num_train_steps or stopped_early:
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
    results = final_evaluation(exp, step, state, writer=writer)
    writer.flush()
    writer.close()
    return results


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
    weights = config_check.parse_kind_weights(cfg.data.get("train_kind_weights", ""))
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
    """``(iterator, train_pre)``: the training batches of this process (from the model-ready records when the
    workdir has them, else encoded per example) and the preprocessor that encodes them, with counters of its own
    so that the truncation rates logged at the end are the training batches' (evaluation encodes other splits)."""
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
    return it, train_pre


def _resume(exp: Experiment, latest: ocp.CheckpointManager, state: TrainState, it):
    """``(state, start_step, best_score, bad_evals)`` from the newest checkpoint of ``latest`` that restores
    (those that do not are set aside, :func:`_set_aside`), with ``it`` moved to where that checkpoint's
    iterator was; ``(state, 0, -inf, 0)`` when there is none."""
    spec = exp.spec
    if latest.latest_step() is None:
        logging.info("No checkpoint in %s: training starts at step 0", latest.directory)
        return state, 0, -np.inf, 0

    def restore(step):
        inference.check_checkpoint_fits(os.path.join(str(latest.directory), str(step), "state"),
                                        spec.abstract_state.params, os.path.join(exp.workdir, "config.json"))
        return latest.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(spec.abstract_state), data_iter=ocp.args.JsonRestore()))

    step, restored = inference.restore_newest(str(latest.directory), sorted(latest.all_steps(), reverse=True),
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


def _log_train_means(exp: Experiment, writer, step: int, acc: MeanAccumulator, t0: float) -> float:
    """Writes the training means accumulated since the last log (and steps per second since ``t0``) to
    TensorBoard, ``metrics.jsonl`` and one log line; returns the time the next interval starts."""
    t = exp.cfg.train
    vals = acc.pop_means()
    steps_per_sec = t.log_every_steps / max(1e-9, time.time() - t0)
    writer.write_scalars(step, {**{f"train/{k}": v for k, v in vals.items()}, "steps_per_sec": steps_per_sec})
    exp.jsonl.write(step, "train", vals)
    logging.info("step %d/%d loss %.4f acc %.3f lr %.2e (%.1f steps/s)", step, t.num_train_steps,
                 vals["loss"], vals.get("token_accuracy", vals.get("accuracy", float("nan"))),
                 vals["learning_rate"], steps_per_sec)
    return time.time()


def _eval_dev(exp: Experiment, state: TrainState, step: int, writer) -> float:
    """Scores the dev split with ``state``'s parameters (writes ``eval/dev_*``, TensorBoard, ``metrics.jsonl``
    and one log line); returns the ``train.best_metric`` score (0 when missing)."""
    cfg = exp.cfg
    # eval.select_decoding: how the periodic dev scores that choose the best checkpoint are decoded
    # ("" = eval.decoding); the final dev and test scores always use eval.decoding.
    settings = decoding.DecodeSettings.from_config(cfg, exp.spec.is_generator,
                                                   method=cfg.eval.get("select_decoding") or None)
    metrics, _ = evaluate(exp, state.params, int(jax.device_get(state.step)), cfg.data.eval_split, write=True,
                          tag="dev", settings=settings)
    overall = metrics["overall"]
    writer.write_scalars(step, {f"dev/{k}": v for k, v in overall.items() if v is not None})
    exp.jsonl.write(step, "eval", {f"dev/{k}": v for k, v in overall.items() if v is not None})
    logging.info("step %d dev: %s", step, {k: round(v, 4) for k, v in overall.items() if v is not None})
    return float(overall.get(cfg.train.best_metric) or 0.0)


def _record_dev_score(exp: Experiment, best: ocp.CheckpointManager, state: TrainState, step: int, score: float,
                      best_score: float, bad_evals: int) -> tuple[float, int, bool]:
    """Saves ``state`` to ``best`` with its dev ``score`` and counts evaluations without improvement; returns
    ``(best_score, bad_evals, stop)``, ``stop`` True (with a log line) when ``train.patience`` of them ran out."""
    t = exp.cfg.train
    best.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)), metrics={"score": score})
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
            logging.warning("%s of the %s %ss were cut at model.%s=%d: raise --config.model.%s", _pct(rate), what,
                            kind, field, model_cfg.get(field), field)


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


def write_metrics_file(exp: Experiment, tag: str, metrics: dict) -> None:
    """Writes ``metrics`` to ``<workdir>/eval/<tag>_metrics.json`` (process 0; replaces the file)."""
    if jax.process_index() == 0:
        with open(os.path.join(exp.workdir, "eval", f"{tag}_metrics.json"), "w", encoding="utf-8") as f:
            json.dump(metrics, f, ensure_ascii=False, indent=2)


def final_evaluation(exp: Experiment, step: int | None, state: TrainState | None = None, writer=None,
                     record_kind: str = "final") -> dict:
    """Runs the evaluations of ``config.evals`` (:mod:`openvivqa_jax.evals`: by default dev, test, test with
    OCR tokens masked out, the copy rate of unseen shop names and the OCR ratio) with the best checkpoint's
    parameters (:func:`openvivqa_jax.inference.restore_params`: ``best/``, else the latest of ``checkpoints/``;
    no optimizer state), and prints their tables and example answers.

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
        params, p_step = inference.restore_params(exp.workdir, exp.spec.abstract_state.params, "best")
    except FileNotFoundError:
        if state is None:
            raise
        logging.warning("no best checkpoint; evaluating the current parameters")
        params, p_step = state.params, int(jax.device_get(state.step))
    return evals.run(exp, params, p_step, p_step if step is None else step, writer=writer, record_kind=record_kind)
