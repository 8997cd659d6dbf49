"""A run's number of training steps derived from its data: ``train.num_train_steps = 0``.

A config meant for data nobody has seen yet (``configs/folder/mlpag.py``: a user's folder of 1,000 photos or of
50,000) cannot fix one number of steps: too few leave a small folder's kinds of question unlearned, too many spend
hours on a large one. With ``train.num_train_steps = 0`` the trainer sets it from the training split, before
anything else of the run, and says so in one log line::

    steps = clip(ceil(epochs * questions / batch_size), min_steps, max_steps)

where ``questions`` is the number of questions of ``data.train_split`` (every question once; kind weights and
``data.train_kinds`` do not change it) and ``epochs``, ``min_steps`` and ``max_steps`` are
``train.steps_from_data``. The resolved value is what the run's ``config.json`` and its checkpoints hold, so a
resumed or re-scored run uses the same schedule.
"""

from __future__ import annotations

import math

from absl import logging

from openvivqa_jax.errors import ConfigError

__all__ = ["derived_steps", "resolve_train_steps"]


def derived_steps(questions: int, batch_size: int, *, epochs: float, min_steps: int, max_steps: int) -> int:
    """``clip(ceil(epochs * questions / batch_size), min_steps, max_steps)`` (module doc).

    Raises:
      ConfigError: ``epochs`` not > 0, ``min_steps`` below 1, or ``max_steps`` below ``min_steps``.
    """
    if not epochs > 0 or min_steps < 1 or max_steps < min_steps:
        raise ConfigError(f"config value train.steps_from_data={{epochs: {epochs}, min_steps: {min_steps}, "
                          f"max_steps: {max_steps}}} must have epochs > 0 and 1 <= min_steps <= max_steps (for a "
                          f"short run lower both, e.g. --config.train.steps_from_data.min_steps=50, or give the "
                          f"steps: --config.train.num_train_steps=N)")
    return int(min(max(math.ceil(epochs * questions / batch_size), min_steps), max_steps))


def resolve_train_steps(cfg, num_questions) -> int:
    """Sets ``cfg.train.num_train_steps`` from the data when it is 0 (module doc) and logs how; returns it.

    Args:
      cfg: the run's config; changed in place (unlocked for the one field).
      num_questions: a callable giving the number of training questions (called only when the steps are
        derived, as it may build the dataset).

    Raises:
      ConfigError: ``num_train_steps`` is 0 and the config has no ``train.steps_from_data``, or its values are
        out of range (:func:`derived_steps`).
    """
    t = cfg.train
    if int(t.num_train_steps) != 0:
        return int(t.num_train_steps)
    rule = t.get("steps_from_data")
    if rule is None:
        raise ConfigError("config value train.num_train_steps=0 derives the steps from the data, which needs "
                          "train.steps_from_data (epochs, min_steps, max_steps); give a number of steps instead")
    n = int(num_questions())
    steps = derived_steps(n, int(t.batch_size), epochs=float(rule.epochs), min_steps=int(rule.min_steps),
                          max_steps=int(rule.max_steps))
    with cfg.unlocked():
        t.num_train_steps = steps
    logging.info("train.num_train_steps=0: %d steps from the data: %g epochs of the %d training questions at "
                 "batch %d (ceil %d), within train.steps_from_data's [%d, %d]", steps, float(rule.epochs), n,
                 int(t.batch_size), math.ceil(float(rule.epochs) * n / int(t.batch_size)), int(rule.min_steps),
                 int(rule.max_steps))
    return steps
