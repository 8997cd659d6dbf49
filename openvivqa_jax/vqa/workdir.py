"""What a run folder (``workdir``) must hold to be answered from, and its config; no JAX imported here, so the
command-line tools check a workdir before JAX starts.

A workdir holds ``config.json`` (the resolved config), ``spm.model`` (the tokenizer), for classifiers
``answers.json``, and orbax checkpoints in ``best/<step>/`` and ``checkpoints/<step>/`` (see
:mod:`openvivqa_jax.vqa.train`).
"""

from __future__ import annotations

import os

import ml_collections

from openvivqa_jax.errors import UserError
from openvivqa_jax.evaluation.formats import InputError
from openvivqa_jax.evaluation.questions import image_folders, read_json_file

__all__ = ["RunFolderError", "RUN_FILES", "check_workdir", "load_config", "answering_reads"]

#: The files and folders of a run that answering from it reads.
RUN_FILES = ("config.json", "spm.model", "answers.json", "checkpoints", "best")


class RunFolderError(UserError, FileNotFoundError):
    """A run folder that cannot be answered or scored from: not there, or without its config, tokenizer or a
    checkpoint (one line naming the folder and what is missing)."""


def _has_step(d: str) -> bool:
    return os.path.isdir(d) and any(n.isdigit() and os.path.isdir(os.path.join(d, n)) for n in os.listdir(d))


def check_workdir(workdir: str) -> None:
    """Checks that ``workdir`` can be answered from: ``config.json``, ``spm.model`` and a checkpoint step in
    ``best/`` or ``checkpoints/``.

    Raises:
      RunFolderError: naming the workdir and what is missing (one line).
    """
    if not os.path.isdir(workdir):
        raise RunFolderError(f"workdir {workdir}: not found")
    for name, what in (("config.json", "the run's config"), ("spm.model", "the tokenizer")):
        if not os.path.isfile(os.path.join(workdir, name)):
            raise RunFolderError(f"workdir {workdir}: no {name} ({what}); is it a training run folder?")
    if not (_has_step(os.path.join(workdir, "best")) or _has_step(os.path.join(workdir, "checkpoints"))):
        raise RunFolderError(f"workdir {workdir}: no checkpoint (best/ and checkpoints/ hold no saved step); "
                                "train first")


def load_config(workdir: str):
    """``<workdir>/config.json`` as an ``ml_collections.ConfigDict`` (JSON lists become tuples again).

    Raises:
      openvivqa_jax.evaluation.formats.InputError: the file is unreadable, invalid JSON or not a run config
        (no ``model`` section); the message names the file.
    """
    path = os.path.join(workdir, "config.json")
    raw = read_json_file(path, "")
    if not isinstance(raw, dict) or "model" not in raw:
        raise InputError(f"{path}: not a run config (no 'model' section)")
    return ml_collections.ConfigDict(_tuplify(raw))


def _tuplify(x):
    """JSON lists back to the config's tuples (recursively)."""
    if isinstance(x, dict):
        return {k: _tuplify(v) for k, v in x.items()}
    if isinstance(x, list):
        return tuple(_tuplify(v) for v in x)
    return x


def answering_reads(workdir: str, questions: str | None, image_dir: str | None) -> list[tuple[str, str]]:
    """What answering questions from the run in ``workdir`` reads without a flag of its own, as ``(what, path)``
    for :func:`openvivqa_jax.paths.check_paths`'s ``reads`` (no output may replace them): the run's
    :data:`RUN_FILES` and, for a ``questions`` file without an ``image_dir``, the folders its images are looked
    up in (:func:`~openvivqa_jax.evaluation.questions.image_folders`)."""
    folder = os.path.expanduser(workdir)
    reads = [(f"the run's {name} in --workdir {workdir}", os.path.join(folder, name)) for name in RUN_FILES]
    if questions and not image_dir:
        reads += [(f"the image folder {f} of --questions", f) for f in image_folders(os.path.expanduser(questions), None)]
    return reads
