"""One process at a time on a run folder and on a dataset build: operating-system file locks.

Two runs on one ``--workdir`` write the same checkpoint folders, ``metrics.jsonl`` and ``eval/`` files, and
both crash in orbax (thousands of lines) without saving a step. So the main entry point holds the run
folder's lock (:func:`hold_workdir`) for the whole of ``--mode train``, ``--mode evaluate`` and ``--mode
prepare`` (when given a ``--workdir``); a second process on the same folder refuses at once, before anything
is read or written, with one line naming the process that holds it::

    error: WorkdirInUseError: --workdir runs/x is in use by another run: pid 4242 on host vm (main --mode
    train, started 2025-12-05 08:54:13 UTC); wait for it to end, or choose another --workdir

and exit status 2 (:class:`~openvivqa_jax.errors.UsageError`: the flag's folder cannot be used now); the first
run goes on untouched.

Two builds of one dataset into one ``data_dir`` (the TFDS build that training or ``--mode prepare`` starts
when the dataset is missing) would write the same folder. :func:`hold_build` makes the second WAIT for the
first (one ``note:`` line on stderr says for whom), then use what it built: a build takes minutes and both
commands want the same dataset, so waiting serves the user better than refusing.

The locks are ``flock`` locks (through the ``filelock`` package) on a file that stays in place: the operating
system releases one when its process ends in any way, SIGKILL included, so a killed run never leaves a folder
locked. Who holds a lock (pid, host, command, mode, start time) is written to a side file beside it
(``<lock>.json``), which the refusing process reads (waiting up to :data:`HOLDER_SAY_S` for a holder that
has taken the lock but not yet written it); a side file left by a killed run is overwritten by the next holder
and never decides anything.

With several JAX processes (a multi-host run, ``launch/``) each process locks its own file,
``.openvivqa-run.lock`` for process 0 and ``.openvivqa-run.<i>.lock`` for process i: the processes of one run
do not exclude each other (several may share one host and one workdir), while a second launch of the same
run meets each process's lock and every one of its processes refuses. A workdir on an object store
(``gs://...``) cannot be locked and is used unlocked.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator

from openvivqa_jax import jsonio, outputs
from openvivqa_jax.errors import UsageError

__all__ = ["WorkdirInUseError", "hold_workdir", "hold_build", "workdir_lock_path", "build_lock_path",
           "holder_text", "RUN_LOCK", "BUILD_POLL_S", "HOLDER_SAY_S"]

#: The run folder's lock file (process 0's; process i > 0 locks ``.openvivqa-run.<i>.lock``).
RUN_LOCK = ".openvivqa-run.lock"

#: Seconds between two tries of a build lock held by another process.
BUILD_POLL_S = 0.5

#: Seconds a refused or waiting process gives a holder that has just taken its lock to write its side file:
#: the lock and the side file cannot be written in one step, so a process arriving between the two would
#: otherwise name nobody.
HOLDER_SAY_S = 5.0


class WorkdirInUseError(UsageError):
    """Another process holds the run folder's lock; the message names it (pid, host, mode, start time)."""


def workdir_lock_path(workdir: str, process_index: int = 0) -> str:
    """The lock file of ``workdir`` for JAX process ``process_index``."""
    name = RUN_LOCK if process_index == 0 else RUN_LOCK.replace(".lock", f".{process_index}.lock")
    return os.path.join(workdir, name)


def build_lock_path(dataset_dir: str) -> str:
    """The lock file of a TFDS build whose data goes to ``dataset_dir`` (``<data_dir>/<name>/<config>/
    <version>``): a hidden file beside that folder (TFDS reads only folders named as versions there)."""
    parent, version = os.path.split(os.path.normpath(dataset_dir))
    return os.path.join(parent, f".{version}.build.lock")


def _holder_record(mode: str) -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "mode": mode,
            "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "command": shlex.join([os.path.basename(sys.executable), *getattr(sys, "orig_argv", sys.argv)[1:]])}


def holder_text(lock_path: str) -> str:
    """Who holds ``lock_path``, from its side file: ``pid 4242 on host vm (main --mode train, started ...)``;
    a plainer phrase when the side file is missing or unreadable (the holder has not written it yet)."""
    try:
        rec = jsonio.read_json(lock_path + ".json")
        what = f"pid {int(rec['pid'])} on host {rec['host']} ({rec['mode']}, started {rec['started']})"
    except (ValueError, KeyError, TypeError):
        return "another process (it has not said which yet)"
    command = " ".join(str(rec.get("command", "")).split())  # one line, whatever the command held
    return what + (f": {command[:300]}" if command else "")


def _await_holder_text(lock_path: str, lock=None) -> str | None:
    """:func:`holder_text` once the holder's side file is there, waiting up to :data:`HOLDER_SAY_S` for it.
    With ``lock`` (a ``filelock.FileLock`` on ``lock_path``), tries to take it while waiting and returns None
    when it got it (the holder ended meanwhile)."""
    from filelock import Timeout

    deadline = time.monotonic() + HOLDER_SAY_S
    while not os.path.exists(lock_path + ".json") and time.monotonic() < deadline:
        if lock is None:
            time.sleep(0.05)
            continue
        try:
            lock.acquire(timeout=0.05, poll_interval=0.05)
            return None
        except Timeout:
            pass
    return holder_text(lock_path)


def _acquire(lock_path: str, mode: str, wait_note=None):
    """Takes ``lock_path`` (created with its folder when missing) and writes its side file; returns the held
    ``filelock.FileLock``, or None when another process holds it and ``wait_note`` is None. With
    ``wait_note``, ``wait_note(holder)`` is called once and the lock is waited for."""
    from filelock import FileLock, Timeout  # the lock library, imported when a lock is taken

    os.makedirs(os.path.dirname(lock_path) or ".", exist_ok=True)
    lock = FileLock(lock_path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        if wait_note is None:
            return None
        holder = _await_holder_text(lock_path, lock)
        if holder is not None:  # still held: say for whom, then wait
            wait_note(holder)
            lock.acquire(timeout=-1, poll_interval=BUILD_POLL_S)
    with contextlib.suppress(outputs.OutputWriteError):  # who holds it is a courtesy: a full disk must not stop
        outputs.write_json(lock_path + ".json", _holder_record(mode), indent=1)
    return lock


def _release(lock, lock_path: str) -> None:
    """Removes the side file, then releases the lock (the lock file stays: a process waiting on it and one
    arriving later must meet the same file)."""
    with contextlib.suppress(OSError):
        os.unlink(lock_path + ".json")
    lock.release()


@contextlib.contextmanager
def hold_workdir(workdir: str | None, mode: str, flag: str = "--workdir",
                 process_index: int = 0) -> Iterator[None]:
    """Holds the run folder's lock for the block (module doc); nothing for ``None`` or an object-store path.

    Args:
      workdir: the run folder (it exists: the path checks made it).
      mode: what the holder does, named to a refused process (``main --mode train``).
      flag: the flag that named the folder, in the message.
      process_index: this JAX process's index (its own lock file).

    Raises:
      WorkdirInUseError: another process holds it (one line naming that process), before the block runs.
    """
    if not workdir or "://" in workdir:
        yield
        return
    path = workdir_lock_path(workdir, process_index)
    lock = _acquire(path, mode)
    if lock is None:
        holder = _await_holder_text(path)
        raise WorkdirInUseError(f"{flag} {workdir} is in use by another run: {holder}; wait for it to "
                                f"end, or choose another {flag}")
    try:
        yield
    finally:
        _release(lock, path)


@contextlib.contextmanager
def hold_build(dataset_dir: str, name: str) -> Iterator[None]:
    """Holds the build lock of the TFDS dataset folder ``dataset_dir`` (``name``: the dataset, in the note),
    waiting for another process's build first, with one ``note:`` line on stderr naming it. The caller then
    looks again whether the dataset is built (the other process may have built it)."""
    def note(holder: str) -> None:
        print(f"note: {name} is being built into {os.path.dirname(dataset_dir)} by {holder}; waiting for that "
              "build to finish, then using it", file=sys.stderr, flush=True)

    path = build_lock_path(dataset_dir)
    lock = _acquire(path, f"building {name}", wait_note=note)
    try:
        yield
    finally:
        _release(lock, path)
