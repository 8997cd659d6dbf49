"""Every output file the project writes: written whole under a temporary name, then renamed into place.

A file written in place and cut short (a full disk, a file-size limit, a kill) leaves a 0-byte or half file
where the earlier one was. :func:`atomic_write` writes into a temporary file in the target's folder (so that
the rename stays on one file system), flushes it to disk (``fsync``) and renames it over the target with
``os.replace``, which POSIX makes atomic: a reader sees the old file or the new one, never a part. When the
write fails, the temporary file is removed, the old file is left as it was, and one
:class:`OutputWriteError` names the file and the operating system's reason::

    could not write --output runs/x/submission.json: No space left on device

Every writer of the tools goes through here (predictions, metrics and ``--json`` files, the submission and
its ``.skipped.json``, ``config.json``, ``spm.model``, the answer list, the analysis outputs and figures,
``--plot`` pictures); orbax writes the checkpoints the same way (a temporary folder renamed when complete).
The append-only logs (``metrics.jsonl``, TensorBoard events) cannot be replaced whole; a failed append is
one :class:`OutputWriteError` too (:func:`write_error`), and their readers skip a line cut short.

:class:`GuardedStream` does the same for standard output: a write into a full or closed stream (``>
/dev/full``, a full disk behind a redirection) becomes one :class:`OutputWriteError` naming the stream,
instead of a traceback or Python's ``Exception ignored`` at exit.

Only the standard library is imported here.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import IO, Any

from openvivqa_jax.errors import UserError

__all__ = ["OutputWriteError", "atomic_write", "write_json", "write_text", "write_bytes", "save_figure",
           "write_error", "os_reason", "GuardedStream", "WRITE_ERRNOS", "SPACE_ERRNOS"]

#: Errors of writing that are the machine's or the user's (space, size limits, permissions, names), never a
#: bug of the program: reported in one line wherever they surface.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                          errno.ENAMETOOLONG, errno.EIO, errno.EPIPE, errno.ENOENT, errno.ENOTDIR,
                          errno.EISDIR})


#: Errors of a write that ran out of room (a full disk, a file-size limit, a quota): reported in one line by
#: the command-line layer wherever a write raises them, since no file name may be attached.
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


class OutputWriteError(UserError):
    """An output file (or stream) could not be written; the message names it and the operating system's
    reason. The old file, if any, is left as it was (:func:`atomic_write`)."""


def os_reason(e: BaseException) -> str:
    """The operating system's reason in ``e``: ``strerror`` of an ``OSError`` (``No space left on device``),
    else the first such reason named in the text of a library's error (TensorStore and orbax quote it), else
    the error's first line (at most 200 characters)."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = " ".join(str(e).split()) or type(e).__name__
    for code in sorted(WRITE_ERRNOS):
        reason = os.strerror(code)
        if reason in text:
            return reason
    return text if len(text) <= 200 else text[:197] + "..."


def write_error(path: str | os.PathLike, e: BaseException, what: str = "") -> OutputWriteError:
    """The :class:`OutputWriteError` for a failed write of ``path`` (``what``: how the user names it, e.g.
    ``--output``; it is put before the path)."""
    where = f"{what} {os.fspath(path)}" if what else os.fspath(path)
    return OutputWriteError(f"could not write {where}: {os_reason(e)}")


def _new_file_mode(path: str) -> int:
    """The mode the written file gets: the old file's, else what ``open()`` would give (0o666 less the umask)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _special(path: str) -> bool:
    """Whether ``path`` exists and is not a regular file or folder (a device such as ``/dev/null``, a FIFO, a
    socket, ``/dev/stdout``): renaming a file over it would replace the device itself."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode))


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, what: str = "",
                 encoding: str = "utf-8") -> Iterator[IO[Any]]:
    """Opens a temporary file beside ``path`` for writing; when the block ends without an error, the file is
    flushed to disk and renamed to ``path`` (replacing an old file at once); when it fails, the temporary file
    is removed and the old file is left as it was.

    Args:
      path: the file to write. A symbolic link is followed (the file it names is replaced, the link kept); a
        device or FIFO (``/dev/stdout``, ``/dev/null``) is written in place.
      mode: ``"w"`` (text, ``encoding``) or ``"wb"`` (bytes).
      what: how the user names the file in the error (``--output``, ``the checkpoint's config``).
      encoding: of a text file.

    Yields:
      The open temporary file.

    Raises:
      OutputWriteError: the file cannot be created, written or renamed (no space, a size limit, a name too
        long, no permission); the message names ``path`` and the reason. Other errors of the block are raised
        as they are (after the temporary file is removed).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    path = os.fspath(path)
    if _special(path):  # /dev/stdout, /dev/null, a FIFO: written in place, never replaced by a file
        try:
            with open(path, mode, **({} if "b" in mode else {"encoding": encoding})) as f:
                yield f
        except OSError as e:
            raise write_error(path, e, what) from e
        return
    target = os.path.realpath(path) if os.path.islink(path) else path
    folder, name = os.path.split(os.path.abspath(target))
    try:
        # A short temporary name: one made from a long file name could pass the name limit the target keeps.
        fd, tmp = tempfile.mkstemp(prefix=f".{name[:40]}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise write_error(path, e, what) from e
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": encoding})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _new_file_mode(target))
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise write_error(path, e, what) from e
        raise


def write_json(path: str | os.PathLike, obj: Any, *, what: str = "", indent: int | None = None,
               ensure_ascii: bool = False, newline: bool = False, **dumps_kwargs) -> None:
    """Writes ``obj`` as UTF-8 JSON to ``path`` through :func:`atomic_write` (``indent``, ``ensure_ascii`` and
    ``dumps_kwargs`` as ``json.dumps`` takes them; ``newline``: end the file with a line break).

    The text is made before the file is opened, so an object JSON cannot hold (a ``TypeError``) leaves no file.

    Raises:
      OutputWriteError: the file cannot be written (:func:`atomic_write`).
    """
    text = json.dumps(obj, ensure_ascii=ensure_ascii, indent=indent, **dumps_kwargs) + ("\n" if newline else "")
    write_text(path, text, what=what)


def write_text(path: str | os.PathLike, text: str, *, what: str = "", encoding: str = "utf-8") -> None:
    """Writes ``text`` to ``path`` through :func:`atomic_write`.

    Raises:
      OutputWriteError: the file cannot be written.
    """
    with atomic_write(path, "w", what=what, encoding=encoding) as f:
        f.write(text)


def save_figure(fig, path: str | os.PathLike, *, what: str = "", **savefig_kwargs) -> None:
    """Saves a matplotlib figure as PNG to ``path`` through :func:`atomic_write` (``savefig_kwargs`` as
    ``Figure.savefig`` takes them, e.g. ``bbox_inches="tight"``).

    Raises:
      OutputWriteError: the file cannot be written.
    """
    with atomic_write(path, "wb", what=what) as f:
        fig.savefig(f, format="png", **savefig_kwargs)


def write_bytes(path: str | os.PathLike, data: bytes, *, what: str = "") -> None:
    """Writes ``data`` to ``path`` through :func:`atomic_write`.

    Raises:
      OutputWriteError: the file cannot be written.
    """
    with atomic_write(path, "wb", what=what) as f:
        f.write(data)


class GuardedStream:
    """A text stream (standard output) whose failed writes raise :class:`OutputWriteError` naming the stream
    (``could not write to standard output: No space left on device``) instead of ``OSError``; everything
    else is the wrapped stream's.

    Args:
      stream: the stream wrapped (``sys.stdout``).
      name: how the error names it.
    """

    def __init__(self, stream: IO[str], name: str = "standard output"):
        self._stream = stream
        self._name = name
        #: Whether a write or flush failed.
        self.failed = False

    @property
    def wrapped(self) -> IO[str]:
        """The wrapped stream."""
        return self._stream

    def _failed(self, e: OSError) -> OutputWriteError:
        self.failed = True
        return OutputWriteError(f"could not write to {self._name}: {os_reason(e)}")

    def write(self, text: str) -> int:
        """Writes ``text``.

        Raises:
          OutputWriteError: the stream refused it.
        """
        try:
            return self._stream.write(text)
        except OSError as e:
            raise self._failed(e) from e

    def writelines(self, lines) -> None:
        """Writes each of ``lines``.

        Raises:
          OutputWriteError: the stream refused one.
        """
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Flushes the stream.

        Raises:
          OutputWriteError: the stream refused the buffered text.
        """
        try:
            self._stream.flush()
        except OSError as e:
            raise self._failed(e) from e

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
