"""The train state and its optimizer, shared by the trainers (answer generation, :mod:`openvivqa_jax.vqa.train`;
the span reader, :mod:`openvivqa_jax.reading.train`): :class:`TrainState` (step, float32 master parameters,
optimizer state), the learning-rate schedules of the papers, Adam/AdamW with clipping and accumulation, and the
masking of frozen parameters.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import optax
from absl import logging
from flax import struct

from openvivqa_jax.models.counting import counter_weight
from openvivqa_jax.models.verifying import verifier_enabled
from openvivqa_jax.training.sharding import path_str

__all__ = ["TrainState", "make_schedule", "make_optimizer", "frozen_param_regex", "freeze_params", "counter_optimizer",
           "verifier_rate"]


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
    * ``warmup_constant``: linear warmup from 0 to ``learning_rate`` over ``warmup_steps``, then constant (the
      constant rates of DrQA's Adamax and QANet's Adam after their warmup).

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
    if kind == "warmup_constant":
        base, warm = float(tcfg.learning_rate), int(tcfg.warmup_steps)
        return optax.join_schedules([optax.linear_schedule(base / max(1, warm), base, max(1, warm)),
                                     optax.constant_schedule(base)], [max(1, warm)])
    raise ValueError(f"unknown schedule {kind!r}; expected 'noam', 'm4c', 'constant' or 'warmup_constant'")


def make_optimizer(tcfg, d_model: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """Adam/AdamW/Adamax with the schedule, global-norm clipping and optional gradient accumulation. Adamax
    (Kingma & Ba 2015 §7.1) is DrQA's optimizer, with PyTorch's ``eps`` 1e-8; ``train.eps`` overrides Adam's
    1e-9 (QANet: 1e-7).

    Raises:
      ValueError: for an unknown optimizer.
    """
    schedule = make_schedule(tcfg, d_model)
    eps = float(tcfg.get("eps", 1e-9))
    if tcfg.optimizer == "adam":
        opt = optax.adam(schedule, b1=tcfg.b1, b2=tcfg.b2, eps=eps)
    elif tcfg.optimizer == "adamax":
        opt = optax.adamax(schedule, b1=tcfg.b1, b2=tcfg.b2, eps=float(tcfg.get("eps", 1e-8)))
    elif tcfg.optimizer == "adamw":
        opt = optax.adamw(schedule, b1=tcfg.b1, b2=tcfg.b2, eps=eps, weight_decay=tcfg.weight_decay)
    else:
        raise ValueError(f"unknown optimizer {tcfg.optimizer!r}; expected 'adam', 'adamw' or 'adamax'")
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
    if counter_weight(cfg.model) > 0:
        pats.append(COUNTER_STATS)
    if verifier_enabled(cfg.model):
        pats.append(VERIFIER_STATS)
    return "|".join(f"(?:{p})" for p in pats) or None


#: Parameter paths of the region counter's scoring MLP and question embeddings
#: (:mod:`openvivqa_jax.models.counting`), and of its input statistics. Its memory token's projection and norm
#: are read by the decoder and trained by the answer loss, so they follow the model's own optimizer.
COUNTER_PARAMS = r"(.*/)?counter/(w1|w2|score|q_add|q_mul)(/.*)?"
COUNTER_STATS = r"(.*/)?counter/input_(mean|std)(/.*)?"
#: Parameter paths of the region verifier's region embedding, detectors, gate and counting, comparing and relating
#: weights (:mod:`openvivqa_jax.models.verifying`; its relation token's projection is read by the decoder and
#: follows the model's optimizer), and of what the training loop sets once: its input statistics, the answer
#: pieces' polarity, numbers and absence, and the question pieces' comparison roles.
VERIFIER_PARAMS = (r"(.*/)?verifier/(w1|detector|detector_bias|gate|count_gate|route|attribute_weight|same_bias"
                   r"|direction|object_weight|relation_gate)(/.*)?")
VERIFIER_STATS = (r"(.*/)?verifier/(input_mean|input_std|answer_polarity|split_piece|reverse_piece|answer_number"
                  r"|nothing_piece|relation_piece)(/.*)?")


def counter_optimizer(tx: optax.GradientTransformation, params, cfg) -> optax.GradientTransformation:
    """``tx`` for every parameter but the region counter's scoring MLP and question embeddings
    (:data:`COUNTER_PARAMS`), which get Adam at the constant ``model.counter.learning_rate`` (they are trained by
    the counter's own loss only, on many more counting questions than the model sees, and from the first step:
    the model's warm-up and decay would hold them back), and the region verifier's (:data:`VERIFIER_PARAMS`),
    which get Adam at ``model.verifier.learning_rate`` (default 1e-2) from the first step for the same reason,
    constant or falling at the end of the run (:func:`verifier_rate`). ``tx`` unchanged with neither
    (``model.counter.weight`` 0, ``model.verifier.enabled`` False)."""
    own = {}
    if counter_weight(cfg.model) > 0:
        own["counter"] = (re.compile(COUNTER_PARAMS), float(cfg.model.counter.get("learning_rate", 3e-3)))
    if verifier_enabled(cfg.model):
        own["verifier"] = (re.compile(VERIFIER_PARAMS), verifier_rate(cfg))
    if not own:
        return tx

    def label(path) -> str:
        name = path_str(path)
        return next((k for k, (pattern, _) in own.items() if pattern.fullmatch(name)), "model")

    def labels(p):
        return jax.tree_util.tree_map_with_path(lambda path, _: label(path), p)

    return optax.multi_transform({"model": tx, **{k: optax.adam(lr) for k, (_, lr) in own.items()}}, labels)


def verifier_rate(cfg) -> float | optax.Schedule:
    """The region verifier's learning rate: ``model.verifier.learning_rate`` (``r``, default 1e-2), constant
    while ``model.verifier.decay_start`` (``f``, a fraction of ``train.num_train_steps`` ``T``; default 1) is 1,
    else ``r`` up to step ``f T`` and then a half cosine from ``r`` to 0 at step ``T`` (Loshchilov and Hutter,
    ICLR 2017, without restarts). At a constant 1e-2 its Adam keeps moving the detectors to the last step, and a
    kind's dev exact match swings by 2-6 points between evaluations 500 steps apart; the fall lets the run end
    on settled scores. With ``f < 1`` and ``T`` unknown (0) the rate is the constant schedule, so that the
    optimizer state has the same structure either way.

    Raises:
      ValueError: ``decay_start`` outside [0, 1].
    """
    rate = float(cfg.model.verifier.get("learning_rate", 1e-2))
    start = float(cfg.model.verifier.get("decay_start", 1.0))
    if not 0.0 <= start <= 1.0:
        raise ValueError(f"model.verifier.decay_start must be in [0, 1], got {start}")
    if start == 1.0:
        return rate
    total = int(cfg.train.get("num_train_steps", 0) or 0)
    if total <= 0:
        return optax.constant_schedule(rate)
    begin = int(round(start * total))
    fall = optax.cosine_decay_schedule(rate, max(1, total - begin))
    return optax.join_schedules([optax.constant_schedule(rate), fall], [begin])


def freeze_params(tx: optax.GradientTransformation, params, regex: str | None) -> optax.GradientTransformation:
    """``tx`` for parameters whose path does not fully match ``regex``; zero updates (``optax.set_to_zero``,
    no optimizer state) for the others, via ``optax.multi_transform``. ``tx`` unchanged when ``regex`` is None.

    Raises:
      ValueError: if ``regex`` matches no parameter (a typo would otherwise train everything silently).
    """
    if not regex:
        return tx
    pattern = re.compile(regex)

    def labels(p):
        return jax.tree_util.tree_map_with_path(
            lambda path, _: "frozen" if pattern.fullmatch(path_str(path)) else "trainable", p)

    n = sum(x == "frozen" for x in jax.tree.leaves(labels(params)))
    if n == 0:
        raise ValueError(f"frozen parameter regex {regex!r} matches no parameter path")
    logging.info("Frozen parameters (%r): %d arrays", regex, n)
    return optax.multi_transform({"trainable": tx, "frozen": optax.set_to_zero()}, labels)
