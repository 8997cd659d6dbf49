"""The one command-line layer every entry point runs through: one ``error:`` line, Ctrl-C, quiet start-up.

:func:`run_main` runs an entry point's body (``main``, ``predict``, ``evaluate``, ``analyze``, ``plot``,
``param_count``, the fastText trainer; the benchmarks through :func:`run_script`) and

* turns a :class:`~openvivqa_jax.errors.UserError` (also one found in the ``__cause__``/``__context__`` chain
  of another exception, as Apache Beam re-raises worker errors) into one line on stderr,
  ``error: <ErrorClass>: <message>`` (or ``error: <message>`` for the commands whose documented lines carry no
  class name), and returns the error's exit code; the traceback is logged at debug level (``--verbosity=1``);
* handles Ctrl-C (SIGINT) and, where asked, SIGTERM (:mod:`openvivqa_jax.training.interrupts`): one ``interrupted ...``
  line and 130 / 143;
* keeps the output streams from ending a finished command with a traceback (:func:`safe_output_streams`):
  text that the terminal's encoding cannot show (``PYTHONIOENCODING=ascii``) is written with backslash escapes,
  and a write that standard output refuses (a full disk behind ``>``, ``> /dev/full``) is one
  :class:`~openvivqa_jax.outputs.OutputWriteError` line, as is a write that runs out of room anywhere
  (``ENOSPC``, ``EFBIG``, ``EDQUOT``) and names no file of its own;
* sets up the quiet start-up (:mod:`openvivqa_jax.quiet`): ``TF_CPP_MIN_LOG_LEVEL=2``, TensorFlow imported with
  its C++ notices filtered out, absl logging at a chosen level, Python warnings off, for the call only.

Anything that is not a user's error is a bug of the program and keeps its traceback.

The ``tfds build`` command line of tensorflow-datasets runs its own ``absl.app.run``; the builders register
:func:`install_tfds_cli_handler` there (absl's exception-handler hook, no ``sys.excepthook`` patch), which
prints the same one line for a user's error and exits with its code.
"""

from __future__ import annotations

import codecs
import os
import sys
import warnings
from collections.abc import Callable, Iterable

from absl import app, logging

from openvivqa_jax import outputs
from openvivqa_jax.errors import UserError
from openvivqa_jax.paths import remove_created
from openvivqa_jax.quiet import quiet_tensorflow_imports
from openvivqa_jax.training import interrupts

__all__ = ["run_main", "run_script", "error_line", "find_user_error", "print_error", "install_tfds_cli_handler",
           "exit_now", "safe_output_streams"]


def _one_line(text) -> str:
    return " ".join(str(text).split())


def error_line(error: BaseException, with_class: bool = True, name: str | None = None) -> str:
    """``error: <ErrorClass>: <message>`` (``error: <message>`` when not ``with_class``), whitespace squashed
    to single spaces so that a message is always one line. ``name`` replaces the class name."""
    head = f"{name or type(error).__name__}: " if with_class else ""
    return f"error: {head}{_one_line(error)}"


def print_error(message, with_class: bool = False) -> None:
    """Prints :func:`error_line` of ``message`` (an exception or a string) on stderr."""
    if isinstance(message, BaseException):
        print(error_line(message, with_class), file=sys.stderr)
    else:
        print(f"error: {_one_line(message)}", file=sys.stderr)


def _user_error_classes() -> list[type]:
    out, todo = [], [UserError]
    while todo:
        c = todo.pop()
        if c not in out:
            out.append(c)
            todo.extend(c.__subclasses__())
    return out


def find_user_error(exc: BaseException) -> tuple[type, str] | None:
    """The user's error in ``exc`` or its ``__cause__``/``__context__`` chain, as ``(error class, message)``;
    None when there is none.

    Also recognised: the text of an Apache Beam worker process's error, which reaches the driver as a traceback
    in the message of another exception, ending with ``<module>.<Class>: <message> [while running '<step>']``
    where ``<Class>`` is a :class:`~openvivqa_jax.errors.UserError`.
    """
    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        if isinstance(e, UserError):
            return type(e), str(e)
        lines = [x for x in str(e).splitlines() if x.strip()]
        if lines:
            for cls in _user_error_classes():
                prefix = f"{cls.__module__}.{cls.__qualname__}: "
                if lines[-1].startswith(prefix):
                    message = lines[-1][len(prefix):].split(" [while running ")[0]
                    return cls, message
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def run_main(body: Callable[[], int | None], *, verbose: bool = False, import_tensorflow: bool = False,
             log_level: int | None = None, quiet_warnings: bool = False, sigterm: bool = True,
             with_class: bool = True, squash: bool = True, exit_codes: dict[type, int] | None = None,
             on_interrupt: Callable[[], str] = lambda: "error: interrupted",
             handled: Iterable[type] = ()) -> int:
    """Runs an entry point's ``body`` with the project's one error path (module doc).

    Args:
      body: the command's work; returns its exit code (None: 0).
      verbose: the command's ``--verbose``: keeps the start-up notices, logging and warnings.
      import_tensorflow: unless ``verbose``, the first import of TensorFlow, if anything makes one, has its C++
        start-up notices filtered out (:func:`openvivqa_jax.quiet.quiet_tensorflow_imports`).
      log_level: unless ``verbose``, the absl logging verbosity during the call (e.g. ``logging.ERROR``).
      quiet_warnings: unless ``verbose``, ignore Python warnings during the call.
      sigterm: also turn SIGTERM into an interruption (False with several JAX processes, where SIGTERM is
        JAX's preemption notice, and for commands that keep the default SIGTERM).
      with_class: the ``error:`` line names the error's class (``error: ConfigError: ...``).
      squash: squash the message's whitespace into one line; False keeps lines a message adds on purpose
        (the main job's missing manual folder: the line, then the builder's download instructions).
      exit_codes: exit code per error class, over the class's own ``exit_code`` (the first class of the
        error's MRO found here wins): the file-reading commands document 2 for every unusable input.
      on_interrupt: the line printed after a Ctrl-C / SIGTERM outside the training loop.
      handled: other exception classes reported as a user's error (one line; exit code from ``exit_codes``
        or 1), for errors of libraries the command calls.

    Returns:
      The exit code: the body's; the error's (:attr:`UserError.exit_code`, or ``exit_codes``);
      :attr:`~openvivqa_jax.training.interrupts.TrainingInterrupted.exit_code`; 130 / 143 after a signal.

    When the command fails (a non-zero exit code, an interruption, a bug), the output folders that its path
    checks created and that are still empty are removed again (:func:`openvivqa_jax.paths.remove_created`).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow can be imported
    verbosity = logging.get_verbosity()
    handlers = interrupts.install(sigterm=sigterm)  # a Ctrl-C is never lost (openvivqa_jax.training.interrupts)
    safe_output_streams()
    stdout = sys.stdout
    sys.stdout = guard = outputs.GuardedStream(stdout)
    failed = True
    with warnings.catch_warnings():
        if not verbose:
            if quiet_warnings:
                warnings.simplefilter("ignore")
            if log_level is not None:
                logging.set_verbosity(log_level)
        try:
            if import_tensorflow and not verbose:
                quiet_tensorflow_imports()
            code = body()
            code = 0 if code is None else int(code)
            sys.stdout.flush()  # here, not at exit: a stream that refuses the text is the command's error
            failed = code != 0
            return code
        except SystemExit as e:  # sys.exit in the body, or the paths-only check (openvivqa_jax.paths)
            failed = e.code not in (None, 0)
            raise
        except interrupts.TrainingInterrupted as e:
            interrupts.ignore_further(sigterm)
            print(str(e), file=sys.stderr)
            return e.exit_code
        except KeyboardInterrupt:
            interrupts.ignore_further(sigterm)
            logging.debug("traceback of the interruption", exc_info=True)
            print(on_interrupt(), file=sys.stderr)
            return interrupts.EXIT_CODES[interrupts.received() or "SIGINT"]
        except Exception as e:  # noqa: BLE001 - a user's error gets one line, anything else is re-raised
            return _report(e, tuple(handled), squash, exit_codes or {}, with_class)
        finally:
            sys.stdout = stdout
            if guard.failed:
                _silence(stdout)
            if failed:  # a refused or failed command leaves no empty folder behind
                remove_created()
            interrupts.clear_received()
            interrupts.restore(handlers)
            logging.set_verbosity(verbosity)


def _report(e: Exception, handled: tuple, squash: bool, exit_codes: dict, with_class: bool) -> int:
    """Prints the one line of :func:`run_main` for ``e`` and returns the exit code; re-raises ``e`` when it is
    no user's error (nor of ``handled``, nor a write that ran out of room)."""
    found = find_user_error(e)
    if found is None and isinstance(e, OSError) and e.errno in outputs.SPACE_ERRNOS:
        found = (outputs.OutputWriteError, f"could not write {e.filename or 'an output file'}: {e.strerror}")
    if found is None and not isinstance(e, handled):
        raise e
    logging.debug("traceback of the error below", exc_info=True)
    cls, message = found or (type(e), str(e))
    message = _one_line(message) if squash else message.strip()
    code = next((exit_codes[c] for c in cls.__mro__ if c in exit_codes), getattr(cls, "exit_code", 1))
    print(f"error: {cls.__name__}: {message}" if with_class else f"error: {message}", file=sys.stderr)
    return code


#: The error handler :func:`safe_output_streams` gives standard output and standard error.
ESCAPE_ERRORS = "openvivqa-json-escape"


def _json_escape(err: UnicodeEncodeError) -> tuple[str, int]:
    """Writes each character the stream's encoding cannot hold as JSON's ``\\uXXXX`` escape (a surrogate pair
    above U+FFFF): readable text stays readable, and JSON printed on such a stream stays valid JSON that
    decodes to the same text (``\\xe0``, Python's ``backslashreplace``, is not JSON)."""
    out = []
    for ch in err.object[err.start:err.end]:
        cp = ord(ch)
        if cp > 0xFFFF:
            cp -= 0x10000
            out.append(f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}")
        else:
            out.append(f"\\u{cp:04x}")
    return "".join(out), err.end


codecs.register_error(ESCAPE_ERRORS, _json_escape)


def safe_output_streams() -> None:
    """Makes standard output and standard error write what their encoding cannot hold as ``\\uXXXX`` escapes
    (:data:`ESCAPE_ERRORS`) instead of raising ``UnicodeEncodeError``: under ``PYTHONIOENCODING=ascii`` or an
    ASCII locale a Vietnamese answer is printed escaped (``c\\u1eeda h\\u00e0ng``), after the work it ends is
    done, and ``--json`` output stays valid JSON. A stream set to another handler than ``strict``
    (``backslashreplace``, what Python gives standard error) or without ``reconfigure`` (a test's capture) is
    left as it is."""
    for stream in (sys.stdout, sys.stderr):
        stream = getattr(stream, "wrapped", stream)
        try:
            if getattr(stream, "errors", None) in ("strict", "backslashreplace"):
                stream.reconfigure(errors=ESCAPE_ERRORS)
        except (AttributeError, ValueError, OSError):
            pass


def _silence(stream) -> None:
    """Points the file descriptor of ``stream`` (standard output that refused a write) at ``/dev/null``, so that
    Python's flush at exit does not print ``Exception ignored`` after the command's one error line."""
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (AttributeError, ValueError, OSError):
        pass


def run_script(main: Callable[[], object], **kwargs) -> int:
    """:func:`run_main` for a script whose ``main()`` returns its result (a dict, already printed) or its exit
    code (an int); returns the exit code. The benchmarks end with ``sys.exit(run_script(main))``.

    Keyword arguments: those of :func:`run_main`; ``sigterm`` defaults to False (a benchmark keeps the default
    SIGTERM, which ends it and the worker processes it waits for).
    """
    def body() -> int:
        out = main()
        return out if isinstance(out, int) and not isinstance(out, bool) else 0

    return run_main(body, **{"sigterm": False, **kwargs})


def install_tfds_cli_handler() -> bool:
    """Makes the ``tfds build`` command line report a user's error as one ``error: <Class>: <message>`` line.

    ``tfds build`` runs ``absl.app.run``, which hands an escaping exception to the handlers registered with
    ``absl.app.install_exception_handler`` and then re-raises it (Python would print a 19-frame traceback).
    The handler registered here prints the line for a user's error (:func:`find_user_error`: also one that
    Apache Beam re-raised, or a worker's traceback text) and ends the process with the error's exit code
    (``os._exit`` after flushing: absl calls the handlers inside its own ``except`` clause and catches a
    ``SystemExit`` they raise); any other exception keeps absl's behaviour and its traceback. Registered once,
    and only under the ``tfds`` command line (``tensorflow_datasets.scripts.cli.main`` imported).

    Returns:
      Whether the handler is (now) registered.
    """
    if "tensorflow_datasets.scripts.cli.main" not in sys.modules:
        return False
    if any(isinstance(h, _TfdsCliHandler) for h in app.EXCEPTION_HANDLERS):
        return True
    app.install_exception_handler(_TfdsCliHandler())
    return True


class _TfdsCliHandler(app.ExceptionHandler):
    """absl exception handler of the ``tfds`` command line (:func:`install_tfds_cli_handler`)."""

    def wants(self, exc) -> bool:
        return isinstance(exc, Exception) and find_user_error(exc) is not None

    def handle(self, exc) -> None:
        cls, message = find_user_error(exc)
        print(f"error: {cls.__name__}: {_one_line(message)}", file=sys.stderr)
        exit_now(cls.exit_code)


def exit_now(code: int) -> None:
    """Flushes stdout, stderr and absl's log, then ends the process with ``code`` at once."""
    try:
        logging.flush()
    except Exception:  # noqa: BLE001 - exiting anyway
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)
