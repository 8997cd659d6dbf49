"""Stopping a training run with Ctrl-C (SIGINT) or SIGTERM: a checkpoint, then one line.

During the training loop the first SIGINT or SIGTERM only sets a flag (:class:`StopSignals`); the loop
finishes the step it is in, saves a checkpoint of that step (with the data iterator's position) and raises
:class:`TrainingInterrupted`, which the entry point prints as one line::

    interrupted at step 37; last checkpoint step 37; rerun the same command to resume

and exits with 130 (SIGINT) or 143 (SIGTERM), the shell's codes for those signals. A second SIGINT or SIGTERM
stops the process at once, wherever it is (a checkpoint save in progress, a garbage-collector callback, where
an exception would be dropped): the handler prints the same line with the last checkpoint on disk
(:func:`last_checkpoint_step`) and ends the process with ``os._exit``, so neither the save's worker threads nor
the interpreter's shutdown can add a traceback; the unfinished step folder carries orbax's temporary suffix and
is passed over on resume. With several JAX processes the handlers are not installed: SIGTERM is
JAX's preemption notice there, and the loop asks orbax (``CheckpointManager.reached_preemption``) for the
step all processes agreed to save at.

Outside the loop (while the data, tokenizer and model are set up, and while the final splits are scored)
the entry point's handler (:func:`install`) records the signal and raises ``KeyboardInterrupt``. Python
drops an exception raised inside a garbage-collector callback or a ``__del__`` method (it prints "Exception
ignored in ..." with a traceback and goes on), and JAX runs a callback on every collection
(``_xla_gc_callback``), so a Ctrl-C can land there and be lost. The handler therefore looks at the
interrupted frames: inside such a callback it raises nothing and sends the signal again 20 ms later, when
the callback has returned. As a second guard the record is kept: entering the loop (:class:`StopSignals`)
and each later phase (:func:`raise_if_received`) raise ``KeyboardInterrupt`` again if a signal was recorded,
so an interruption is never lost, wherever it lands.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading

__all__ = ["EXIT_CODES", "StopSignals", "TrainingInterrupted", "last_checkpoint_step", "interrupted_message",
           "install", "restore", "ignore_further", "received", "raise_if_received", "clear_received",
           "in_ignoring_context", "REDELIVER_AFTER_S", "install_teardown"]

#: Exit status per signal name: 128 + the signal number, as a shell reports a process killed by it.
EXIT_CODES = {"SIGINT": 128 + signal.SIGINT, "SIGTERM": 128 + signal.SIGTERM}


# Names of the signals that install()'s handler turned into KeyboardInterrupt, oldest first.
_received: list[str] = []


#: Seconds after which a signal that arrived inside a garbage-collector callback or ``__del__`` is sent again.
REDELIVER_AFTER_S = 0.02


def in_ignoring_context(frame) -> bool:
    """Whether ``frame`` or a frame below it runs a garbage-collector callback (``gc.callbacks``) or a
    ``__del__`` method: places where Python prints and drops an exception instead of raising it."""
    codes = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in codes or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _on_signal(signum, frame) -> None:
    _received.append(signal.Signals(signum).name)
    if in_ignoring_context(frame):  # the exception would be dropped: deliver the signal again later
        timer = threading.Timer(REDELIVER_AFTER_S, os.kill, (os.getpid(), signum))
        timer.daemon = True
        timer.start()
        return
    raise KeyboardInterrupt


def install(sigterm: bool = True) -> dict:
    """Installs the entry point's handler for SIGINT (and SIGTERM unless ``sigterm`` is False: with several
    JAX processes SIGTERM is JAX's preemption notice): it records the signal's name (:func:`received`) and
    raises ``KeyboardInterrupt``. From a thread other than the main one (where Python refuses signal
    handlers) it installs nothing.

    Returns:
      The handlers it replaced, ``{signal number: handler}``, for :func:`restore`.
    """
    return _set_handlers(_on_signal, sigterm)


def _set_handlers(handler, sigterm: bool = True) -> dict:
    """Sets ``handler`` for SIGINT (and SIGTERM); returns the replaced ones. Off the main thread (where Python
    refuses signal handlers) it sets nothing and returns ``{}``."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM) if sigterm else (signal.SIGINT,):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            break
    return previous


def restore(previous: dict) -> None:
    """Puts back the handlers that :func:`install` returned."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def ignore_further(sigterm: bool = True) -> None:
    """Ignores SIGINT (and SIGTERM unless ``sigterm`` is False) from now on: the interruption is being
    reported, and a signal sent again by :func:`install`'s handler must not raise inside that report. From
    another thread: does nothing."""
    _set_handlers(signal.SIG_IGN, sigterm)


def install_teardown(message, sigterm: bool = True) -> dict:
    """Handlers for the end of a run, once its work is done and its files are written (interpreter shutdown,
    JAX and orbax teardown): a SIGINT or SIGTERM then prints ``message()`` (the one ``interrupted`` line) on
    stderr and ends the process at once with 130 / 143, as during the run; an exception raised there would be
    lost in teardown and the process would end without the line.

    Args:
      message: called with no argument, returns the line to print.
      sigterm: also SIGTERM (False with several JAX processes, where SIGTERM is JAX's preemption notice).

    Returns:
      The replaced handlers (for :func:`restore`).
    """
    def handler(signum, frame):
        del frame
        name = signal.Signals(signum).name
        try:
            print(message(), file=sys.stderr, flush=True)
        finally:
            os._exit(EXIT_CODES.get(name, 1))

    return _set_handlers(handler, sigterm)


def received() -> str | None:
    """The name of the last signal recorded by :func:`install`'s handler (``SIGINT``/``SIGTERM``), or None."""
    return _received[-1] if _received else None


def clear_received() -> None:
    """Forgets the recorded signals (after the interruption has been reported)."""
    _received.clear()


def raise_if_received() -> None:
    """Raises ``KeyboardInterrupt`` if :func:`install`'s handler recorded a signal: one whose exception was
    swallowed where Python ignores exceptions (a garbage-collector callback, a ``__del__``).

    Raises:
      KeyboardInterrupt: a signal was recorded.
    """
    if _received:
        raise KeyboardInterrupt


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
    signal's name; a second SIGINT/SIGTERM prints ``interrupted; last checkpoint step M; rerun the same command
    to resume`` (M from ``workdir``, :func:`last_checkpoint_step`) on stderr and ends the process at once
    (``os._exit``, 130 / 143; module doc).

    Args:
      workdir: the run folder whose last checkpoint the second signal's line names.

    Installing from a thread other than the main one (where Python refuses signal handlers) installs nothing.
    Entering raises ``KeyboardInterrupt`` (installing nothing) if a signal was recorded before and its
    exception was swallowed (:func:`raise_if_received`).
    """

    def __init__(self, workdir: str | None = None):
        self.requested: str | None = None
        self.workdir = workdir
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopSignals":
        raise_if_received()
        self._previous = _set_handlers(self._handle)
        return self

    def __exit__(self, *exc) -> None:
        self.restore()

    def _handle(self, signum, frame) -> None:
        del frame
        if self.requested is None:
            self.requested = signal.Signals(signum).name
            return
        # Raising here could land in a garbage-collector callback (and be dropped) or inside orbax's save (and
        # leave its threads writing while the interpreter shuts down): end the process instead.
        name = signal.Signals(signum).name
        try:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, RuntimeError, ValueError):  # a write of the main thread that this interrupted
                    pass
            # os.write, not print: the signal may have arrived inside a write to stderr, which print would re-enter
            os.write(2, (interrupted_message(None, last_checkpoint_step(self.workdir)) + "\n").encode())
        finally:
            os._exit(EXIT_CODES.get(name, 1))

    def restore(self) -> None:
        """Puts the previous handlers back (idempotent)."""
        restore(self._previous)
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
