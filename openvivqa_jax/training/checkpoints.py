"""The orbax checkpoints of a training run, shared by the trainers (:mod:`openvivqa_jax.vqa.train`, the reading
model's :mod:`openvivqa_jax.reading.train`, :mod:`openvivqa_jax.relevance.train`) and by what answers with a
trained run (:mod:`openvivqa_jax.vqa.inference`, the tasks' evaluations).

A run keeps two folders in its workdir: ``checkpoints/<step>/`` (the last few steps, to resume from) and
``best/<step>/`` (the one step with the highest dev ``score``). A loop stopped by a signal saves its last
step first (:func:`stop_with_checkpoint`; :mod:`openvivqa_jax.training.interrupts` for the signals).

Saving (:func:`save_step`): orbax writes a step into a temporary folder and renames it when complete, and
removes the oldest steps only after that, so a save that fails (a full disk, a file-size limit) leaves every
earlier step as it was. The failure is one :class:`CheckpointWriteError` naming the step's folder, the
operating system's reason and the last good step to resume from; the partial folder is removed and orbax's
own error reports (hundreds of traceback lines from its writer threads) are kept out of the log.

Restoring: :func:`restore_params` reads the parameters (not the optimizer state) of the best or latest step,
passing over steps that do not restore (:func:`restore_newest`), after :func:`check_checkpoint_fits` has compared
the stored parameter shapes with the model's.
"""

from __future__ import annotations

import glob
import logging as std_logging
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from absl import logging

from openvivqa_jax import outputs
from openvivqa_jax.errors import UserError
from openvivqa_jax.training import interrupts, sharding

__all__ = ["checkpoint_managers", "stop_with_checkpoint", "CheckpointMismatchError", "CheckpointCorruptError",
           "CheckpointWriteError", "save_step", "restore_newest", "check_checkpoint_fits", "restore_params"]


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


class CheckpointWriteError(UserError):
    """A checkpoint step could not be written (a full disk, a file-size limit, no permission); the message names
    the step's folder, the reason and the last good step, which is kept."""


class _HeldOrbaxErrors(std_logging.Filter):
    """Holds back orbax's ERROR records (a writer thread's exception, with its traceback) while a step is saved:
    dropped (logged at debug level) when the save fails, since :class:`CheckpointWriteError` says it in one
    line; handed on when it succeeds."""

    def __init__(self):
        super().__init__()
        self.held: list[std_logging.LogRecord] = []
        self.failed = False

    def filter(self, record: std_logging.LogRecord) -> bool:
        if record.levelno < std_logging.ERROR or "/orbax/" not in record.pathname:
            return True
        if not self.failed:
            self.held.append(record)
        return False


def _write_failure(e: BaseException | None) -> str | None:
    """The operating system's reason when ``e`` (or an error it was raised from) is a failed write: an
    ``OSError``, or a library's error quoting one (TensorStore); None for anything else (a bug: re-raised)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        reason = outputs.os_reason(e)
        if isinstance(e, OSError) or any(os.strerror(c) == reason for c in outputs.WRITE_ERRNOS):
            return reason
        e = e.__cause__ or e.__context__
    return None


def save_step(manager: ocp.CheckpointManager, step: int, args, metrics: dict | None = None) -> None:
    """Saves ``step`` into ``manager`` (``manager.save(step, args=args, metrics=metrics)``) and waits for it.

    Raises:
      CheckpointWriteError: the step could not be written (the reason is an operating system's: no space, a
        file-size limit, permission); its partial folder is removed (process 0), the earlier steps are kept,
        and the message names the last good step of ``<workdir>/checkpoints``. Any other error is raised as it
        is.
    """
    held = _HeldOrbaxErrors()
    handlers = list(std_logging.getLogger().handlers)
    for h in handlers:
        h.addFilter(held)
    # Before the save, not after its failure: TensorStore's threads report the closed loop while
    # wait_until_finished is still unwinding, sooner than the raise reaches this function on a busy machine.
    _quiet_closed_loop_callbacks()
    try:
        manager.save(step, args=args, metrics=metrics)
        manager.wait_until_finished()
    except Exception as e:  # noqa: BLE001 - orbax and TensorStore raise many types for a failed write
        reason = _write_failure(e)
        if reason is None:
            raise
        held.failed = True  # stays on the handlers: orbax's threads may still report after the raise
        for r in held.held:
            logging.debug("orbax, while step %d failed to save: %s", step, r.getMessage())
        raise _write_error(manager, step, reason) from e
    for h in handlers:
        h.removeFilter(held)
    for r in held.held:  # a save that succeeded keeps orbax's reports
        std_logging.getLogger(r.name).handle(r)


def _write_error(manager: ocp.CheckpointManager, step: int, reason: str) -> CheckpointWriteError:
    """The error for a step that failed to save, after its partial folder (``<step>.orbax-checkpoint-tmp*``)
    is removed: it takes room the user needs back, and orbax passes over it anyway."""
    directory = str(manager.directory)
    if jax.process_index() == 0:
        for tmp in glob.glob(os.path.join(glob.escape(directory), f"{step}.orbax-checkpoint-tmp*")):
            shutil.rmtree(tmp, ignore_errors=True)
    workdir = os.path.dirname(os.path.abspath(directory))
    last = interrupts.last_checkpoint_step(workdir)
    kept = (f"the last good checkpoint, step {last} in {os.path.join(workdir, 'checkpoints')}, is kept; free some "
            "space and rerun the same command to resume from it" if last is not None else
            "no earlier checkpoint was saved; free some space and rerun the same command to start again")
    return CheckpointWriteError(f"could not write checkpoint step {step} to {os.path.join(directory, str(step))}: "
                                f"{reason}; {kept}")


class CheckpointMismatchError(UserError, ValueError):
    """A run's checkpoint does not fit the model built from the config (other model settings than the run was
    trained with, e.g. another ``d_model``, vocabulary or ``model.question_over_image``)."""


class CheckpointCorruptError(UserError, ValueError):
    """No checkpoint step of a run restores (each is unreadable: a truncated or missing data file, bad metadata)."""


def _first_line(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quiet_closed_loop_callbacks() -> None:
    """Drops the "Event loop is closed" errors that a failed orbax save or restore leaves behind.

    When one array of a step cannot be read or written, orbax closes its asyncio loop while TensorStore still
    completes the reads or writes of the other arrays; each completion then raises
    ``RuntimeError('Event loop is closed')`` in a callback, which Python reports through ``sys.unraisablehook``
    (thousands of traceback lines for a real model). Those errors say nothing more than the step's one warning
    or error line does, so they are dropped; any other unraisable error still goes to the previous hook. A
    callback run from TensorStore's own threads reports its error through ``sys.excepthook`` instead (a bare
    traceback, printed while the failed save is still unwinding), so that hook drops the same error. Installed
    once per process, before the first save or restore: the reports start before the failure reaches the caller.
    """
    previous = sys.unraisablehook
    if getattr(previous, "_drops_closed_loop", False):
        return
    previous_excepthook = sys.excepthook

    def closed_loop(e) -> bool:
        return isinstance(e, RuntimeError) and str(e) == "Event loop is closed"

    def hook(unraisable):
        if not closed_loop(unraisable.exc_value):
            previous(unraisable)

    def excepthook(kind, value, tb):
        if not closed_loop(value):
            previous_excepthook(kind, value, tb)

    hook._drops_closed_loop = True
    sys.unraisablehook = hook
    sys.excepthook = excepthook


class _UnretrievedReadErrors(std_logging.Filter):
    """Keeps asyncio's "exception was never retrieved" reports of the reads of a corrupt step off stderr.

    When one array of a step fails to read, orbax's gather raises the first error and the reads of the other
    arrays finish later with the same kind of error that nobody awaits; when those tasks are collected, asyncio
    logs each with its traceback, at a time that depends on the garbage collector (even before the failed
    restore has returned). Those errors are summed up in the step's one ``warning:`` line, so only reports whose
    exception names a step folder in :attr:`steps` (those being restored) are dropped, logged at debug level
    instead; a step that restores has no failed read to report, and every other asyncio error still shows.
    """

    def __init__(self):
        super().__init__()
        self.steps: set[str] = set()

    def filter(self, record: std_logging.LogRecord) -> bool:
        if not self.steps or "exception was never retrieved" not in str(record.msg):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        text = f"{exc} {record.getMessage()}"
        if any(step in text for step in self.steps):
            logging.debug("unretrieved read error of a corrupt checkpoint step: %s", _first_line(exc or record.msg))
            return False
        return True


_UNRETRIEVED = _UnretrievedReadErrors()


def _watch_step(directory: str, step: int) -> None:
    """Adds a step folder to the filter of unretrieved read errors (installed on the asyncio logger once)."""
    if _UNRETRIEVED not in std_logging.getLogger("asyncio").filters:
        std_logging.getLogger("asyncio").addFilter(_UNRETRIEVED)
    for d in {directory, os.path.abspath(directory), os.path.realpath(directory)}:
        _UNRETRIEVED.steps.add(os.path.join(d, str(step)) + os.sep)


def restore_newest(directory: str, steps: Sequence[int], restore: Callable[[int], Any],
                   on_bad: Callable[[int], str] | None = None) -> tuple[int, Any]:
    """Restores the first step of ``steps`` (newest first) that restores, passing over corrupt ones.

    A step that fails to restore (orbax / TensorStore raise, e.g. ``OUT_OF_RANGE ... Requested byte range`` for
    a truncated data file) is reported by one ``warning:`` line on stderr naming the step, and the next one is
    tried; the bad step is kept on disk (``on_bad`` may move it aside and say where). A
    :class:`CheckpointMismatchError` (the checkpoint does not fit the model) is not corruption and is raised.

    Args:
      directory: the checkpoint folder, named in messages.
      steps: the steps to try, in order.
      restore: ``step -> restored`` (raises when the step cannot be read).
      on_bad: called with a bad step; returns what to add to the warning (e.g. where it was moved).

    Returns:
      ``(step, restored)`` of the first step that restores.

    Raises:
      CheckpointCorruptError: no step restores (one line naming the steps and the first error).
      CheckpointMismatchError: from ``restore``.
    """
    failed: list[tuple[int, BaseException]] = []
    _quiet_closed_loop_callbacks()  # before the first attempt: a failing one reports from other threads at once
    for step in steps:
        _watch_step(directory, step)
        try:
            out = restore(step)
        except CheckpointMismatchError:
            raise
        except Exception as e:  # noqa: BLE001 - orbax, TensorStore and msgpack raise many types for a bad file
            logging.debug("checkpoint step %s in %s does not restore", step, directory, exc_info=True)
            failed.append((step, e))
            extra = on_bad(step) if on_bad is not None else ""
            print(f"warning: checkpoint step {step} in {directory} does not restore ({_first_line(e, 160)}); "
                  f"kept{extra}, trying the step before it", file=sys.stderr)
            continue
        if failed:
            print(f"warning: restored step {step} from {directory} instead of the newest step {failed[0][0]}, "
                  "which does not restore", file=sys.stderr)
        return step, out
    raise CheckpointCorruptError(
        f"no checkpoint in {directory} restores: step(s) {', '.join(str(s) for s, _ in failed)} fail (step "
        f"{failed[0][0]}: {_first_line(failed[0][1], 160)}); train again with another --workdir, or restore the "
        "files from a copy")


def _saved_param_shapes(item_dir: str) -> dict[str, tuple[int, ...]] | None:
    """``{parameter path: shape}`` of the ``params`` subtree stored in an orbax item folder, from its metadata
    (no array is read); None when the metadata cannot be read (then the restore itself reports)."""
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.ERROR)  # orbax warns that a per-item metadata file is absent: not an error here
    try:
        meta = ocp.PyTreeCheckpointer().metadata(item_dir)
        tree = getattr(getattr(meta, "item_metadata", meta), "tree", None)
        params = tree["params"]
        return {sharding.path_str(p).removesuffix("/value"): tuple(m.shape)
                for p, m in jax.tree_util.tree_leaves_with_path(params)}
    except Exception:  # noqa: BLE001 - any unreadable or other-format metadata: leave it to the restore
        return None
    finally:
        logging.set_verbosity(verbosity)


def check_checkpoint_fits(item_dir: str, abstract_params: Any, config_path: str | None = None) -> None:
    """Compares the parameter shapes stored in a checkpoint with the model's before anything is restored.

    Args:
      item_dir: the checkpoint's ``state`` item folder, ``<workdir>/<checkpoints|best>/<step>/state``.
      abstract_params: the model's parameters (arrays or ``jax.ShapeDtypeStruct`` s, an ``nnx.State``).
      config_path: the run's ``config.json``, named in the message.

    Raises:
      CheckpointMismatchError: one line naming the checkpoint, how many parameters differ in shape, are
        missing from it or are not in the model, with one example of each, and the run's config.
    """
    saved = _saved_param_shapes(item_dir)
    if saved is None:
        return
    want = {sharding.path_str(p).removesuffix("/value"): tuple(a.shape)
            for p, a in jax.tree_util.tree_leaves_with_path(abstract_params)}
    differ = sorted(k for k in saved.keys() & want.keys() if saved[k] != want[k])
    missing = sorted(want.keys() - saved.keys())
    extra = sorted(saved.keys() - want.keys())
    if not (differ or missing or extra):
        return
    parts = []
    if differ:
        k = differ[0]
        parts.append(f"{len(differ)} parameters differ in shape (e.g. {k}: {saved[k]} in the checkpoint, {want[k]} "
                     "in the model)")
    if missing:
        parts.append(f"{len(missing)} of the model's parameters are not in the checkpoint (e.g. {missing[0]})")
    if extra:
        parts.append(f"{len(extra)} of the checkpoint's parameters are not in the model (e.g. {extra[0]})")
    cfg = f"; the run was trained with {config_path}" if config_path else ""
    raise CheckpointMismatchError(
        f"checkpoint {item_dir} does not fit the model of this config: {'; '.join(parts)}{cfg}. Use the model "
        "settings the run was trained with, or another --workdir")


def restore_params(workdir: str, abstract: Any, which: str = "best") -> tuple[Any, int]:
    """Reads the parameters (and the step) of a saved train state, not its optimizer state.

    Looks in ``<workdir>/best`` (its best step, else its latest) and then ``<workdir>/checkpoints``
    (latest) when ``which`` is ``"best"``; only in ``<workdir>/<which>`` otherwise. The checkpoints are
    the trainer's (orbax ``CheckpointManager``, item ``state`` = ``TrainState(step, params, opt_state)``);
    only the ``step`` and ``params`` subtrees are read (``PyTreeRestore(partial_restore=True)``).

    Args:
      workdir: the run folder.
      abstract: the parameters as ``jax.ShapeDtypeStruct`` s carrying their target shardings (an
        ``nnx.State``), e.g. from :func:`openvivqa_jax.vqa.inference.abstract_params`.
      which: ``"best"`` or ``"checkpoints"``.

    Returns:
      ``(params, step)``: the restored ``nnx.State`` placed with ``abstract``'s shardings, and the saved step.

    A step that does not restore (a truncated data file) is passed over with one warning line, newest first
    (:func:`restore_newest`): in ``best/`` its other steps, then ``checkpoints/``.

    Raises:
      FileNotFoundError: if the workdir holds no checkpoint there.
      CheckpointCorruptError: checkpoints exist but none restores.
      CheckpointMismatchError: the checkpoint's parameters do not fit ``abstract`` (:func:`check_checkpoint_fits`).
    """
    corrupt: CheckpointCorruptError | None = None
    for sub in ([which, "checkpoints"] if which == "best" else [which]):
        d = os.path.join(workdir, sub)
        if not os.path.isdir(d):
            continue
        mngr = ocp.CheckpointManager(d, item_names=("state",) if sub == "best" else ("state", "data_iter"))
        first = mngr.best_step() if sub == "best" else mngr.latest_step()
        if first is None:
            first = mngr.latest_step()
        if first is None:
            continue
        steps = [first] + sorted((s for s in mngr.all_steps() if s != first), reverse=True)
        repl = jax.sharding.NamedSharding(jax.tree.leaves(abstract)[0].sharding.mesh, jax.sharding.PartitionSpec())
        target = {"step": jax.ShapeDtypeStruct((), jnp.int32, sharding=repl), "params": abstract}

        def restore(step, d=d, mngr=mngr, target=target):
            check_checkpoint_fits(os.path.join(d, str(step), "state"), abstract, os.path.join(workdir, "config.json"))
            return mngr.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
                item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target), partial_restore=True)))

        try:
            step, restored = restore_newest(d, steps, restore)
        except CheckpointCorruptError as e:
            corrupt = corrupt or e
            continue
        state = restored["state"]
        logging.info("Restored the parameters of the %s checkpoint at step %d from %s", sub, step, d)
        return state["params"], int(jax.device_get(state["step"]))
    if corrupt is not None:
        raise corrupt
    raise FileNotFoundError(f"no checkpoint in {workdir} (looked in best/ and checkpoints/)")
