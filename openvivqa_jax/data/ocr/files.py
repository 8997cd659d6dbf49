"""OCR files: JSON tables of per-image OCR tokens made by another OCR system, read by the builders,
``predict`` and ``analyze``.

A file is ``{image_id: [{"text", "box", "score"}, ...]}`` (for ``predict``, a single image's plain token list
too). Every token is validated and normalized by :func:`~openvivqa_jax.data.ocr.tokens.validate_tokens`;
an unreadable file, invalid JSON, a repeated key or a bad token is one :class:`OcrFileError` line naming the
file and the image.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping, Sequence
from pathlib import Path

from absl import logging

from openvivqa_jax import jsonio
from openvivqa_jax.jsonio import json_kind
from openvivqa_jax.data.ocr.tokens import OcrFileError, _bump, validate_tokens


def load_ocr_file(path: str | os.PathLike, stats: MutableMapping[str, int] | None = None,
                  skip_invalid: bool = False) -> dict[str, list[dict]]:
    """Reads a JSON file of per-image OCR tokens ``{image_id: [{"text", "box", "score"}, ...]}``.

    Args:
        path: the JSON file. Image ids are JSON object keys (strings).
        stats: optional counter (see :func:`validate_tokens`); ``dropped_empty_after_normalization``
            totals are also logged.
        skip_invalid: bad tokens are skipped and counted (:func:`validate_tokens`).

    Returns:
        ``{image_id: tokens}`` with normalized, validated tokens (see :func:`validate_tokens`).

    Raises:
        OcrFileError: the file cannot be read, is not valid JSON (line and column given), is not an
            object, or any image's tokens are invalid (file and image id named).
    """
    path = Path(path)
    data = jsonio.read_json(path, what="OCR file", error=OcrFileError, repeated_keys="error")
    if not isinstance(data, dict):
        raise OcrFileError(f"{path}: expected a JSON object {{image_id: [tokens]}}, got {json_kind(data)}")
    local: dict[str, int] = {}
    out = {str(k): validate_tokens(v, source=str(path), image_id=str(k), stats=local, skip_invalid=skip_invalid)
           for k, v in data.items()}
    if local:
        logging.info("load_ocr_file(%s): %s", path, local)
    for key, n in local.items():
        _bump(stats, key, n)
    return out


def read_ocr_table(path: str, skip_invalid: bool = False) -> dict[str, list[dict]] | list[dict]:
    """Reads an OCR file given to prediction: ``{image: [tokens]}`` (validated by :func:`load_ocr_file`; keys
    are image ids, file names or stems) or, for a single image, a plain token list (validated by
    :func:`validate_tokens` under image id ``"(all)"``).

    Raises:
      OcrFileError: unreadable file, invalid JSON (line and column), or invalid tokens; the message starts
        with the path.
    """
    raw = jsonio.read_json(path, error=OcrFileError, repeated_keys="error")
    if isinstance(raw, list):
        return validate_tokens(raw, source=path, image_id="(all)", skip_invalid=skip_invalid)
    return load_ocr_file(path, skip_invalid=skip_invalid)


def ocr_tokens_for(table: dict[str, list[dict]] | list[dict], image_keys: Sequence[str], path: str) -> list[dict]:
    """The tokens of one image in a table of :func:`read_ocr_table`: the plain list itself, else the entry
    of the first of ``image_keys`` (image id, file name, stem, path) the table has.

    Raises:
      OcrFileError: no key matches (the message starts with ``path`` and names the keys tried).
    """
    if isinstance(table, list):
        return table
    for k in image_keys:
        if k in table:
            return table[k]
    raise OcrFileError(f"{path}: no entry for image {image_keys[0]!r} (tried keys {list(image_keys)}; "
                       f"the file has {len(table)} images, e.g. {sorted(table)[:3]})")
