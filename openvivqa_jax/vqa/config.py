"""The answer-generation task's config beyond the ranges of :mod:`openvivqa_jax.config_check`: the weights of
``data.train_kind_weights`` (:func:`parse_kind_weights`) and the plan of ``config.evals``, the evaluations after
training (the pattern of big_vision's ``config.evals``), which :mod:`openvivqa_jax.vqa.evals` runs.

``config.evals`` is a ``ConfigDict`` of named entries (``ConfigDict(sort_keys=False)`` keeps their order), run
with the best checkpoint's parameters at the end of training and by ``--mode evaluate``: the decode entries in
their order, then the reports over them. An entry's name is its role: it names the files
``eval/<name>_metrics.json`` and ``eval/<name>_predictions.json``, the ``<name>/<metric>`` keys of
``metrics.jsonl`` and the TensorBoard tags. Every entry has a ``kind`` and may set ``enabled`` (default True;
``configs/default.py`` ties the OCR ablation's to ``eval.ocr_ablation``). The kinds and their fields:

* ``decode``: decode one split and score it (the metrics of ``eval.metrics``, the decoding of ``eval``).

  - ``split``: a split key of ``config.data`` (``eval_split``, ``test_split``), else a split of the dataset
    (``"validation"``, ``"train[:5%]"``);
  - ``mask_ocr`` (False): every OCR token masked out, to measure what the answers owe to scene text;
  - ``print_examples`` (0): print this many example answers under the table;
  - ``tensorboard`` (False): also write the overall scores to TensorBoard (the periodic dev scores are written
    there during training).

  Two decode entries with the same split and masking are scored once, under the later name (a dataset whose
  dev and test split are one is scored once, as ``test``); the one skipped is logged.
* ``copy_rate``: on the synthetic set, the share of shop-name questions whose answer copies the whole unseen
  name (:func:`openvivqa_jax.evaluation.copying.shop_name_copy_rate`), for each decode entry named in ``of``
  that has such questions; added to that entry's metrics file as ``shop_name_copy_rate`` and to
  ``metrics.jsonl`` (and TensorBoard, when the decode entry goes there) as ``<name>/shop_name_copy_rate``.
* ``ocr_ratio``: text-QA CIDEr of the decode entry ``with_ocr`` over that of ``without_ocr`` (the OCR
  ablation), as ``<with_ocr>/text_qa_cider_ocr_ratio`` in the same places.

The ``metrics.jsonl`` records are of kind ``final`` at the end of training and ``evaluate`` for a later
``--mode evaluate``.

:func:`plan` checks every entry (unknown kinds or fields, references to names that are not decode
entries) with no dataset or model built; it runs in :func:`openvivqa_jax.config_check.check_config`. Nothing
heavy is imported here.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from absl import logging

from openvivqa_jax.errors import ConfigError

__all__ = ["KINDS", "EvalSpec", "plan", "split_fields", "deduplicated", "parse_kind_weights"]

#: Each kind's fields and their defaults (``kind`` and ``enabled`` are common to all).
KINDS: dict[str, dict[str, Any]] = {
    "decode": {"split": "", "mask_ocr": False, "print_examples": 0, "tensorboard": False},
    "copy_rate": {"of": ()},
    "ocr_ratio": {"with_ocr": "", "without_ocr": ""},
}


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """One checked, enabled entry of ``config.evals`` (the fields of other kinds keep their defaults).

    Attributes:
      name: the entry's name (its role in file names, ``metrics.jsonl`` and TensorBoard).
      kind: one of :data:`KINDS`.
      split: decode: the dataset's split (a ``config.data`` key resolved).
      split_field: decode: the config field that names the split (``data.test_split``, ``evals.<name>.split``).
      mask_ocr, print_examples, tensorboard: decode fields (module doc).
      of: copy_rate: the decode entries whose copy rate is reported.
      with_ocr, without_ocr: ocr_ratio: the two decode entries compared.
    """

    name: str
    kind: str
    split: str = ""
    split_field: str = ""
    mask_ocr: bool = False
    print_examples: int = 0
    tensorboard: bool = False
    of: tuple[str, ...] = ()
    with_ocr: str = ""
    without_ocr: str = ""


def _fields(name: str, entry: Any) -> tuple[str, bool, dict]:
    """``(kind, enabled, fields with defaults)`` of one entry of ``config.evals``.

    Raises:
      ConfigError: not a dict, an unknown kind or an unknown field.
    """
    where = f"config value evals.{name}"
    if not hasattr(entry, "items"):
        raise ConfigError(f"{where}={entry!r} must be a dict with a 'kind' (one of {', '.join(KINDS)}); entries are "
                     "set in the config file")
    entry = dict(entry.items())
    kind = entry.pop("kind", None)
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind={kind!r} is unknown: must be one of {', '.join(repr(k) for k in KINDS)} "
                     f"(set it with --config.evals.{name}.kind=...)")
    enabled = bool(entry.pop("enabled", True))
    unknown = sorted(set(entry) - set(KINDS[kind]))
    if unknown:
        raise ConfigError(f"{where} has no field {unknown[0]!r} (a {kind!r} entry has: enabled, "
                     f"{', '.join(KINDS[kind])}; entries are set in the config file)")
    return kind, enabled, {**KINDS[kind], **entry}


def _decode_spec(cfg, name: str, fields: dict) -> EvalSpec:
    """A decode entry with its split resolved against ``config.data``.

    Raises:
      ConfigError: the split (or the ``config.data`` key it names) is empty.
    """
    split = str(fields["split"] or "")
    if not split:
        raise ConfigError(f"config value evals.{name}.split is empty: name a split key of config.data (eval_split, "
                     f"test_split) or a split of the dataset (set it with --config.evals.{name}.split=...)")
    data = cfg.get("data") or {}
    if split.endswith("_split") and split in data:
        resolved, field = data.get(split), f"data.{split}"
        if not resolved:
            raise ConfigError(f"config value evals.{name}.split={split!r} names config.data.{split}, which is empty "
                         f"(set it with --config.data.{split}=...)")
    else:
        resolved, field = split, f"evals.{name}.split"
    return EvalSpec(name, "decode", split=str(resolved), split_field=field, mask_ocr=bool(fields["mask_ocr"]),
                    print_examples=int(fields["print_examples"]), tensorboard=bool(fields["tensorboard"]))


def plan(cfg) -> list[EvalSpec]:
    """The enabled entries of ``config.evals``, checked (module doc): the decode entries in their order, then
    the reports (``copy_rate``, ``ocr_ratio``) in theirs; a config without ``evals`` runs none.

    Raises:
      ConfigError: an entry that is not a dict, an unknown kind or field, an empty split, or a reference
        (``of``, ``with_ocr``, ``without_ocr``) that is not the name of a decode entry (a disabled one is
        allowed: the report then skips it).
    """
    evals = cfg.get("evals")
    if not evals:
        return []
    entries = [(name, *_fields(name, entry)) for name, entry in evals.items()]
    decode_names = [name for name, kind, _, _ in entries if kind == "decode"]
    specs: list[EvalSpec] = []
    reports: list[EvalSpec] = []
    for name, kind, enabled, fields in entries:
        if kind == "decode":
            if enabled:
                specs.append(_decode_spec(cfg, name, fields))
            continue
        if kind == "copy_rate":
            of = fields["of"]
            refs = [("of", n) for n in ((of,) if isinstance(of, str) else tuple(of))]
            spec = EvalSpec(name, kind, of=tuple(n for _, n in refs))
        else:
            refs = [("with_ocr", str(fields["with_ocr"])), ("without_ocr", str(fields["without_ocr"]))]
            spec = EvalSpec(name, kind, with_ocr=refs[0][1], without_ocr=refs[1][1])
        for field, ref in refs:
            if ref not in decode_names:
                raise ConfigError(f"config value evals.{name}.{field}={ref!r} names no decode entry of config.evals "
                             f"(they are: {', '.join(decode_names) or 'none'}; set it with "
                             f"--config.evals.{name}.{field}=...)")
        if enabled:
            reports.append(spec)
    specs += reports
    return specs


def split_fields(cfg) -> dict[str, str]:
    """``{config field: split}`` of the decode entries of :func:`plan` (for the dataset's split check)."""
    return {s.split_field: s.split for s in plan(cfg) if s.kind == "decode"}


def deduplicated(specs: list[EvalSpec]) -> list[EvalSpec]:
    """``specs`` without the decode entries that a later entry scores again (same split and masking)."""
    out = []
    for i, s in enumerate(specs):
        later = [t for t in specs[i + 1:] if t.kind == "decode" and s.kind == "decode"
                 and (t.split, t.mask_ocr) == (s.split, s.mask_ocr)]
        if later:
            logging.info("evals.%s: split %s is scored once, as %s", s.name, s.split, later[-1].name)
            continue
        out.append(s)
    return out


def parse_kind_weights(spec: str) -> dict[str, int]:
    """Parses ``data.train_kind_weights``: ``"colour=4,count=3"`` -> ``{"colour": 4, "count": 3}``.

    Each weight is how many times every training question of that template kind appears in one epoch of the
    shuffled stream (0 leaves the kind out); kinds not named keep weight 1
    (:func:`openvivqa_jax.data.records.kind_weighted_indices`). An empty string means no weights.

    Raises:
      ConfigError: an item is not ``kind=integer`` with an integer >= 0, or a kind is named twice (one line
        quoting the item and naming the flag).
    """
    weights: dict[str, int] = {}
    for item in (x.strip() for x in str(spec or "").split(",")):
        if not item:
            continue
        kind, sep, value = (x.strip() for x in item.partition("="))
        if not sep or not re.fullmatch(r"\w+", kind) or not re.fullmatch(r"\d+", value):
            raise ConfigError(f"config value data.train_kind_weights={spec!r}: item {item!r} is not kind=weight "
                              "with a whole number weight >= 0, e.g. 'colour=4,count=3' (set it with "
                              "--config.data.train_kind_weights=...)")
        if kind in weights:
            raise ConfigError(f"config value data.train_kind_weights={spec!r} names {kind!r} twice (set it with "
                              "--config.data.train_kind_weights=...)")
        weights[kind] = int(value)
    return weights
