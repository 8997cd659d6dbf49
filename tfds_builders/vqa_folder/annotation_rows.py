"""The annotation files of a folder of a user's own photos: CSV or JSON rows of (image file, question, answer).

One row is one question (:class:`Row`). Columns / keys (names are matched without case or surrounding spaces):

==============  ========  ===================================================================================
name            needed    value
==============  ========  ===================================================================================
``image``       yes       the image file, relative to the manual folder (``photos/cat.jpg``); also read as
                          ``image_file``, ``file_name``, ``filename`` or ``image_path``
``question``    yes       the question
``answer``      yes       CSV: one answer, or several reference answers separated by ``|``; JSON: a string
                          or a list of strings (also read as ``answers``)
``question_id`` no        unique within a split; default ``<file name>:<line>`` (CSV) or ``<file name>:<index>``
                          (JSON)
``language``    no        ``vi``, ``en`` or ``ja`` (also ``vietnamese``, ``english``, ...); default: the builder
                          config's ``language`` (``auto``: :func:`detect_language`)
``qa_type``     no        ``1`` when the answer is read from text in the photo, ``0`` when not; empty: unknown
``kind``        no        the kind of question, any short label (``colour``, ``count``, ``verify_text``): the
                          scores are also given per kind, and ``data.train_kind_weights`` can oversample one;
                          empty: none (at most :data:`MAX_KIND_LENGTH` characters, no line break)
==============  ========  ===================================================================================

CSV files are UTF-8 (a byte-order mark, as Excel's "CSV UTF-8" writes it, is accepted), with a header row; the
delimiter is the first of ``,``, ``;`` and tab that splits the header into the needed columns (Excel writes ``;``
where the list separator of the system's region is ``;``). A field holding the delimiter is quoted (``"a, b"``).
JSON files hold a list of objects.

Bad input is one :class:`tfds_builders.readers.DatasetInputError` line naming the file and the row (CSV: the
line, JSON: ``[index]``, each with the question id when the row has one): a missing column, a row with too few
or too many fields, an empty question or answer, an image path outside the folder, an unknown language or
qa_type, a kind that is not a short one-line string, a repeated field of a JSON object. Under
``skip_invalid_records`` such rows are skipped, counted per reason and logged (:class:`tfds_builders.readers.ErrorPolicy`). A file that cannot be read at all (not UTF-8,
invalid JSON, no header) is always an error. Columns the builder does not store are counted and logged once per
file (:class:`tfds_builders.readers.UnknownFields`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import posixpath
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from openvivqa_jax.jsonio import json_kind
from openvivqa_jax.text.language import detect_language as question_language
from tfds_builders import common, readers

__all__ = ["Row", "IMAGE_COLUMNS", "ANSWER_COLUMNS", "KNOWN_COLUMNS", "MAX_KIND_LENGTH", "LANGUAGE_ALIASES",
           "detect_language",
           "parse_language", "parse_csv", "parse_json", "parse_file", "ANNOTATION_SUFFIXES"]

#: Names of the image column, in the order they are looked for.
IMAGE_COLUMNS = ("image", "image_file", "file_name", "filename", "image_path")
#: Names of the answer column.
ANSWER_COLUMNS = ("answer", "answers")
#: Every column / key the builder reads (others are counted and logged, not stored).
KNOWN_COLUMNS = (*IMAGE_COLUMNS, "question", *ANSWER_COLUMNS, "question_id", "language", "qa_type", "kind")
#: Longest ``kind`` label accepted (it names a row of the per-kind score tables).
MAX_KIND_LENGTH = 64
#: Accepted ``language`` values (lowercased) -> ISO 639-1 code (:data:`tfds_builders.common.LANGUAGES`).
LANGUAGE_ALIASES = {
    "vi": "vi", "vie": "vi", "vietnamese": "vi", "vn": "vi", "tiếng việt": "vi",
    "en": "en", "eng": "en", "english": "en",
    "ja": "ja", "jpn": "ja", "japanese": "ja", "jp": "ja",
}
#: File suffixes of annotation files.
ANNOTATION_SUFFIXES = (".csv", ".json")
_DELIMITERS = (",", ";", "\t")


@dataclasses.dataclass
class Row:
    """One question of an annotation file, checked and normalized.

    Attributes:
        question_id: as given, else ``<file name>:<line or index>``.
        image: the image path as written, ``/``-separated (the image id and the key of an OCR file).
        question: normalized (:func:`openvivqa_jax.text.normalize.normalize_text`).
        answers: normalized, in file order; ``[]`` only where a split does not require answers.
        language: ISO 639-1 code.
        qa_type: 1 text QA, 0 non-text, -1 unknown.
        source: the annotation file.
        kind: the ``kind`` column, stripped (``""``: none).
        record: how errors name the row (``line 7``, ``[3] (question q3)``).
    """

    question_id: str
    image: str
    question: str
    answers: list
    language: str
    qa_type: int
    source: Path
    record: str
    kind: str = ""


def detect_language(texts: list[str]) -> str:
    """The language of a question (``texts[0]``) and its answers, from their letters: ``ja`` if any kana or CJK
    ideograph, ``vi`` if any Latin letter with a diacritic or ``đ``, else ``en``; but ``en`` for an English
    question that names a Vietnamese word (*is the word phở written here?*: two or more English question words,
    as :func:`openvivqa_jax.text.language.detect_language` reads them). A guess: Vietnamese written without its
    diacritics reads as ``en``; give a ``language`` column or the config's ``language`` to be sure."""
    text = "".join(texts)
    for ch in text:
        if "\u3040" <= ch <= "\u30ff" or "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf":
            return "ja"
    for ch in text:
        if ch in "đĐ" or (ch.isalpha() and ord(ch) > 127 and unicodedata.decomposition(ch)[:1] not in ("", "<")):
            return "en" if texts and question_language(texts[0]) == "en" else "vi"
    return "en"


def parse_language(value: Any, *, path: Any, record: str) -> str:
    """Maps a ``language`` value to ``vi``, ``en`` or ``ja`` (:data:`LANGUAGE_ALIASES`).

    Raises:
        DatasetInputError: not a string, or not a known language.
    """
    if not isinstance(value, str) or value.strip().lower() not in LANGUAGE_ALIASES:
        raise readers.record_error(path, record, f"language {value!r} is not one of vi, en, ja")
    return LANGUAGE_ALIASES[value.strip().lower()]


def _qa_type(value: Any, *, path: Any, record: str) -> int:
    if value is None or (isinstance(value, str) and not value.strip()):
        return common.QA_TYPE_UNKNOWN
    v = value.strip() if isinstance(value, str) else value
    if isinstance(v, bool) or str(v) not in ("0", "1"):
        raise readers.record_error(path, record, f"qa_type {value!r} is not 0 (non-text QA), 1 (text QA) or empty")
    return int(v)


def _kind(value: Any, *, path: Any, record: str) -> str:
    """The ``kind`` column's value, stripped; ``""`` when absent or empty.

    Raises:
        DatasetInputError: not a string (a JSON number or list), longer than :data:`MAX_KIND_LENGTH`, or holding a
            line break.
    """
    if value is None:
        return ""
    if not isinstance(value, str):
        raise readers.record_error(path, record, f"kind {value!r} is not a string (a label such as 'colour')")
    kind = value.strip()
    if len(kind) > MAX_KIND_LENGTH or "\n" in kind or "\r" in kind:
        raise readers.record_error(path, record, f"kind {kind[:80]!r} is not a short label: at most "
                                   f"{MAX_KIND_LENGTH} characters on one line")
    return kind


def _image_path(value: Any, *, path: Any, record: str) -> str:
    """The image column's value as a ``/``-separated path relative to the manual folder."""
    if not isinstance(value, str) or not value.strip():
        raise readers.record_error(path, record, f"no image file name (column {IMAGE_COLUMNS[0]!r}): {value!r}")
    name = value.strip().replace("\\", "/")  # paths written on Windows
    # The build records (and checks for staleness) the files of the manual folder only.
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or ".." in name.split("/"):
        raise readers.record_error(path, record, f"image {value!r}: give the path relative to the manual folder "
                                   "(e.g. photos/cat.jpg), inside it")
    return posixpath.normpath(name)


def _row(fields: Mapping[str, Any], *, path: Path, record: str, auto_id: str, answers_required: bool,
         default_language: str, separator: str | None) -> Row:
    """One :class:`Row` from a record's fields (keys lowercased). ``separator``: CSV answers are split on it
    (None: JSON, where several answers are a list).

    Raises:
        DatasetInputError: the first problem of the record (module doc).
    """
    qid = fields.get("question_id")
    if isinstance(qid, (bool, dict, list, float)):
        raise readers.record_error(path, record, f"question_id {qid!r} is not a string or an integer")
    qid = str(qid).strip() if qid is not None else ""
    image = _image_path(next((fields[c] for c in IMAGE_COLUMNS if c in fields), None), path=path, record=record)
    question = readers.clean_question(fields.get("question"), path=path, record=record)
    raw = next((fields[c] for c in ANSWER_COLUMNS if c in fields), None)
    if isinstance(raw, str) and not raw.strip():
        if answers_required:
            raise readers.record_error(path, record, "empty answer")
        raw = None
    elif separator and isinstance(raw, str) and separator in raw:
        raw = raw.split(separator)
    answers = readers.clean_answers(raw, path=path, record=record, required=answers_required)
    language = fields.get("language")
    if language is None or (isinstance(language, str) and not language.strip()):
        language = detect_language([question, *answers]) if default_language == "auto" else default_language
    else:
        language = parse_language(language, path=path, record=record)
    qa_type = _qa_type(fields.get("qa_type"), path=path, record=record)
    kind = _kind(fields.get("kind"), path=path, record=record)
    return Row(qid or auto_id, image, question, answers, language, qa_type, Path(path), record, kind)


def _read_text(path: Path) -> str:
    """The file as text (UTF-8, a byte-order mark dropped).

    Raises:
        DatasetInputError: it cannot be read or is not UTF-8 (naming the line and byte).
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise readers.DatasetInputError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise readers.DatasetInputError(
            f"{path}: line {line}: not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 1]!r}); save it as UTF-8 "
            "(in Excel: Save As, 'CSV UTF-8 (Comma delimited)')") from None


def _csv_header(path: Path, text: str) -> tuple[str, list[str]]:
    """The delimiter and the lowercased column names of a CSV text.

    Raises:
        DatasetInputError: no header, or no delimiter gives the image and question columns.
    """
    first = next((ln for ln in text.splitlines() if ln.strip()), None)
    if first is None:
        raise readers.DatasetInputError(f"{path}: empty file; expected a header row such as image,question,answer")
    widest: list[str] = []
    for delimiter in _DELIMITERS:
        try:
            header = [c.strip().lower() for c in next(csv.reader([first], delimiter=delimiter))]
        except csv.Error:
            continue
        if "question" in header and any(c in header for c in IMAGE_COLUMNS):
            return delimiter, header
        widest = max(widest, header, key=len)
    # Name only what the header lacks, read with the delimiter that splits it most: a misspelt "qestion" beside
    # a good "image" should not be reported as both missing.
    missing = [name for name, found in (("image", any(c in widest for c in IMAGE_COLUMNS)),
                                         ("question", "question" in widest)) if not found]
    raise readers.DatasetInputError(
        f"{path}: line 1: header {first.strip()!r} lacks the column{'s' if len(missing) > 1 else ''} "
        f"{' and '.join(missing)} (expected a header such as image,question,answer; an image column may also be "
        f"named {', '.join(IMAGE_COLUMNS[1:])}; separated by ',', ';' or tabs)")


def parse_csv(path: Path, *, answers_required: bool, policy: readers.ErrorPolicy, unknown: readers.UnknownFields,
              default_language: str = "auto", separator: str = "|") -> list[Row]:
    """Parses one CSV annotation file (module doc).

    Args:
        path: the file.
        answers_required: an empty answer (or no answer column) is an error.
        policy: raises row errors, or counts and skips them (``skip_invalid_records``).
        unknown: counts the columns the builder does not store.
        default_language: language of rows without one: ``vi``, ``en``, ``ja`` or ``auto``.
        separator: splits an answer cell into several reference answers.

    Returns:
        The rows in file order (blank lines left out).

    Raises:
        DatasetInputError: an unreadable file or header, a missing answer column where answers are required
            (always); a bad row (unless skipped), named by its line.
    """
    text = _read_text(path)
    delimiter, header = _csv_header(path, text)
    if answers_required and not any(c in header for c in ANSWER_COLUMNS):
        raise readers.DatasetInputError(f"{path}: line 1: header {header} lacks the column 'answer' "
                                        "(this split requires answers)")
    dupes = sorted({c for c in header if header.count(c) > 1 and c})
    if dupes:
        raise readers.DatasetInputError(f"{path}: line 1: columns {dupes} appear twice in the header")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows: list[Row] = []
    started = False
    last_line = data_rows = 0
    while True:
        start = last_line + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            last_line = reader.line_num
            policy.handle("malformed_row", readers.record_error(path, f"line {start}", f"malformed CSV: {e}"))
            continue
        last_line = reader.line_num
        if not fields or all(not f.strip() for f in fields):
            continue  # a blank line
        if not started:  # the header
            started = True
            continue
        record = f"line {start}"
        data_rows += 1
        try:
            if len(fields) != len(header):
                raise readers.record_error(
                    path, record, f"expected {len(header)} fields ({delimiter.join(header)}), got {len(fields)}: "
                    f"{fields}"[:400] + (f"; a field holding {delimiter!r} must be in double quotes"
                                         if len(fields) > len(header) else ""))
            values = dict(zip(header, fields))
            if values.get("question_id", "").strip():
                record = f"line {start} (question {values['question_id'].strip()})"
            rows.append(_row(values, path=path, record=record, auto_id=f"{Path(path).name}:{start}",
                             answers_required=answers_required, default_language=default_language,
                             separator=separator))
        except readers.DatasetInputError as e:
            policy.handle("invalid_record", e)
    # Every row of the file carries each column of its header: counted per row, as a JSON file's fields are.
    unknown.check(dict.fromkeys(c for c in header if c), KNOWN_COLUMNS, path=path, times=data_rows, unit="rows")
    return rows


def parse_json(path: Path, *, answers_required: bool, policy: readers.ErrorPolicy, unknown: readers.UnknownFields,
               default_language: str = "auto") -> list[Row]:
    """Parses one JSON annotation file: a list of objects (module doc).

    Args:
        path, answers_required, policy, unknown, default_language: as :func:`parse_csv`.

    Returns:
        The rows in file order.

    Raises:
        DatasetInputError: invalid JSON (line and column) or not a list (always); a bad record (unless skipped),
            named ``[index]`` and its question id.
    """
    data = readers.read_json(path)
    if not isinstance(data, list):
        hint = ""
        if isinstance(data, dict) and "images" in data and "annotations" in data:
            hint = ("; this is the OpenViVQA release format: build it with tfds_builders/openvivqa "
                    "(configs/openvivqa/mlpag.py)")
        raise readers.DatasetInputError(
            f"{path}: expected a JSON list of objects {{\"image\", \"question\", \"answer\"}}, got "
            f"{json_kind(data)}{hint}")
    rows: list[Row] = []
    for i, item in enumerate(data):
        record = f"[{i}]"
        try:
            if not isinstance(item, dict):
                raise readers.record_error(path, record, f"expected an object, got {item!r}"[:300])
            fields = {str(k).strip().lower(): v for k, v in item.items()}
            if fields.get("question_id") is not None and not isinstance(fields["question_id"], (dict, list)):
                record = f"[{i}] (question {fields['question_id']})"
            repeated = readers.duplicate_keys(item) or sorted(
                {k for k in fields if sum(str(x).strip().lower() == k for x in item) > 1})
            if repeated:
                raise readers.record_error(path, record, f"fields repeated in the object: {repeated}")
            unknown.check(fields, KNOWN_COLUMNS, path=path)
            rows.append(_row(fields, path=path, record=record, auto_id=f"{Path(path).name}:{i}",
                             answers_required=answers_required, default_language=default_language, separator=None))
        except readers.DatasetInputError as e:
            policy.handle("invalid_record", e)
    return rows


def parse_file(path: Path, **kwargs) -> list[Row]:
    """:func:`parse_csv` or :func:`parse_json` by the file's suffix (``separator`` is read by CSV only)."""
    if Path(path).suffix.lower() == ".csv":
        return parse_csv(path, **kwargs)
    kwargs.pop("separator", None)
    return parse_json(path, **kwargs)
