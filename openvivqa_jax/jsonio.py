"""The one JSON file reader of the project: UTF-8 with or without a byte-order mark, one-line errors, repeated keys.

Every reader of a user's JSON file (the dataset builders' annotation and OCR files, ``predict --questions`` and
``--ocr FILE``, the evaluate CLI's prediction and reference files, the analysis inputs) goes through
:func:`read_json`, so they all accept the same files and report the same problems the same way:

* a UTF-8 byte-order mark (``EF BB BF``, written by Windows editors and Excel) is accepted;
* invalid JSON is one line: ``<file>: invalid JSON at line L column C: <what>``; an unreadable file or bytes
  that are not UTF-8 likewise name the file (and the byte offset);
* objects come back as :class:`JsonObject`: a ``dict`` that keeps the FIRST value of a repeated key and lists
  every repeat in ``.duplicates``. ``json.load`` keeps the last value without a word, and in the public-release
  form of a dataset (``{"annotations": {question_id: {...}}}``) or a ``{question_id: answer}`` file a repeated
  key is a duplicated question or image id. With ``repeated_keys="error"`` the first repeat is an error naming
  the key and its line; with ``"keep"`` the caller reports the repeats (:func:`duplicate_keys`), e.g. under a
  builder's ``skip_invalid_records``.

Imports neither JAX nor TensorFlow.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["JsonFileError", "JsonObject", "read_json", "loads", "duplicate_keys", "strip_bom", "json_kind", "BOM"]

#: The UTF-8 byte-order mark, as text.
BOM = "\ufeff"


class JsonFileError(ValueError):
    """A JSON file cannot be read, is not UTF-8, is not valid JSON, or repeats a key (when that is an error).

    Readers raise their own error class (the ``error`` argument of :func:`read_json`); this is the default.
    """


class JsonObject(dict):
    """A JSON object as :func:`read_json` returns it: a dict that keeps the FIRST value of a repeated key.

    Attributes:
        duplicates: ``[(key, value)]`` of every repeat after the first, in file order.
    """

    def __init__(self, pairs: Sequence[tuple[str, Any]] = ()):
        super().__init__()
        self.duplicates: list[tuple[str, Any]] = []
        for key, value in pairs:
            if key in self:
                self.duplicates.append((key, value))
            else:
                self[key] = value


class _Repeated(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_repeats(pairs):
    obj = JsonObject(pairs)
    if obj.duplicates:
        raise _Repeated(obj.duplicates[0][0])
    return obj


def json_kind(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words, for messages: ``"an object"``, ``"a list"``, ``"a string"``,
    ``"a number"``, ``"true/false"`` or ``"null"`` (never a Python class name such as :class:`JsonObject`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def duplicate_keys(obj: Any) -> list[str]:
    """The keys repeated in a JSON object read by :func:`read_json` (each repeat once, in file order); ``[]`` for
    anything else."""
    return [k for k, _ in getattr(obj, "duplicates", [])]


def strip_bom(text: str) -> str:
    """``text`` without a leading byte-order mark (text files read as ``utf-8`` keep it as U+FEFF)."""
    return text[1:] if text.startswith(BOM) else text


def _line_of_repeat(text: str, key: str) -> int | None:
    """1-based line of the second occurrence of ``"key":`` in ``text`` (None if not found)."""
    hits = [m.start() for m in re.finditer(re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:", text)]
    if len(hits) < 2:
        hits = [m.start() for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:", text)]
    return text.count("\n", 0, hits[1]) + 1 if len(hits) >= 2 else None


def loads(text: str, where: str = "", *, error: type[Exception] = JsonFileError,
          repeated_keys: str = "keep") -> Any:
    """Parses JSON text (a leading byte-order mark accepted); see :func:`read_json`.

    Args:
      text: the JSON text.
      where: what is named at the start of an error (a file path, ``"--questions file q.json"``).
      error: the exception class raised (the reader's own, e.g. ``OcrFileError``).
      repeated_keys: ``"keep"`` (objects are :class:`JsonObject`, repeats in ``.duplicates``) or ``"error"``.

    Raises:
      error: invalid JSON (line and column) or, with ``repeated_keys="error"``, a repeated key (key and line).
    """
    if repeated_keys not in ("keep", "error"):
        raise ValueError(f"repeated_keys must be 'keep' or 'error', got {repeated_keys!r}")
    text = strip_bom(text)
    prefix = f"{where}: " if where else ""
    try:
        return json.loads(text, object_pairs_hook=_no_repeats if repeated_keys == "error" else JsonObject)
    except json.JSONDecodeError as e:
        raise error(f"{prefix}invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except _Repeated as e:
        line = _line_of_repeat(text, e.key)
        at = f" (again at line {line})" if line else ""
        raise error(f"{prefix}key {e.key!r} appears twice in one JSON object{at}: a duplicated question or "
                    "image id; JSON readers keep only one of them, so fix the file") from None
    except RecursionError:
        raise error(f"{prefix}invalid JSON: nested too deeply") from None


def read_json(path: str | os.PathLike, *, what: str = "", error: type[Exception] = JsonFileError,
              repeated_keys: str = "keep") -> Any:
    """Reads a UTF-8 JSON file (with or without a byte-order mark).

    Args:
      path: the file.
      what: a label put before the path in errors (``"--questions file"``); empty = the path alone.
      error: the exception class raised (the reader's own error class).
      repeated_keys: ``"keep"``: objects are :class:`JsonObject` (first value of a repeated key kept, repeats in
        ``.duplicates`` for the caller to report); ``"error"``: a repeated key is an error.

    Returns:
      The parsed value.

    Raises:
      error: one line starting with ``what`` and the path: cannot read (no such file, a directory, permission
        denied), not UTF-8 (byte offset), invalid JSON (line and column), or a repeated key (key and line).
    """
    where = f"{what} {os.fspath(path)}" if what else os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise error(f"{where}: cannot read: no such file") from None
    except IsADirectoryError:
        raise error(f"{where}: cannot read: it is a directory") from None
    except OSError as e:
        raise error(f"{where}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 1]!r}); save it as "
                    "UTF-8") from None
    return loads(text, where, error=error, repeated_keys=repeated_keys)
