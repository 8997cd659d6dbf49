"""The settings a run's files fix, checked against the run's ``config.json`` before it resumes or is scored again.

A run folder holds files made with the settings it started with: ``spm.model`` (the tokenizer settings), the
classifiers' ``answers.json`` (``model.num_answers``) and the checkpoints (the model's settings and the data its
steps were trained on, in the order of ``seed``). A resume with another ``tokenizer.vocab_size`` would keep the
old ``spm.model`` and say the new size in ``config.json``; another ``model.fusion`` would restore parameters
trained for the other fusion without a word. :func:`check_settings` compares the saved ``config.json`` with the
config given now over :data:`FIXED` (the keys each file fixes, once that file is there) and raises one
:class:`~openvivqa_jax.training.checkpoints.CheckpointMismatchError` naming each changed key, the run's value and
the new one, and how to start fresh (a new ``--workdir``). Keys under :data:`FREE` may change on a resume: how
the model computes (``dtype``, ``remat``, the attention kernel), the weights of training-only losses, dropout,
and pretrained files read only when a run starts. A key added since a run was made (:data:`ADDED_KEYS`) is
compared with the value such a run had.

A run writes its ``config.json`` before it makes its first file (:func:`write_initial_config`), so a run
stopped while its tokenizer or answer list was made is checked too; training rewrites it once the checkpoint
is known to fit (:mod:`openvivqa_jax.vqa.train`), so it stays the config the run uses.
"""

from __future__ import annotations

import json
import os
from typing import Any

from openvivqa_jax import outputs
from openvivqa_jax.jsonio import read_json
from openvivqa_jax.training.checkpoints import CheckpointMismatchError

__all__ = ["FIXED", "FREE", "EVALUATE_FREE", "ADDED_KEYS", "check_settings", "write_initial_config"]

#: ``(file or folder of the run, the config keys it fixes)``: a key under one of the prefixes is fixed once the
#: file is in the workdir (``checkpoints``: a saved step in ``checkpoints/`` or ``best/``).
FIXED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("spm.model", ("tokenizer",)),
    ("answers.json", ("model.num_answers",)),
    ("checkpoints", ("task", "seed", "model", "data.builder", "data.builder_config", "data.builder_kwargs",
                     "data.train_split", "data.train_kinds", "data.train_kind_weights", "data.image_size",
                     "data.max_ocr_pieces")),
)
#: Keys under :data:`FIXED` that may change on a resume: compute settings, loss weights of training-only losses,
#: dropout and the pretrained files read only when a run starts (its parameters then come from the checkpoint).
FREE: tuple[str, ...] = ("model.dtype", "model.remat", "model.remat_blocks", "model.attention_impl", "model.dropout",
                         "model.classifier_loss", "model.fasttext", "model.text_encoder.path",
                         "model.text_encoder.freeze", "model.vision.checkpoint", "model.counter.weight",
                         "model.counter.batch_size", "model.counter.learning_rate", "model.word_region_loss",
                         "model.visual_glimpses.count_loss")
#: Keys that ``--mode evaluate`` may change too: what was trained on, in which order and with which rate (scoring
#: reads the evaluation splits and the parameters only).
EVALUATE_FREE: tuple[str, ...] = ("seed", "data.builder", "data.builder_config", "data.builder_kwargs",
                                  "data.train_split", "data.train_kinds", "data.train_kind_weights",
                                  "model.verifier.decay_start")
#: Keys added after runs were made, with the value a run whose ``config.json`` lacks them was trained with: such
#: a run is compared as if its file said so. ``model.verifier.decay_start`` below 1 gives the verifier's optimizer
#: a step count that a run at a constant rate has not saved, so without this a resume would find none of its
#: checkpoints restoring and set them all aside.
ADDED_KEYS: dict[str, Any] = {"model.verifier.decay_start": 1.0}


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: leaf}`` of a JSON object (lists are leaves)."""
    if not isinstance(node, dict):
        return {prefix: node}
    out: dict[str, Any] = {}
    for k, v in node.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _shown(v: Any) -> str:
    """A value as the command line writes it (JSON lists as tuples)."""
    if isinstance(v, list):
        return "(" + ", ".join(_shown(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v)


def _has_step(folder: str) -> bool:
    return os.path.isdir(folder) and any(n.isdigit() for n in os.listdir(folder))


def _present(workdir: str) -> dict[str, bool]:
    """Which files of :data:`FIXED` the workdir holds."""
    return {"spm.model": os.path.isfile(os.path.join(workdir, "spm.model")),
            "answers.json": os.path.isfile(os.path.join(workdir, "answers.json")),
            "checkpoints": _has_step(os.path.join(workdir, "checkpoints")) or _has_step(os.path.join(workdir, "best"))}


def _answers_differ(workdir: str, saved_k: Any, new_k: Any) -> bool:
    """Whether ``model.num_answers = new_k`` builds another answer list than the run's ``answers.json`` (the run's
    ``config.json`` holds the list's length; the file, the number of distinct training answers when known)."""
    if not isinstance(new_k, int) or new_k == saved_k:
        return False
    try:
        data = read_json(os.path.join(workdir, "answers.json"))
    except ValueError:
        return new_k != saved_k
    size = len(data.get("answers", [])) if isinstance(data, dict) else saved_k
    distinct = data.get("distinct_answers") if isinstance(data, dict) else None
    if isinstance(distinct, int):
        return min(new_k, distinct) != size
    return new_k < size  # the list has more classes than asked for; a larger K may give the same list


def _with_added_keys(saved: dict[str, Any]) -> dict[str, Any]:
    """``saved`` (flat) with each key of :data:`ADDED_KEYS` it lacks, where it holds the key's section."""
    sections = {k.rsplit(".", 1)[0] for k in saved}
    return {**{k: v for k, v in ADDED_KEYS.items() if k.rsplit(".", 1)[0] in sections}, **saved}


def check_settings(cfg, workdir: str, mode: str = "train") -> None:
    """Compares ``cfg`` with the run's ``<workdir>/config.json`` over the keys its files fix (module doc).

    Args:
      cfg: the experiment config given now.
      workdir: the run folder (nothing is checked when it holds no ``config.json``).
      mode: ``"train"`` (a resume) or ``"evaluate"`` (keys of :data:`EVALUATE_FREE` may differ too).

    Raises:
      CheckpointMismatchError: one line naming each key that differs, the run's value and the new one, the files
        that fix them, and how to start a fresh run.
    """
    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        return
    try:
        saved = _flat(read_json(path))
    except ValueError:  # not a config this check can read; the restore's shape check still runs
        return
    new = _flat(json.loads(cfg.to_json_best_effort()))
    saved = _with_added_keys(saved)
    present = _present(workdir)
    free = FREE + (EVALUATE_FREE if mode == "evaluate" else ())
    changed: list[tuple[str, str, str]] = []
    files: list[str] = []
    for key in sorted(saved.keys() & new.keys()):
        fixing = [f for f, prefixes in FIXED if present[f] and _under(key, prefixes)]
        if not fixing or _under(key, free):
            continue
        if key == "model.num_answers":
            differs = _answers_differ(workdir, saved[key], new[key])
        else:
            differs = saved[key] != new[key]
        if differs:
            changed.append((key, _shown(new[key]), _shown(saved[key])))
            files += [f for f in fixing if f not in files]
    if not changed:
        return
    plural_files = len(files) > 1 or files == ["checkpoints"]
    made = f"its {' and '.join(files)} {'were' if plural_files else 'was'} made"
    if len(changed) == 1:
        (key, now, was), = changed
        raise CheckpointMismatchError(
            f"config value {key}={now} differs from the run's {was} ({path}), with which {made}: resume with the run's "
            "setting, or start a fresh run with the new one in another --workdir")
    listed = ", ".join(f"{key}={now} (the run's: {was})" for key, now, was in changed)
    raise CheckpointMismatchError(
        f"config values {listed} differ from the run's ({path}), with which {made}: resume with the run's settings, "
        "or start a fresh run with the new ones in another --workdir")


def write_initial_config(cfg, workdir: str) -> None:
    """Writes ``<workdir>/config.json`` for a run none of whose files is made yet (:data:`FIXED`: no tokenizer, no
    answer list, no checkpoint), before the first is made (:func:`openvivqa_jax.outputs.write_text`: whole or not
    at all); a run stopped while it made its tokenizer is then checked on its next start.

    Raises:
      openvivqa_jax.outputs.OutputWriteError: the file cannot be written (one line naming it and the cause).
    """
    path = os.path.join(workdir, "config.json")
    if os.path.exists(path) and any(_present(workdir).values()):
        return
    os.makedirs(workdir, exist_ok=True)
    outputs.write_text(path, cfg.to_json_best_effort(indent=2))
