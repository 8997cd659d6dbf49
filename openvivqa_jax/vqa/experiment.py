"""One answer-generation run's fixed parts (:class:`Experiment`): the config, the run folder, the model's train-state
spec (:class:`StateSpec`: mesh, shardings, graph, optimizer), the text assets and the dataset's splits, shared by
the train loop (:mod:`openvivqa_jax.vqa.train`) and the evaluations (:mod:`openvivqa_jax.vqa.evals`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from openvivqa_jax.data.datasets import DataSplits
from openvivqa_jax.evaluation.evaluator import resolve_metrics
from openvivqa_jax.models import build_model, model_class
from openvivqa_jax.text.language import write_training_languages
from openvivqa_jax.training import sharding
from openvivqa_jax.training.run_log import JsonlWriter
from openvivqa_jax.training.state import (TrainState, counter_optimizer, freeze_params, frozen_param_regex,
                                         make_optimizer)
from openvivqa_jax.vqa import assets, run_settings
from openvivqa_jax.vqa import config as vqa_config

__all__ = ["StateSpec", "create_train_state", "Experiment", "create_experiment"]


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
      mesh: the device mesh (:func:`openvivqa_jax.training.sharding.create_mesh`).

    Returns:
      ``(spec, state)``; ``state`` is None when ``initialize`` is False.

    Raises:
      ValueError: an unknown optimizer or schedule, or a frozen-parameter regex matching nothing.
    """
    graphdef, params = nnx.split(model, nnx.Param)
    tx, schedule = make_optimizer(cfg.train, cfg.model.d_model)
    tx = freeze_params(counter_optimizer(tx, params, cfg), params, frozen_param_regex(cfg))
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


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One run's fixed parts: config, folder, train-state spec, text assets, data, metrics log.

    Attributes:
      cfg: the experiment config; workdir: the run folder (absolute, created).
      spec: the :class:`StateSpec` (mesh, shardings, model graph, optimizer).
      inputs: tokenizer, answer list, preprocessors, answer vocabulary (:class:`openvivqa_jax.vqa.assets.Inputs`).
      data: the dataset's splits (:class:`openvivqa_jax.data.datasets.DataSplits`).
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
    split (:mod:`openvivqa_jax.vqa.assets`); the model is built with ``cfg.seed`` (abstractly, with its
    pretrained-backbone checkpoint cleared, when ``initialize`` is False: the parameters then come from a
    checkpoint).

    Raises:
      ValueError: ``train.best_metric`` is not among the computed ``eval.metrics``; see also
        :func:`create_train_state`.
    """
    metric_names = resolve_metrics(tuple(cfg.eval.metrics))
    if cfg.train.best_metric not in metric_names:
        raise ValueError(f"train.best_metric {cfg.train.best_metric!r} is not among the computed eval.metrics "
                         f"{metric_names}; add it or choose one of them")
    workdir = os.path.abspath(os.path.expanduser(workdir))
    mesh = sharding.create_mesh(cfg.mesh.shape, cfg.mesh.axes)
    data = DataSplits(cfg.data)
    # Every split the run reads is checked now, not after training (the periodic and final evaluations), and
    # before the workdir is made: a wrong split leaves no empty run folder behind.
    data.check_splits({**({"data.train_split": cfg.data.train_split} if initialize else {}),
                       "data.eval_split": cfg.data.eval_split, **vqa_config.split_fields(cfg)})
    os.makedirs(workdir, exist_ok=True)
    if initialize and jax.process_index() == 0:
        run_settings.write_initial_config(cfg, workdir)  # before the run's first file: its settings are known
    train_records = None
    if not assets.exists_on_process_0(os.path.join(workdir, "spm.model")):
        train_records = data.records(cfg.data.train_split)
        if jax.process_index() == 0:  # what predict compares a question's language with
            write_training_languages(train_records, workdir, cfg.data.train_split)
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
