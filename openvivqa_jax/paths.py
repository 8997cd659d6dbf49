"""The path flags of every entry point, checked before any work starts.

Each command line (``main``, ``evaluate``, ``predict``, ``analyze``, ``plot``, ``param_count``, the fastText
trainer and the scripts in ``benchmarks/``) names its path flags once, each with a :class:`PathKind`, and hands
them to :func:`check_args` (an argparse namespace) or :func:`check_paths` (explicit values) first thing,
before it imports or computes anything heavy::

    PATH_FLAGS = {"--standin": paths.INPUT_DIR, "--cache_root": paths.OUTPUT_DIR}
    args = parser.parse_args(argv)
    paths.check_args(args, PATH_FLAGS)

A path that cannot serve raises :class:`PathError` (a :class:`~openvivqa_jax.errors.UsageError`, exit status
2), which the command line layer (:func:`openvivqa_jax.cli.run_main`) prints as one ``error:`` line naming
the flag and the path: an input that does not exist (with the nearest name in its folder, when one is close),
a file where a folder is expected or the other way round, a folder that cannot be written or created, a
program that is not there or cannot run.

How the checks are made:

* Writability is found by trying: a temporary file is created in the folder and removed at once. ``os.access``
  is not asked, as it answers for the real user id and says yes to root for a folder whatever its mode bits
  (root writes there anyway, so that answer is right for root, but it is wrong for a read-only mount, an
  immutable folder, a root-squashed network share or a capability-restricted process, where trying is not).
* Nothing is created before every path has passed; then missing output folders (and the folders of output
  files) are created with their parents. Folders created this way are removed again by
  :func:`remove_created` if they are still empty when the command fails afterwards (``run_main`` calls it), so
  a refused or failed command leaves nothing behind.
* An output path (a file or folder the command writes) that is one of its input paths is refused: ``predict
  --output`` naming the ``--questions`` file, ``--plot`` the ``--image``, ``evaluate --json`` the
  ``--predictions``. Paths are compared once links, ``.`` and ``..`` are resolved, and by inode when both exist
  (a hard link). A command also names the files it reads without a flag of their own (``reads``: a run
  folder's ``config.json``), so that no output replaces them either.
* ``~`` is expanded (a shell leaves it alone after ``--flag=``); :func:`check_args` writes the expanded paths
  back into the namespace so that the command uses what was checked. Values holding ``://`` (``gs://...``)
  are left to the library that opens them.

Setting the environment variable ``OPENVIVQA_CHECK_PATHS_ONLY=1`` makes a command stop with exit status 0 right
after its paths passed (and its output folders were created), with one ``paths ok:`` line on stderr: a
long job's command line can be tried before it is submitted, and the tests check every entry point's paths
this way without running its work.

Only the standard library is imported here, so that a check costs no more than the process start.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

from openvivqa_jax.errors import UsageError

__all__ = ["PathKind", "PathError", "INPUT_FILE", "INPUT_DIR", "INPUT", "OPTIONAL_INPUT_DIR", "RUN_DIR", "OUTPUT_DIR",
           "NEW_OUTPUT_DIR", "DATA_DIR", "OUTPUT_FILE", "PROGRAM", "is_output", "check_paths", "check_args",
           "remove_created", "CHECK_ONLY_ENV"]

#: Environment variable: when set to a non-empty value other than ``0``, a command stops (exit status 0) right
#: after its paths passed, printing one ``paths ok:`` line on stderr.
CHECK_ONLY_ENV = "OPENVIVQA_CHECK_PATHS_ONLY"


class PathError(UsageError):
    """A path flag whose path cannot serve; the message names the flag, the path and what is wrong."""


@dataclasses.dataclass(frozen=True)
class PathKind:
    """What a path flag expects.

    Attributes:
      name: what the path is, in messages and documentation.
      folder: True for a folder, False for a file, None for either.
      must_exist: the path is read, so it must be there.
      writable: the command writes into the folder (for a file: the file or its folder).
      create: a missing folder (for a file: its missing folder) is created, with its parents.
      empty: an existing folder must be empty (a command that refuses to mix its output with other files).
      program: a program to run: an executable file, or a name found on ``PATH``.
    """

    name: str
    folder: bool | None
    must_exist: bool
    writable: bool = False
    create: bool = False
    empty: bool = False
    program: bool = False


#: A file that is read.
INPUT_FILE = PathKind("input file", folder=False, must_exist=True)
#: A folder that is read.
INPUT_DIR = PathKind("input folder", folder=True, must_exist=True)
#: A file or a folder that is read.
INPUT = PathKind("input", folder=None, must_exist=True)
#: A folder that must exist and is written to (a run folder that is scored again).
RUN_DIR = PathKind("run folder", folder=True, must_exist=True, writable=True)
#: A folder that is written to; created when missing.
OUTPUT_DIR = PathKind("output folder", folder=True, must_exist=False, writable=True, create=True)
#: A folder that is written to and must be new or empty; created when missing.
NEW_OUTPUT_DIR = PathKind("new output folder", folder=True, must_exist=False, writable=True, create=True, empty=True)
#: A TFDS data folder: created when missing; an existing one may be read-only (a built dataset is only read).
DATA_DIR = PathKind("data folder", folder=True, must_exist=False, create=True)
#: A folder that is read when it is there and not needed otherwise (a dataset's manual download folder, read
#: only to build the dataset): only a file in its place is refused.
OPTIONAL_INPUT_DIR = PathKind("input folder", folder=True, must_exist=False)
#: A file that is written; its folder is created when missing.
OUTPUT_FILE = PathKind("output file", folder=False, must_exist=False, writable=True, create=True)
#: A program to run: a path to an executable file, or a name looked up on ``PATH``.
PROGRAM = PathKind("program", folder=False, must_exist=True, program=True)

# Folders created by the checks of this process, parents first (remove_created).
_CREATED: list[str] = []


def _kind_word(kind: PathKind) -> str:
    return "folder" if kind.folder else "file" if kind.folder is False else "path"


def _write_problem(folder: str) -> str | None:
    """Why nothing can be written in ``folder`` (the OS's reason), or None when a file could be created there."""
    try:
        fd, name = tempfile.mkstemp(prefix=".write-check-", dir=folder)
    except OSError as e:
        return e.strerror or type(e).__name__
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:  # written is what was asked; a file left behind would be odd but harmless
        pass
    return None


def _read_problem(path: str, folder: bool) -> str | None:
    """Why ``path`` cannot be read (the OS's reason), or None."""
    try:
        if folder:
            with os.scandir(path):
                pass
        else:  # non-blocking: a named pipe is not waited on
            os.close(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)))
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def _suggestion(path: str) -> str:
    """``"; did you mean <sibling>?"`` for the closest name in the folder of a missing ``path`` ("" if none)."""
    folder, name = os.path.split(path)
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return ""
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return f"; did you mean {os.path.join(folder, near[0])}?" if near else ""


def _nearest_existing(path: str) -> str:
    """The deepest ancestor of ``path`` (itself excluded) that exists (as a link or not)."""
    current = os.path.abspath(path)
    while True:
        parent = os.path.dirname(current)
        if parent == current or os.path.lexists(parent):
            return parent
        current = parent


def _check_one(flag: str, given: str, kind: PathKind) -> tuple[str, str | None]:
    """Checks one path; returns ``(path with ~ expanded, folder to create or None)``.

    Raises:
      PathError: the path cannot serve as ``kind``.
    """
    path = os.path.expanduser(given)

    def fail(problem: str):
        raise PathError(f"{flag} {given}: {problem}")

    if kind.program and os.sep not in path and not (os.altsep and os.altsep in path):
        if shutil.which(path) is None:
            fail("no such program on PATH")
        return path, None
    if os.path.lexists(path) and not os.path.exists(path):
        fail(f"a link to {os.readlink(path)}, which does not exist")
    if os.path.exists(path):
        is_dir = os.path.isdir(path)
        if kind.folder and not is_dir:
            fail(f"is a file, not a folder (expected {'an' if kind.name[0] in 'aeiou' else 'a'} {kind.name})")
        if kind.folder is False and is_dir:
            fail(f"is a folder, not a file (expected {'an' if kind.name[0] in 'aeiou' else 'a'} {kind.name})")
        if kind.must_exist:
            problem = _read_problem(path, is_dir)
            if problem:
                fail(f"cannot be read ({problem})")
        if kind.program and not os.access(path, os.X_OK):
            fail("is not executable")
        if kind.empty and is_dir:
            with os.scandir(path) as entries:
                if next(entries, None) is not None:
                    fail("exists and is not empty; give a new or empty folder")
        if kind.writable:
            if is_dir:
                problem = _write_problem(path)
            else:
                try:
                    open(path, "ab").close()  # appending nothing leaves the file as it is
                    problem = None
                except OSError as e:
                    problem = e.strerror or type(e).__name__
            if problem:
                fail(f"cannot be written ({problem})")
        return path, None
    if kind.must_exist:
        fail(f"{_kind_word(kind)} not found{_suggestion(path)}")
    if not (kind.writable or kind.create):  # read only when it is there
        return path, None
    # Missing, and made by the command: the folder itself, or the folder of a file.
    target = os.path.abspath(path) if kind.folder else os.path.dirname(os.path.abspath(path))
    if os.path.isdir(target):  # a file's folder that exists
        problem = _write_problem(target)
        if problem:
            fail(f"cannot write in {target} ({problem})")
        return path, None
    anchor = target if os.path.lexists(target) else _nearest_existing(target)
    if not os.path.isdir(anchor):
        fail(f"cannot create {'the folder' if kind.folder else 'its folder'}: {anchor} is a file")
    problem = _write_problem(anchor)
    if problem:
        fail(f"cannot create {'the folder' if kind.folder else 'its folder'} in {anchor} ({problem})")
    return path, target if kind.create else None


def _values(value: Any) -> list[str]:
    """The paths of one flag's value: None or ``""`` (not given) gives none, a list gives each item."""
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    return [os.fspath(v) for v in items if v is not None and os.fspath(v) != ""]


def is_output(kind: PathKind) -> bool:
    """Whether a path of ``kind`` is written by the command (an output: a folder or file it writes, creates or
    builds into); otherwise it is only read (an input)."""
    return kind.writable or kind.create


def _same_path(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one file or folder: the same path once links, ``.`` and ``..`` are resolved,
    or (both existing) the same inode, as a hard link or a bind mount is."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def _check_distinct(checked: list[tuple[str, str, str, PathKind]], reads: Iterable[tuple[str, str]]) -> None:
    """Refuses an output path that is an input path of the same command (the same file or folder).

    Args:
      checked: ``(flag, value as given, checked path, kind)`` of every path value.
      reads: ``(what, path)`` of files and folders the command reads without a flag of their own (a run
        folder's ``config.json``); compared when they exist.

    Raises:
      PathError: naming the output flag, the input it equals and why it is refused.
    """
    inputs = [(f"{flag} {given}", shutil.which(path) or path if kind.program and os.sep not in path else path,
               kind.folder) for flag, given, path, kind in checked if not is_output(kind)]
    inputs += [(what, path, None) for what, path in reads if path and os.path.lexists(path)]
    for flag, given, path, kind in checked:
        if not is_output(kind):
            continue
        for named, in_path, in_folder in inputs:
            if in_folder not in (None, kind.folder) or not _same_path(path, in_path):
                continue
            if kind.folder:
                raise PathError(f"{flag} {given}: is the same folder as {named}, an input of this command; the "
                                "output would be written among (and could replace) its files, so give another folder")
            raise PathError(f"{flag} {given}: is the same file as {named}, an input of this command; writing the "
                            "output would replace it, so give another path")


def check_paths(specs: Iterable[tuple[str, Any, PathKind]], reads: Iterable[tuple[str, str]] = ()) -> list[Any]:
    """Checks every ``(flag, value, kind)``, then that no output path is an input path, then creates the missing
    output folders.

    A value of None or ``""`` (the flag not given) is skipped; a list (``nargs``) is checked item by item; a
    value holding ``://`` (``gs://bucket/x``) is left to the library that opens it. An output (:func:`is_output`)
    that is the same file or folder as an input (links resolved; hard links found by inode) is refused: the
    command would replace what it reads. Nothing is created unless every path passes.

    Args:
      specs: ``(flag as the user types it, value, kind)`` for each path flag.
      reads: ``(what, path)`` of files or folders the command also reads without a flag of their own (a run
        folder's ``config.json``, named ``"the run's config.json"``): no output may be one of them.

    Returns:
      The values in order, with ``~`` expanded (lists stay lists, None stays None).

    Raises:
      PathError: the first path that cannot serve, named with its flag, or an output that is an input, named
        with both (nothing created).
    """
    specs = list(specs)
    out: list[Any] = []
    to_create: list[tuple[str, str, str]] = []
    seen: list[tuple[str, str, str, PathKind]] = []
    for flag, value, kind in specs:
        if not isinstance(kind, PathKind):
            raise TypeError(f"{flag}: kind must be a PathKind, got {kind!r}")
        checked = []
        for given in _values(value):
            if "://" in given:
                checked.append(given)
                continue
            path, folder = _check_one(flag, given, kind)
            checked.append(path)
            seen.append((flag, given, path, kind))
            if folder:
                to_create.append((flag, given, folder))
        if isinstance(value, (list, tuple)):
            out.append(checked)
        else:
            out.append(checked[0] if checked else value)
    _check_distinct(seen, reads)
    made = set()
    for flag, given, folder in to_create:
        if _create(flag, given, folder):
            made.add((flag, given))
    if os.environ.get(CHECK_ONLY_ENV, "") not in ("", "0"):
        shown = [f"{flag} {given}" + (" (created)" if (flag, given) in made else "")
                 for flag, value, _ in specs for given in _values(value)]
        print(f"paths ok: {', '.join(shown) or '(no path given)'}", file=sys.stderr, flush=True)
        raise SystemExit(0)
    return out


def _create(flag: str, given: str, folder: str) -> bool:
    """Creates ``folder`` with its missing parents, recording each for :func:`remove_created`; False when
    another process made it meanwhile."""
    missing, current = [], folder
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:  # made meanwhile by another process (several hosts share a run folder)
            if not os.path.isdir(d):
                remove_created()
                raise PathError(f"{flag} {given}: cannot create {d}: a file appeared there") from None
            continue
        except OSError as e:
            remove_created()
            raise PathError(f"{flag} {given}: cannot create {d} ({e.strerror or type(e).__name__})") from None
        _CREATED.append(d)
    return os.path.isdir(folder) and folder in _CREATED


def check_args(args: Any, flags: Mapping[str, PathKind],
               extra: Iterable[tuple[str, Any, PathKind]] = (), reads: Iterable[tuple[str, str]] = ()) -> list[Any]:
    """:func:`check_paths` of an argparse namespace's path flags, ``{"--flag": kind}``; the checked values
    (``~`` expanded) are written back into ``args``.

    Args:
      args: the parsed namespace; ``--flag``'s value is its attribute ``flag`` (``-`` read as ``_``).
      flags: the path flags whose namespace values are checked.
      extra: ``(flag, value, kind)`` checked in the same pass, for a value the command derives from a flag
        (a path inside ``LANG=PATH``, a flag that is a path only when it names no engine).
      reads: ``(what, path)`` the command reads without a flag (:func:`check_paths`).

    Returns:
      The checked values of ``extra``.

    Raises:
      PathError: the first path that cannot serve, or an output that is an input (nothing created).
      AttributeError: a flag that ``args`` does not have (a mistake in the table, not the user's).
    """
    dests = [flag.lstrip("-").replace("-", "_") for flag in flags]
    extra = list(extra)
    values = check_paths([*((flag, getattr(args, dest), kind) for (flag, kind), dest in zip(flags.items(), dests)),
                          *extra], reads)
    for dest, value in zip(dests, values):
        setattr(args, dest, value)
    return values[len(dests):]


def remove_created() -> list[str]:
    """Removes the folders the checks created that are still empty, deepest first; returns them.

    A folder that holds anything is kept (and so are its parents). Called when a command fails.
    """
    removed = []
    while _CREATED:
        d = _CREATED.pop()
        try:
            os.rmdir(d)
            removed.append(d)
        except OSError:  # not empty (the command wrote there) or gone: keep the rest as it is
            pass
    return removed

