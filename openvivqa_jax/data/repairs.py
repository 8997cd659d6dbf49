"""Repairs of the known annotation flaws of published dataset files, counted and logged (docs/datasets.md,
"Flaws the builders repair").

Every real release has some annotation noise. A builder repairs a flaw when the repair is unambiguous, counts
each repair per kind and file (:class:`RepairLog`: one log line per kind and file with the count and the first
ids; the counts go to the build's notes, :func:`openvivqa_jax.data.build_check.write_notes`), and stops with
one line naming the file and the record where it is not:

* **an answer off its** ``answer_start`` (SQuAD-form files): the answer is re-anchored to the nearest
  occurrence of its text in the passage (:func:`locate_answer`). An answer whose text is nowhere in its
  passage, or occurs at two places equally near, stays an error.
* **a repeated question id carrying another question** (:class:`RepeatedIds`): the repeat is renamed
  ``<id>#<n>`` (``n`` = 2, 3, ...: the first number not taken), so each question keeps its answers. A repeat
  with the same question and other answers stays an error (which one holds cannot be told).
* **an exact duplicate record** (same id, same content): dropped. Where a split's files are overlapping folds
  of one set (UIT-ViQuAD 2.0's ``dev-*.json``), a record met again in a later file is a fold duplicate,
  dropped as part of reading that layout.

A builder's ``strict`` option refuses the flaws instead (:data:`FLAW_KINDS`; one line each); the other kinds
are how a layout is read (fold duplicates, unanswerable questions left out of a SQuAD v1.1-style split) or an
observation (the same content under two ids, kept since scorers score each id).

Imports neither JAX nor TensorFlow.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

from absl import logging

from openvivqa_jax.text.normalize import normalize_text

__all__ = ["KINDS", "FLAW_KINDS", "FIRST_IDS", "RepairLog", "RepeatedIds", "content_key", "renamed_id",
           "answer_end", "answer_at", "locate_answer", "AnswerNotFound"]

#: Kind -> what it does, as the log lines and the build notes say it.
KINDS = {
    "answer_start_reanchored": "answer_start re-anchored to the nearest occurrence of the answer's text",
    "repeated_id_renamed": "repeated question id carrying another question, renamed <id>#<n>",
    "exact_duplicate_dropped": "exact duplicate record (same id, same content) dropped",
    "fold_duplicate_dropped": "record repeated in an earlier fold file of the split, dropped",
    "unanswerable_left_out": "unanswerable question (is_impossible) left out of this SQuAD v1.1-style split",
    "same_content_other_id": "same content as another question id, kept (scorers score each id)",
    "question_id_from_position": "question without a question_id, named by its 0-based position in 'data' "
                                 "(TextVQA v0.1 has no ids; a prediction's id is then that position)",
}
#: The kinds that are flaws of a file: a ``strict`` build refuses them.
FLAW_KINDS = ("answer_start_reanchored", "repeated_id_renamed", "exact_duplicate_dropped")
#: Ids listed per kind and file in the log lines and the notes.
FIRST_IDS = 5

#: ``error(path, record, what, reason)``: raises the builder's one-line error, or returns when its policy skips
#: the record (``skip_invalid_records``; the skip is counted there under ``reason``).
ErrorHook = Callable[[Any, str, str, str], None]
#: The skip reason of a refused flaw (the counts of ``skip_invalid_records``).
_REASONS = {"answer_start_reanchored": "invalid_record", "repeated_id_renamed": "duplicate_question_id",
            "exact_duplicate_dropped": "duplicate_question_id"}


class RepairLog:
    """The repairs of one split: counts per kind and file, the first ids, one log line per kind and file.

    Attributes:
        name: shown in the log lines, e.g. ``"viquad/dev"``.
        strict: refuse the :data:`FLAW_KINDS` instead of repairing them.
        entries: ``{kind: {file: {"count": n, "questions": q, "first": [ids]}}}``: ``count`` counts repairs
            (for ``answer_start_reanchored`` answers, else records), ``questions`` the questions they touch,
            ``first`` the first ``FIRST_IDS`` of those (a rename as ``old -> new``).
    """

    def __init__(self, name: str, error: ErrorHook, strict: bool = False):
        """Args: name: for the log lines; error: the builder's error hook (:data:`ErrorHook`); strict: refuse
        the flaws."""
        self.name = name
        self.error = error
        self.strict = strict
        self.entries: dict[str, dict[str, dict]] = {}
        self._last: dict[tuple[str, str], str] = {}

    def apply(self, kind: str, path: Any, qid: str, *, record: str, what: str) -> bool:
        """Counts one repair of ``kind`` on question ``qid`` of file ``path``, or refuses it under ``strict``.

        Args:
          kind: one of :data:`KINDS`.
          path, record: the file and the record label (``question <id>``) of the error under ``strict``.
          what: the flaw in words, for the ``strict`` error (the repair is added to it).

        Returns:
          True when the repair is made (counted); False when ``strict`` refused it and the error hook
          returned (the record is skipped, counted by the builder's policy).

        Raises:
          The error hook's error, under ``strict`` for a flaw kind (one line: file, record, flaw, the repair
          a build without ``strict`` makes).
        """
        if self.strict and kind in FLAW_KINDS:
            self.error(path, record, f"{what} (refused by the builder option strict; without it: {KINDS[kind]})",
                       _REASONS[kind])
            return False
        entry = self.entries.setdefault(kind, {}).setdefault(str(path), {"count": 0, "questions": 0, "first": []})
        entry["count"] += 1
        last = self._last.get((kind, str(path)))
        if last != qid:  # a question's answers are repaired one after the other
            entry["questions"] += 1
            self._last[(kind, str(path))] = qid
            if len(entry["first"]) < FIRST_IDS:
                entry["first"].append(qid)
        return True

    def totals(self) -> dict[str, int]:
        """Kind -> repairs over every file."""
        return {k: sum(e["count"] for e in files.values()) for k, files in self.entries.items()}

    def as_dict(self) -> dict:
        """``{kind: {"what": words, "count": total, "questions": total, "files": {file: {"count", "questions",
        "first"}}}}`` for the notes."""
        return {k: {"what": KINDS[k], "count": sum(e["count"] for e in files.values()),
                    "questions": sum(e["questions"] for e in files.values()), "files": files}
                for k, files in self.entries.items()}

    def log_summary(self) -> None:
        """One line per kind and file: the kind in words, the count and the first ids (a warning for a flaw,
        info for a layout's reading or an observation)."""
        for kind in KINDS:
            for path, e in self.entries.get(kind, {}).items():
                more = ", ..." if e["questions"] > len(e["first"]) else ""
                n = f"{e['count']} answers of {e['questions']} questions" if e["count"] != e["questions"] else e["count"]
                (logging.warning if kind in FLAW_KINDS else logging.info)(
                    "%s: %s: %s: %s (%s%s)", self.name, path, KINDS[kind], n, ", ".join(e["first"]), more)


def content_key(value: Any) -> str:
    """A canonical text of a record's content (JSON, keys sorted), to tell exact duplicates."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def renamed_id(qid: str, taken: Callable[[str], bool]) -> str:
    """``<qid>#<n>`` for the smallest ``n >= 2`` that ``taken`` does not hold (the rename of a repeated id)."""
    n = 2
    while taken(f"{qid}#{n}"):
        n += 1
    return f"{qid}#{n}"


class RepeatedIds:
    """The rule for question ids met again in one split (module doc): keep, rename, drop or refuse.

    Args (constructor):
      log: the split's :class:`RepairLog` (counts, ``strict``, the error hook).
      fold_files: the split's files are overlapping folds: an exact duplicate from an earlier file is a
        ``fold_duplicate_dropped`` (also under ``strict``), one within a file an ``exact_duplicate_dropped``.
      reserved: ids a rename must not take (the split's ids met later).
    """

    def __init__(self, log: RepairLog, *, fold_files: bool = False, reserved: Iterable[str] = ()):
        self.log = log
        self.fold_files = fold_files
        self.reserved = set(reserved)
        self._seen: dict[str, tuple[str, str, str]] = {}  # id -> (question key, content, file)
        self._content: dict[str, str] = {}  # content -> first id

    def resolve(self, qid: str, question: Any, content: Any, *, path: Any, record: str) -> str | None:
        """The id to store a record under, or None when it is dropped (or skipped by the error hook).

        Args:
          qid: the record's id as in the file.
          question: what makes it the same question (ViQuAD: question and passage; a VQA set: image and
            question), as JSON-able values.
          content: everything else that makes it the same record (answers, offsets, types), id excluded.
          path, record: the file and the record label, for the log and the errors.

        Raises:
          The error hook's error: the id repeats the same question with another content (ambiguous), or a
          flaw under ``strict``.
        """
        qkey, ckey = content_key(question), content_key([question, content])
        first = self._seen.get(qid)
        if first is None:
            other = self._content.get(ckey)
            if other is not None:
                self.log.apply("same_content_other_id", path, qid, record=record, what="")
            self._remember(qid, qkey, ckey, path)
            return qid
        fqkey, fckey, fpath = first
        if fckey == ckey:
            kind = "fold_duplicate_dropped" if self.fold_files and fpath != str(path) else "exact_duplicate_dropped"
            self.log.apply(kind, path, qid, record=record, what=f"exact duplicate of the record of the same id in {fpath}")
            return None
        if fqkey == qkey:
            self.log.error(path, record, f"question id repeated (also in {fpath}) with the same question and other "
                           "answers; which one holds cannot be told: fix the file or drop one", "duplicate_question_id")
            return None
        new = renamed_id(qid, lambda i: i in self._seen or i in self.reserved)
        if not self.log.apply("repeated_id_renamed", path, f"{qid} -> {new}", record=record,
                              what=f"question id repeated with another question (also in {fpath})"):
            return None
        self._remember(new, qkey, ckey, path)
        return new

    def _remember(self, qid: str, qkey: str, ckey: str, path: Any) -> None:
        self._seen[qid] = (qkey, ckey, str(path))
        self._content.setdefault(ckey, qid)


# ---------------------------------------------------------------------------------------------- answer spans


def _norm(text: str) -> str:
    return normalize_text(text, spaced_punctuation=False)


def answer_end(passage: str, text: str, start: int) -> int | None:
    """Where an answer of ``text`` starting at character ``start`` of ``passage`` ends (exclusive), or None when
    the passage there does not hold it: the same characters, or the same text in another Unicode form or
    tone-mark convention (an NFD passage, ``Hoà`` for ``Hòa``): the normalized texts
    (:func:`~openvivqa_jax.text.normalize.normalize_text`) of the answer and of a slice starting at ``start``
    are equal. Offsets are code points.
    """
    n = len(text)
    if passage[start:start + n] == text:
        return start + n
    want = _norm(text)
    if not want:
        return None
    # Another Unicode form or tone placement: the slice may be longer or shorter (NFD letters). The shortest
    # slice that normalizes to the answer, with the combining marks of its last letter.
    for end in range(start + 1, min(len(passage), start + 3 * n + 2) + 1):
        if _norm(passage[start:end]) == want:
            while end < len(passage) and unicodedata.category(passage[end]).startswith("M"):
                end += 1
            return end if _norm(passage[start:end]) == want else None
    return None


def _word_start(passage: str, i: int) -> bool:
    """Whether character ``i`` can begin an answer given in another form: not a space or a combining mark (a
    slice from the space before a word normalizes to the word, but it is not where the word starts)."""
    return 0 <= i < len(passage) and not passage[i].isspace() and not unicodedata.category(passage[i]).startswith("M")


def answer_at(passage: str, text: str, start: int) -> int | None:
    """The end of the answer ``text`` when it is at ``start`` (:func:`answer_end`: exactly, or in another form
    from a character that can begin it); None when it is not."""
    if start < 0 or start >= len(passage):
        return None
    if passage.startswith(text, start):
        return start + len(text)
    return answer_end(passage, text, start) if _word_start(passage, start) else None


def _base(ch: str) -> str:
    return unicodedata.normalize("NFKD", ch)[:1].casefold()


def _occurrences(passage: str, text: str) -> list[int]:
    """Where ``text`` occurs in ``passage``: exactly, or else in another form (:func:`answer_at`)."""
    hits, i = [], passage.find(text)
    while i >= 0:
        hits.append(i)
        i = passage.find(text, i + 1)
    if hits:
        return hits
    stripped = text.strip()
    first = _base(stripped[0]) if stripped else ""
    # Only characters with the answer's first base letter can begin it in another form (the check is slow).
    return [i for i in range(len(passage))
            if (not first or not first.isalnum() or _base(passage[i]) == first) and answer_at(passage, text, i) is not None]


class AnswerNotFound(ValueError):
    """An answer whose text is not in its passage, or is at two places equally near its ``answer_start``: the
    message says which."""


def locate_answer(passage: str, text: str, start: int) -> tuple[int, int, bool]:
    """The span of answer ``text`` given at ``start``: ``(start, end, moved)``.

    The answer is where ``answer_start`` says when :func:`answer_at` finds it there (``moved`` False). Else it
    is re-anchored to the nearest occurrence of its text (exact occurrences first; where the passage holds it
    only in another form, the nearest of those), ``moved`` True.

    Raises:
      AnswerNotFound: the text is nowhere in the passage, or two occurrences are equally near ``start``.
    """
    end = answer_at(passage, text, start)
    if end is not None:
        return start, end, False
    hits = _occurrences(passage, text)
    if not hits:
        raise AnswerNotFound("its text is not in the passage (exactly or in another Unicode form, case or tone "
                             "convention)")
    hits.sort(key=lambda i: (abs(i - start), i))
    if len(hits) > 1 and abs(hits[0] - start) == abs(hits[1] - start):
        raise AnswerNotFound(f"its text occurs at {hits[0]} and {hits[1]}, equally near; which one is meant cannot "
                             "be told")
    return hits[0], answer_at(passage, text, hits[0]), True
