"""The release annotation format of OpenViVQA and EVJVQA (one JSON file per split with an ``images`` table and
``annotations``), read as published: its repeated ids repaired by the rule of
:class:`openvivqa_jax.data.repairs.RepeatedIds`.

Both forms are read: the public dict form ``{"images": {id: file}, "annotations": {qid: {...}}}`` and the list
form ``{"images": [{id, filename}], "annotations": [{id, ...}]}``. A question id repeated (as a JSON key of the
dict form, or listed twice, also across the files of a split) is renamed ``<id>#<n>`` when it carries another
question (image or question text), dropped when the record is an exact duplicate, and an error when it repeats the
question with other answers; each repair is counted and logged (the builder's ``strict`` refuses them). An image
id listed twice with the same file name is an exact duplicate (dropped, counted); with another file name it is an
error (which file is meant cannot be told), or under ``skip_invalid_records`` the first entry is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openvivqa_jax.data import repairs
from openvivqa_jax.jsonio import json_kind
from tfds_builders.readers import DatasetInputError, ErrorPolicy, UnknownFields, read_json, record_error

__all__ = ["read_release_file"]


def read_release_file(path: Path, *, dataset: str, policy: ErrorPolicy, unknown: UnknownFields,
                      top_fields: Sequence[str], image_fields: Sequence[str],
                      ids: repairs.RepeatedIds) -> tuple[dict[str, str], list]:
    """The images and annotations of a release-format annotation file (module doc).

    Args:
      path: the JSON file.
      dataset: the format's name for the top-level error (``"OpenViVQA"``).
      policy: raises record errors, or counts and skips them.
      unknown: counts the fields the builder does not store.
      top_fields, image_fields: the fields of the top level and of a list-form image entry.
      ids: the split's repeated-id rule (one for all files of a split), with its repair log.

    Returns:
      ``(images, annotations)``: image id -> file name, and ``[(question id, record label, raw record)]`` in
      file order (the repeats of a repeated JSON key after the others), each question id once: a renamed
      question under its new id, labelled ``question <id> (renamed <new id>)``.

    Raises:
      DatasetInputError: bad JSON or top-level structure, an image entry without an id or a file name
        (always); an image id listed with two file names, a question id repeating a question with other
        answers, an annotation without an id, a flaw under ``strict`` (unless skipped).
    """
    data = read_json(path)
    if not isinstance(data, dict) or "images" not in data or "annotations" not in data:
        raise DatasetInputError(
            f"{path}: expected an object with 'images' and 'annotations' ({dataset} format), got "
            f"{json_kind(data)}{' with keys ' + str(sorted(data)) if isinstance(data, dict) else ''}")
    unknown.check(data, top_fields, path=path)
    return (_release_images(path, data["images"], policy, unknown, image_fields, ids.log),
            _release_annotations(path, data["annotations"], policy, ids))


def _release_images(path: Path, images_raw: Any, policy: ErrorPolicy, unknown: UnknownFields,
                    image_fields: Sequence[str], log: repairs.RepairLog) -> dict[str, str]:
    """Image id -> file name of a release file's ``images`` (:func:`read_release_file`)."""
    if isinstance(images_raw, dict):
        entries = [(f"image {k!r}", k, v, "") for k, v in images_raw.items()]
        entries += [(f"image {k!r}", k, v, " (a repeated JSON key)") for k, v in getattr(images_raw, "duplicates", [])]
    elif isinstance(images_raw, list):
        entries = []
        for i, e in enumerate(images_raw):
            if not isinstance(e, dict) or "id" not in e:
                raise record_error(path, f"images[{i}]", f"expected {{id, filename}}, got {e!r}"[:300])
            unknown.check(e, image_fields, path=path)
            entries.append((f"images[{i}] (image {e['id']!r})", e["id"], e.get("filename", e.get("file_name")), ""))
    else:
        raise DatasetInputError(f"{path}: 'images' must be an object or a list, got {json_kind(images_raw)}")
    images: dict[str, str] = {}
    for where, k, name, how in entries:
        if not isinstance(name, str) or not name.strip():
            raise record_error(path, where, f"file name {name!r} is not a non-empty string")
        if str(k) not in images:
            images[str(k)] = name
        elif images[str(k)] == name:
            log.apply("exact_duplicate_dropped", path, f"image {k}", record=where,
                      what=f"image id repeated in 'images'{how} with the same file name")
        else:
            policy.handle("duplicate_image_id", record_error(
                path, where, f"image id repeated in 'images'{how} with another file name ({images[str(k)]!r}, "
                f"{name!r}); skip_invalid_records keeps the first entry"))
    return images


def _release_annotations(path: Path, anns_raw: Any, policy: ErrorPolicy, ids: repairs.RepeatedIds) -> list:
    """``[(question id, record label, raw record)]`` of a release file's ``annotations``, each id once
    (:func:`read_release_file`)."""
    if isinstance(anns_raw, dict):
        listed = [(str(k), a) for k, a in anns_raw.items()] + [(str(k), a) for k, a in getattr(anns_raw, "duplicates", [])]
    elif isinstance(anns_raw, list):
        listed = []
        for i, a in enumerate(anns_raw):
            qid = a.get("id", a.get("question_id")) if isinstance(a, dict) else None
            if qid is None or isinstance(qid, (dict, list, bool)):
                policy.handle("invalid_record", record_error(
                    path, f"annotations[{i}]", f"expected an object with an 'id', got {a!r}"[:300]))
                continue
            listed.append((str(qid), a))
    else:
        raise DatasetInputError(
            f"{path}: 'annotations' must be an object or a list, got {json_kind(anns_raw)}")
    ids.reserved.update(qid for qid, _ in listed)
    anns = []
    for qid, a in listed:
        record = f"question {qid}"
        if isinstance(a, dict):
            question = [a.get("image_id"), a.get("question")]
            content = {k: v for k, v in a.items() if k not in ("id", "question_id")}
        else:
            question, content = a, None
        new = ids.resolve(qid, question, content, path=path, record=record)
        if new is not None:
            anns.append((new, record if new == qid else f"{record} (renamed {new})", a))
    return anns

