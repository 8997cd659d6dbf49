"""Stopping a training run with Ctrl-C (SIGINT) or SIGTERM: a checkpoint, then one line.

During the training loop the first SIGINT or SIGTERM only sets a flag (:class:`StopSignals`); the loop
finishes the step it is in, saves a checkpoint of that step (with the data iterator's position) and raises
:class:`TrainingInterrupted`, which the entry point prints as one line::

    interrupted at step 37; last checkpoint step 37; rerun the same command to resume

and exits with 130 (SIGINT) or 143 (SIGTERM), the shell's codes for those signals. A second SIGINT raises
``KeyboardInterrupt`` at once (no checkpoint); the entry point then prints the last checkpoint on disk
(:func:`last_checkpoint_step`). With several JAX processes the handlers are not installed: SIGTERM is
JAX's preemption notice there, and the loop asks orbax (``CheckpointManager.reached_preemption``) for the
step all processes agreed to save at.
"""

from __future__ import annotations

import os
import signal

__all__ = ["EXIT_CODES", "StopSignals", "TrainingInterrupted", "last_checkpoint_step", "interrupted_message"]

#: Exit status per signal name: 128 + the signal number, as a shell reports a process killed by it.
EXIT_CODES = {"SIGINT": 128 + signal.SIGINT, "SIGTERM": 128 + signal.SIGTERM}


def interrupted_message(step: int | None, checkpoint_step: int | None) -> str:
    """The one-line report: ``interrupted at step N; last checkpoint step M; rerun the same command to
    resume`` (without ``at step N`` when the step is unknown; ``no checkpoint yet ... from step 0`` when
    nothing was saved)."""
    where = f"interrupted at step {step}" if step is not None else "interrupted"
    if checkpoint_step is None:
        return f"{where}; no checkpoint yet; rerun the same command to start again from step 0"
    return f"{where}; last checkpoint step {checkpoint_step}; rerun the same command to resume"


class TrainingInterrupted(Exception):
    """The training loop stopped on a signal after saving a checkpoint.

    Attributes:
      signal_name: ``SIGINT`` or ``SIGTERM``.
      step: the last completed training step.
      checkpoint_step: the step of the newest checkpoint on disk (None: none).
      exit_code: 130 for SIGINT, 143 for SIGTERM (:data:`EXIT_CODES`).
    """

    def __init__(self, signal_name: str, step: int, checkpoint_step: int | None):
        super().__init__(interrupted_message(step, checkpoint_step))
        self.signal_name = signal_name
        self.step = step
        self.checkpoint_step = checkpoint_step
        self.exit_code = EXIT_CODES.get(signal_name, 1)


class StopSignals:
    """Catches SIGINT and SIGTERM while installed (a context manager): the first sets :attr:`requested` to the
    signal's name; a second SIGINT/SIGTERM restores the previous handlers and raises ``KeyboardInterrupt``.

    Installing from a thread other than the main one (where Python refuses signal handlers) installs nothing.
    """

    def __init__(self):
        self.requested: str | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopSignals":
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                break
        return self

    def __exit__(self, *exc) -> None:
        self.restore()

    def _handle(self, signum, frame) -> None:
        del frame
        if self.requested is not None:
            self.restore()
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    def restore(self) -> None:
        """Puts the previous handlers back (idempotent)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def last_checkpoint_step(workdir: str | None) -> int | None:
    """The newest step saved under ``<workdir>/checkpoints/`` (orbax step folders are named by the step;
    unfinished ones carry a suffix and are ignored); None when there is none."""
    if not workdir:
        return None
    d = os.path.join(os.path.expanduser(workdir), "checkpoints")
    try:
        steps = [int(n) for n in os.listdir(d) if n.isdigit() and os.path.isdir(os.path.join(d, n))]
    except OSError:
        return None
    return max(steps) if steps else None
