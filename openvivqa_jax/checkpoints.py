"""The orbax checkpoints of a training run, shared by the trainers (:mod:`openvivqa_jax.train`, the reading
model's :mod:`openvivqa_jax.reading.train`, :mod:`openvivqa_jax.relevance_train`).

A run keeps two folders in its workdir: ``checkpoints/<step>/`` (the last few steps, to resume from) and
``best/<step>/`` (the one step with the highest dev ``score``). A loop stopped by a signal saves its last
step first (:func:`stop_with_checkpoint`; :mod:`openvivqa_jax.interrupts` for the signals).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import orbax.checkpoint as ocp
from absl import logging

from openvivqa_jax import interrupts

__all__ = ["checkpoint_managers", "stop_with_checkpoint"]


def checkpoint_managers(workdir: str, *, keep: int,
                        latest_items: Sequence[str]) -> tuple[ocp.CheckpointManager, ocp.CheckpointManager]:
    """``(latest, best)`` orbax CheckpointManagers of ``<workdir>/checkpoints`` (items ``latest_items``, the
    last ``keep`` steps) and ``<workdir>/best`` (item ``state``, the one step with the highest ``score``
    metric); both write synchronously.

    Args:
      workdir: the run's folder (the managers create their folders).
      keep: how many of the latest steps ``checkpoints/`` keeps.
      latest_items: the items of a step in ``checkpoints/``, e.g. ``("state", "data_iter")``.
    """
    latest = ocp.CheckpointManager(
        os.path.join(workdir, "checkpoints"),
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False),
        item_names=tuple(latest_items))
    best = ocp.CheckpointManager(
        os.path.join(workdir, "best"),
        options=ocp.CheckpointManagerOptions(max_to_keep=1, create=True, best_fn=lambda m: m["score"],
                                             best_mode="max", enable_async_checkpointing=False),
        item_names=("state",))
    return latest, best


def stop_with_checkpoint(signal_name: str, step: int, save: Callable[[int], Any], latest: ocp.CheckpointManager,
                         best: ocp.CheckpointManager, *, warn: bool = True) -> NoReturn:
    """Ends a training loop on a signal: saves ``step`` unless ``latest`` holds it already, waits until both
    managers have written, logs ``<signal>: stopped after step N and saved it`` (a warning, unless ``warn`` is
    False) and raises.

    Args:
      signal_name: ``SIGINT`` or ``SIGTERM``.
      step: the last completed training step.
      save: saves a step into ``latest`` (with the items the run keeps there).
      latest, best: the run's managers (:func:`checkpoint_managers`).
      warn: log the warning line.

    Raises:
      interrupts.TrainingInterrupted: always, with the step and the newest checkpoint step.
    """
    if latest.latest_step() != step:
        save(step)
    latest.wait_until_finished()
    best.wait_until_finished()
    if warn:
        logging.warning("%s: stopped after step %d and saved it", signal_name, step)
    raise interrupts.TrainingInterrupted(signal_name, step, latest.latest_step())
