"""The language of a question, told cheaply from its script and letters, and the languages a run was trained on.

A run answers questions in the languages of its training split; an English or Japanese question put to a model
trained on Vietnamese is read as pieces it never learned to use. :func:`detect_language` tells the common cases
apart without a model: Japanese (kana), Chinese (Han characters without kana), Korean (Hangul), Thai, and in the
Latin script Vietnamese (its letters: đ, the breve, circumflex and horn vowels, the hook-above and dot-below tone
marks, two or more toned vowels, or a common Vietnamese word such as *là*, *gì*, *này*) from English (at least two
English question words such as *what*, *how*, *the*, *is*). A question with at least two English question words,
no common Vietnamese word and fewer words in Vietnamese letters than English question words is English: it names a
Vietnamese word (*is the word phở written in the picture?*). Anything else, Vietnamese typed without its marks
included, is ``None`` (undetermined), so no question is flagged on a guess. On the EVJVQA public test (5,015
questions with a ``language`` field) it names every Japanese and Vietnamese question right and 1,684 of the 1,686
English ones (the other two undetermined), with no question given a wrong language; of the 2,285 Vietnamese
questions of UIT-ViQuAD's dev set, 2,285 are ``vi``.

The training languages of a run (:func:`training_languages`) come from its training split at the start of the
run: each record's ``language`` field where the dataset has one (EVJVQA), else the detected language; they are
written to ``<workdir>/languages.json`` (:func:`write_training_languages`).
"""

from __future__ import annotations

import collections
import os
import re
import unicodedata
from collections.abc import Iterable

from openvivqa_jax import outputs
from openvivqa_jax.jsonio import read_json

__all__ = ["detect_language", "count_languages", "write_training_languages", "training_languages",
           "LANGUAGES_FILE", "MIN_SHARE"]

#: The file of a run's training languages, in its workdir.
LANGUAGES_FILE = "languages.json"
#: The share of training questions a language needs to count as trained (a few questions of another language in a
#: large split, or detection slips, do not make a model read that language).
MIN_SHARE = 0.01

# Marks and letters that, in the Latin script, only Vietnamese uses among the languages met here: the breve (ă),
# the horn (ơ, ư), the hook above (ả) and the dot below (ạ), and đ.
_VIETNAMESE_MARKS = {"\u0306", "\u031b", "\u0309", "\u0323"}
_TONE_MARKS = {"\u0300", "\u0301", "\u0303", "\u0302"}
_ENGLISH = {"what", "which", "who", "whom", "whose", "where", "when", "why", "how", "is", "are", "was", "were", "the",
            "this", "that", "these", "those", "does", "color", "colour", "many", "much", "name", "there", "of",
            "people", "person", "picture", "image", "sign", "written", "kind", "wearing", "holding", "doing"}
_VIETNAMESE = {"là", "gì", "có", "của", "này", "không", "được", "nào", "nhiêu", "mấy", "đâu", "ở", "và", "những", "các",
               "người", "cái", "màu", "tên"}
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def _script_language(ch: str) -> str | None:
    """The language a character's script says on its own (kana, Hangul, Thai, Han), else None."""
    code = ord(ch)
    if 0x3040 <= code <= 0x30FF or 0x31F0 <= code <= 0x31FF or 0xFF66 <= code <= 0xFF9F:
        return "ja"
    if 0xAC00 <= code <= 0xD7AF or 0x1100 <= code <= 0x11FF or 0x3130 <= code <= 0x318F:
        return "ko"
    if 0x0E00 <= code <= 0x0E7F:
        return "th"
    if 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF:
        return "zh"
    return None


def detect_language(text: str) -> str | None:
    """The language of ``text`` by its script and letters (module doc): ``"ja"``, ``"zh"``, ``"ko"``, ``"th"``,
    ``"vi"``, ``"en"``, or None when the letters do not tell."""
    scripts = collections.Counter(_script_language(ch) for ch in text)
    scripts.pop(None, None)
    if scripts:
        return "ja" if "ja" in scripts else scripts.most_common(1)[0][0]
    marks = [c for c in unicodedata.normalize("NFD", text) if unicodedata.combining(c)]
    words = _WORD.findall(unicodedata.normalize("NFC", text.lower()))
    english = sum(w in _ENGLISH for w in words)
    if english >= 2 and not any(w in _VIETNAMESE for w in words) and sum(not w.isascii() for w in words) < english:
        return "en"  # an English question that names a Vietnamese word (is the word phở written here?)
    if ("đ" in text.lower() or any(m in _VIETNAMESE_MARKS for m in marks) or sum(m in _TONE_MARKS for m in marks) >= 2
            or any(w in _VIETNAMESE for w in words)):
        return "vi"
    if sum(w in _ENGLISH for w in words) >= 2:
        return "en"
    return None


def count_languages(records: Iterable) -> dict[str, int]:
    """``{language: questions}`` of training records (``.question``; ``.extra["language"]`` where the dataset
    has the field, else :func:`detect_language`; ``"?"`` for undetermined)."""
    counts: collections.Counter = collections.Counter()
    for r in records:
        lang = (getattr(r, "extra", None) or {}).get("language") or detect_language(r.question) or "?"
        counts[str(lang).strip().lower()] += 1
    return dict(counts.most_common())


def write_training_languages(records: Iterable, workdir: str, split: str) -> dict[str, int]:
    """Counts the languages of the training ``records`` (:func:`count_languages`) and writes them to
    ``<workdir>/languages.json`` (``{"split": ..., "questions": {language: n}}``,
    :func:`openvivqa_jax.outputs.write_json`); returns the counts."""
    counts = count_languages(records)
    outputs.write_json(os.path.join(workdir, LANGUAGES_FILE), {"split": split, "questions": counts}, indent=1)
    return counts


def training_languages(workdir: str) -> set[str] | None:
    """The languages a run in ``workdir`` was trained on (at least :data:`MIN_SHARE` of its training questions, from
    ``languages.json``); None when the run has no readable file (runs made before it was written)."""
    try:
        counts = read_json(os.path.join(workdir, LANGUAGES_FILE))["questions"]
        total = sum(int(n) for n in counts.values())
    except (ValueError, KeyError, TypeError, AttributeError):  # no file (read_json's ValueError), or not ours
        return None
    return {lang for lang, n in counts.items() if lang != "?" and total and int(n) / total >= MIN_SHARE}
