"""Quiet start-up: keeps TensorFlow's C++ start-up notices out of a command's output.

TensorFlow is imported by TFDS and by ``clu.metric_writers``; this project computes nothing with it. At import,
TensorFlow 2.21 writes through absl's C++ logging before ``absl::InitializeLog()``, which ignores
``TF_CPP_MIN_LOG_LEVEL``: every command then started with four lines (twice "WARNING: All log messages before
absl::InitializeLog() ..." and "oneDNN custom operations are on ..."; on other builds the CPU feature guard's
"This TensorFlow binary is optimized ..."). :func:`import_tensorflow_quietly` imports TensorFlow once with the
process's standard error (file descriptor 2, where the C++ code writes) sent to a temporary file, then writes
back every line of it that is not one of those notices, so real errors and warnings are kept.

Importing TensorFlow costs 5-7 s of CPU, and most commands never need it (reading ``array_record`` files goes
through grain, TensorBoard events are written without it). The command-line tools therefore call
:func:`quiet_tensorflow_imports`: TensorFlow is imported only if something asks for it (a TFDS build,
``tfds``' TFRecord reader), and then quietly.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import sys
import tempfile

__all__ = ["TF_NOTICES", "import_tensorflow_quietly", "quiet_tensorflow_imports", "is_tf_notice"]

#: Substrings of TensorFlow's start-up notices (each a whole line, or its continuation line).
TF_NOTICES = (
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    "oneDNN custom operations are on",
    "This TensorFlow binary is optimized to use available CPU instructions",
    "To enable the following instructions:",
)


def is_tf_notice(line: str) -> bool:
    """True when ``line`` is one of TensorFlow's start-up notices (:data:`TF_NOTICES`)."""
    return any(n in line for n in TF_NOTICES)


def import_tensorflow_quietly() -> bool:
    """Imports TensorFlow (if installed and not yet imported) with its start-up notices filtered out.

    Also sets ``TF_CPP_MIN_LOG_LEVEL=2`` (when unset) for TensorFlow builds whose logging still reads it.
    Lines on standard error that are not notices (:func:`is_tf_notice`) are written back to it unchanged.

    Returns:
      True when this call imported TensorFlow; False when it was already imported or is not installed.

    Raises:
      Whatever ``import tensorflow`` raises (after standard error is restored and its lines written back).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return False
    with _notices_filtered():
        import tensorflow  # noqa: F401
    return True


@contextlib.contextmanager
def _notices_filtered():
    """Sends file descriptor 2 to a temporary file for the block, then writes back its lines that are not
    TensorFlow's start-up notices (also when the block raises)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().decode("utf-8", "replace").splitlines(True) if not is_tf_notice(ln)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` with the other finders and wraps its loading in :func:`_notices_filtered`; removes
    itself once used."""

    def find_spec(self, name, path=None, target=None):
        """The ``tensorflow`` package's spec with a quiet loader; None for every other module."""
        if name != "tensorflow":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            with _notices_filtered():
                run(module)

        spec.loader.exec_module = exec_module  # this spec's own loader object
        return spec


def quiet_tensorflow_imports() -> None:
    """From now on, the first ``import tensorflow`` of the process (by anything) has its start-up notices
    filtered out as in :func:`import_tensorflow_quietly`; nothing is imported now. Also sets
    ``TF_CPP_MIN_LOG_LEVEL=2`` when unset. Does nothing when TensorFlow is already imported or the hook is
    installed."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules or any(isinstance(f, _QuietTensorFlowFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _QuietTensorFlowFinder())
