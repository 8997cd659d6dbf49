"""The questions a run is asked to answer (``predict --questions``): a file in the public release's layout, read
with the answer rules and the builders' rules for repeated ids; where the images of a questions file are looked
for. Split from :mod:`openvivqa_jax.evaluation.formats`, whose :class:`~.formats.InputError` it raises.
"""

from __future__ import annotations

import os
from typing import Any

from openvivqa_jax import jsonio
from openvivqa_jax.evaluation.formats import InputError
from openvivqa_jax.jsonio import json_kind
from openvivqa_jax.text.normalize import normalize_text

__all__ = ["read_json_file", "clean_question", "image_folders", "read_questions_file"]


def read_json_file(path: str, label: str = "") -> Any:
    """The parsed JSON file at ``path`` (any layout; :func:`openvivqa_jax.jsonio.read_json`: a byte-order mark
    accepted; objects are :class:`~openvivqa_jax.jsonio.JsonObject` with their repeated keys in
    ``.duplicates``).

    Raises:
      InputError: unreadable or invalid JSON; the message is ``label + path`` then what is wrong (the line
        and column of invalid JSON).
    """
    return jsonio.read_json(path, what=label.strip(), error=InputError)


def clean_question(question: Any, where: str) -> str:
    """``question`` normalized by :func:`openvivqa_jax.text.normalize.normalize_text` (the answer rules).

    Raises:
      InputError: not text, or empty after normalization (the message starts with ``where``).
    """
    if not isinstance(question, str):
        raise InputError(f"{where}: question is {json_kind(question)}, expected text")
    q = normalize_text(question)
    if not q:
        raise InputError(f"{where}: the question is empty")
    return q


def image_folders(questions_path: str, image_dir: str | None) -> list[str]:
    """Where the images of a questions file are looked for: ``image_dir`` when given, else the file's
    folder, its ``images/`` and ``<file stem>/`` subfolders (as the OpenViVQA builder does)."""
    if image_dir:
        return [image_dir]
    folder = os.path.dirname(os.path.abspath(questions_path))
    stem = os.path.splitext(os.path.basename(questions_path))[0]
    return [folder, os.path.join(folder, "images"), os.path.join(folder, stem)]


def read_questions_file(path: str, image_dir: str | list[str], skipped: dict[str, str] | None = None) -> list[dict]:
    """Reads the questions to answer from a file in the public release's format (or the older list form).

    Args:
      path: ``{"images": {id: filename}, "annotations": {qid: {image_id, question, answer?}}}`` or
        ``{"images": [{id, filename}], "annotations": [{id, image_id, question, ...}]}``.
      image_dir: folder of the image files, or folders searched in order (an image found in none gets
        the first folder's path, which then fails with "file not found").
      skipped: None: the first bad question is an error. A dict (``predict --skip_bad``): each bad question is
        left out and recorded as ``{question id: reason}`` (a repeat of a question id as ``"<id> (repeat n)"``,
        a repeated image id as ``"image <id> (repeat n)"``), and the others are returned.

    Bad questions: no ``question`` or ``image_id``, an empty question (after normalization), an image id not
    in ``images``, and a question or image id repeated as a JSON key (the first entry is the one kept, as the
    builders do; ``json.load`` would keep the last without a word).

    Returns:
      ``[{question_id, image_id, question, image_path[, language]}]`` in file order (answers are not needed;
      ``language`` where the annotation has one, as EVJVQA's); questions normalized by :func:`clean_question`.

    Raises:
      InputError: unreadable / invalid JSON, an unknown layout, or (unless ``skipped`` is given) a bad question
        (names the file and the question id); no question left.
    """
    raw = read_json_file(path, "questions file ")
    where = f"questions file {path}"

    def bad(key: str, message: str) -> None:
        if skipped is None:
            raise InputError(f"{where}: {message} (predict --skip_bad answers the other questions and lists the "
                             "bad ones)")
        skipped[key] = message

    if not isinstance(raw, dict) or "images" not in raw or "annotations" not in raw:
        raise InputError(f"{where}: expected an object with 'images' and 'annotations' (the "
                         "OpenViVQA public release layout)")
    images = _question_images(raw["images"], where, bad)
    items = _question_annotations(raw["annotations"], where, bad)
    dirs = [image_dir] if isinstance(image_dir, str) else list(image_dir)
    out = []
    for qid, a in items:
        if not isinstance(a, dict) or "question" not in a or "image_id" not in a:
            bad(qid, f"question {qid!r} needs 'image_id' and 'question'")
            continue
        image_id = str(a["image_id"])
        if image_id not in images:
            bad(qid, f"question {qid!r} refers to image {image_id!r}, which is not in 'images'")
            continue
        try:
            question = clean_question(a["question"], f"question {qid!r}")
        except InputError as e:
            bad(qid, str(e))
            continue
        out.append({"question_id": qid, "image_id": image_id, "question": question,
                    "image_path": _locate_image(dirs, str(images[image_id])),
                    **({"language": a["language"].strip().lower()} if isinstance(a.get("language"), str) else {})})
    if not out:
        extra = f" ({len(skipped)} skipped, e.g. {next(iter(skipped.values()))})" if skipped else ""
        raise InputError(f"{where}: no question{extra}")
    return out


def _question_images(images: Any, where: str, bad) -> dict[str, Any]:
    """The ``images`` entry of a questions file as ``{image id: filename}`` (the first entry of a repeated id
    kept; each repeat reported by ``bad(key, message)``).

    Raises:
      InputError: neither an object nor a list of ``{id, filename}``.
    """
    for n, key in enumerate(jsonio.duplicate_keys(images), start=2):
        bad(f"image {key} (repeat {n})", f"image id {key!r} repeated as a key of 'images' (a repeated JSON key; "
            "the first entry is kept)")
    if isinstance(images, list):
        try:
            pairs = [(str(x["id"]), x["filename"]) for x in images]
        except (TypeError, KeyError):
            raise InputError(f"{where}: 'images' list entries need 'id' and 'filename'") from None
        images = {}
        for k, v in pairs:
            if k in images:
                bad(f"image {k} (repeat)", f"image id {k!r} listed twice in 'images' (the first entry is kept)")
                continue
            images[k] = v
    if not isinstance(images, dict):
        raise InputError(f"{where}: 'images' must be an object {{id: filename}} or a list")
    return {str(k): v for k, v in images.items()}


def _question_annotations(anns: Any, where: str, bad) -> list[tuple[str, Any]]:
    """The ``annotations`` entry of a questions file as ``[(question id, annotation)]`` in file order (the first
    entry of a repeated id kept; each repeat, and a list entry without ``id``, reported by ``bad(key,
    message)``); the annotations themselves are checked by the caller.

    Raises:
      InputError: neither an object nor a list.
    """
    if isinstance(anns, dict):
        repeats: dict[str, int] = {}
        for key in jsonio.duplicate_keys(anns):
            repeats[key] = repeats.get(key, 1) + 1
            bad(f"{key} (repeat {repeats[key]})", f"question {key!r} repeated as a key of 'annotations' (a "
                "repeated JSON key; the first entry is kept)")
        return [(str(k), v) for k, v in anns.items()]
    if isinstance(anns, list):
        items = []
        seen: set[str] = set()
        for i, a in enumerate(anns):
            if not isinstance(a, dict) or "id" not in a:
                bad(f"annotations[{i}]", f"annotation {i} has no 'id'")
                continue
            qid = str(a["id"])
            if qid in seen:
                bad(f"{qid} (repeat at annotations[{i}])", f"question {qid!r} listed twice in 'annotations' (the "
                    "first entry is kept)")
                continue
            seen.add(qid)
            items.append((qid, a))
        return items
    raise InputError(f"{where}: 'annotations' must be an object or a list")


def _locate_image(dirs: list[str], name: str) -> str:
    """The path of image file ``name`` in the first of ``dirs`` that has it, else in ``dirs[0]`` (which then
    fails with "file not found")."""
    for d in dirs:
        if os.path.isfile(os.path.join(d, name)):
            return os.path.join(d, name)
    return os.path.join(dirs[0], name)
