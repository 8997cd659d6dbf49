"""OCR token clean-up: validate tokens read from files, split them into copyable words, merge passes,
drop fragments and implausible reads.

Every OCR token is a dict ``{"text": str, "box": (x0, y0, x1, y1), "score": float}`` (the contract is in
:mod:`openvivqa_jax.data.ocr`). Nothing here runs an engine or reads a file; every function is pure over
token lists, so the engines (:mod:`~openvivqa_jax.data.ocr.engines`) and the OCR files
(:mod:`~openvivqa_jax.data.ocr.files`) share one set of rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
from absl import logging

from openvivqa_jax.errors import UserError
from openvivqa_jax.jsonio import json_kind
from openvivqa_jax.text.normalize import normalize_text


class OcrFileError(UserError, ValueError):
    """Raised when an OCR JSON file is malformed; the message names the file and the image id."""


def _bump(stats: MutableMapping[str, int] | None, key: str, n: int = 1) -> None:
    """Adds ``n`` to ``stats[key]`` when a counter dict is given."""
    if stats is not None and n:
        stats[key] = stats.get(key, 0) + n


#: How far outside [0, 1] a box coordinate of an OCR file may lie and still be clipped to the image edge, as a
#: fraction of the image side (2%: engines emit boxes a few pixels past the edge of text that touches it).
BOX_TOLERANCE = 0.02


def validate_tokens(
    tokens: Any,
    *,
    source: str,
    image_id: str,
    stats: MutableMapping[str, int] | None = None,
    split: bool = True,
    skip_invalid: bool = False,
) -> list[dict]:
    """Validates and normalizes one image's OCR tokens read from a file, then (``split``) splits them into
    single copyable words with their own boxes (:func:`split_copyable`).

    Args:
        tokens: a list of ``{"text": str, "box": [x0, y0, x1, y1], "score": float}``; ``score`` may be
            omitted (then 1.0). Boxes must be xyxy in ``[0, 1]``; a coordinate at most :data:`BOX_TOLERANCE`
            outside is clipped to the edge (counted as ``clipped_boxes``).
        source: the file the tokens come from (for error messages).
        image_id: the image the tokens belong to (for error messages).
        stats: optional counter; ``dropped_empty_after_normalization`` counts tokens whose text is
            empty after normalization (they are dropped); :func:`split_copyable`'s counters.
        split: split multi-word tokens (``"giá 20,000 đồng"``) into words.
        skip_invalid: a bad token (box beyond the tolerance or inverted, bad score, no text) is skipped,
            counted as ``skipped_invalid_tokens`` and logged, instead of an error (a builder's
            ``skip_invalid_records``, predict's ``--skip_bad``).

    Returns:
        The tokens with normalized text (one word each with ``split``), boxes as float tuples and float
        scores.

    Raises:
        OcrFileError: naming ``source``, ``image_id`` and the token index for a wrong type, a missing
            key, a box that is not 4 numbers in [0, 1] with x0 <= x1, y0 <= y1, or a score outside [0, 1].
    """
    where = f"{source}: image {image_id!r}"
    if not isinstance(tokens, list):
        raise OcrFileError(f"{where}: expected a list of OCR tokens, got {json_kind(tokens)}")
    out = []
    for i, tok in enumerate(tokens):
        try:
            token = _checked_token(tok, i, where, stats)
        except OcrFileError as e:
            if not skip_invalid:
                raise
            _bump(stats, "skipped_invalid_tokens")
            logging.warning("skipped OCR token (skipped_invalid_tokens): %s", e)
            continue
        if token is not None:
            out.append(token)
    return split_copyable(out, stats) if split else out


def _checked_token(tok: Any, i: int, where: str, stats: MutableMapping[str, int] | None) -> dict | None:
    """One token of :func:`validate_tokens` checked and normalized; None when its text normalizes to nothing.

    Raises:
        OcrFileError: a bad token (one line naming ``where`` and the token index).
    """
    if not isinstance(tok, Mapping):
        raise OcrFileError(f"{where}: token {i} is {json_kind(tok)}, expected an object")
    if not isinstance(tok.get("text"), str):
        raise OcrFileError(f"{where}: token {i} has no string 'text' (got {tok.get('text')!r})")
    box = tok.get("box")
    try:
        box = tuple(float(v) for v in box)
    except (TypeError, ValueError):
        raise OcrFileError(f"{where}: token {i} ({tok['text']!r}) 'box' is not 4 numbers: {box!r}") from None
    if len(box) != 4 or not all(math.isfinite(v) for v in box):
        raise OcrFileError(f"{where}: token {i} ({tok['text']!r}) 'box' is not 4 finite numbers: {box!r}")
    if any(v < -BOX_TOLERANCE or v > 1 + BOX_TOLERANCE for v in box) or box[0] > box[2] or box[1] > box[3]:
        raise OcrFileError(
            f"{where}: token {i} ({tok['text']!r}) 'box' {box} must be xyxy in [0, 1] (within "
            f"{BOX_TOLERANCE:g}, clipped) with x0 <= x1, y0 <= y1 (pixel boxes must be divided by the image "
            "width/height; to skip such tokens, counted: the builder config's skip_invalid_records when "
            "building, predict's --skip_bad)"
        )
    if any(v < 0.0 or v > 1.0 for v in box):
        _bump(stats, "clipped_boxes")
    score = tok.get("score", 1.0)
    try:
        score = float(score)
    except (TypeError, ValueError):
        raise OcrFileError(f"{where}: token {i} ({tok['text']!r}) 'score' is not a number: {score!r}") from None
    if not 0.0 <= score <= 1.0:
        raise OcrFileError(f"{where}: token {i} ({tok['text']!r}) 'score' {score} is outside [0, 1]")
    text = normalize_text(tok["text"])
    if not text:
        _bump(stats, "dropped_empty_after_normalization")
        return None
    return {"text": text, "box": tuple(min(max(v, 0.0), 1.0) for v in box), "score": score}


def tokens_to_arrays(tokens: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Converts OCR tokens to the layout of the TFDS ``ocr`` feature.

    Args:
        tokens: ``num_ocr`` dicts ``{"text", "box", "score"}``.

    Returns:
        ``{"text": list[str] (num_ocr,), "box": float32 (num_ocr, 4), "score": float32 (num_ocr,)}``.
    """
    return {
        "text": [t["text"] for t in tokens],
        "box": np.asarray([t["box"] for t in tokens], np.float32).reshape(-1, 4),
        "score": np.asarray([t["score"] for t in tokens], np.float32).reshape(-1),
    }


# ------------------------------------------------------------------------------------------ copyable words
def split_copyable(tokens: Sequence[Mapping[str, Any]], stats: MutableMapping[str, int] | None = None) -> list[dict]:
    """Splits normalized OCR tokens into single words, each with its own box, so that the pointer can copy
    every word (answers are matched word by word, :meth:`openvivqa_jax.text.answer_vocab.AnswerVocab.encode`).

    A token's text has passed :func:`openvivqa_jax.text.normalize.normalize_text` (the answer rules), which
    may make several words of one engine word: ``'"BA'`` -> ``'" ba'``, ``'24,'`` -> ``'24 ,'``,
    ``'10.500đ'`` -> ``'10,500 đồng'``. Each whitespace-separated word becomes one token; words without a
    letter or digit (``"``, ``,``) are dropped (counted as ``split_dropped_punctuation``). A word's box
    takes the token's full height and a share of its width proportional to the word's characters among
    all the token's non-space characters (punctuation included, since it takes room on the sign):
    for ``'" ba'`` over ``x0..x1``, ``ba`` gets ``x0 + (x1 - x0) / 3 .. x1``. The score is the token's.

    Args:
      tokens: ``{"text", "box": (x0, y0, x1, y1) in [0, 1], "score"}``, text normalized.
      stats: optional counter: ``split_tokens`` (tokens that became several words) and
        ``split_dropped_punctuation``.

    Returns:
      Tokens in the same order, one word each (``text`` without spaces).
    """
    out: list[dict] = []
    for tok in tokens:
        words = str(tok["text"]).split()
        if len(words) == 1:
            out.append(dict(tok, text=words[0]))
            continue
        if not words:
            continue
        x0, y0, x1, y1 = (float(v) for v in tok["box"])
        total = sum(len(w) for w in words)
        kept = 0
        pos = 0
        for w in words:
            a, pos = pos, pos + len(w)
            if not any(ch.isalnum() for ch in w):
                _bump(stats, "split_dropped_punctuation")
                continue
            kept += 1
            bx0 = x0 + (x1 - x0) * a / total
            bx1 = x0 + (x1 - x0) * pos / total
            out.append(dict(tok, text=w, box=(bx0, y0, bx1, y1)))
        if kept > 1:
            _bump(stats, "split_tokens")
    return out


# ------------------------------------------------------------------------------ merging and filtering
#: Boxes of two passes' words overlapping by at least this IoU are one word (the more confident is kept).
OCR_MERGE_IOU = 0.5
#: Tesseract confidence (/100) above which a word of a colour-channel pass, or a vowel-less word, is trusted alone.
CONFIDENT_SCORE = 0.9
_VI_VOWELS = frozenset("aeiouyăâêôơư" "àáảãạằắẳẵặầấẩẫậèéẻẽẹềếểễệìíỉĩịòóỏõọồốổỗộờớởỡợùúủũụừứửữựỳýỷỹỵ")
_VI_LETTERS = frozenset("abcdeghiklmnopqrstuvxyđfjwz") | _VI_VOWELS


def _iou(a, b) -> float:
    """Intersection over union of two xyxy boxes (0 when both are empty)."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def reading_order(tokens: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Tokens sorted top to bottom by line, then left to right; a line is tokens whose vertical centres
    lie within half a token height of the previous token's (dicts copied)."""
    ordered = sorted((dict(t) for t in tokens), key=lambda t: (t["box"][1] + t["box"][3]) / 2)
    lines: list[list[dict]] = []
    for t in ordered:
        cy, hh = (t["box"][1] + t["box"][3]) / 2, t["box"][3] - t["box"][1]
        if lines:
            last = lines[-1][-1]
            if abs(cy - (last["box"][1] + last["box"][3]) / 2) <= 0.5 * max(hh, last["box"][3] - last["box"][1]):
                lines[-1].append(t)
                continue
        lines.append([t])
    return [t for line in lines for t in sorted(line, key=lambda t: t["box"][0])]


def merge_ocr_passes(passes: Sequence[Sequence[Mapping[str, Any]]], iou: float = OCR_MERGE_IOU) -> list[dict]:
    """Merges the words of several OCR passes over one image.

    Words are considered from the most to the least confident; a word whose box overlaps an already kept
    word's box by IoU >= ``iou`` is the same word read again and is dropped. The kept words are returned in
    :func:`reading_order`.

    Args:
      passes: per pass, tokens ``{"text", "box": (x0, y0, x1, y1) in [0, 1], "score" in [0, 1]}``.
      iou: overlap threshold.

    Returns:
      The merged tokens (dicts copied).
    """
    cands = [(float(t["score"]), -p, i, dict(t)) for p, toks in enumerate(passes) for i, t in enumerate(toks)]
    cands.sort(key=lambda c: (-c[0], -c[1], c[2]))
    kept: list[dict] = []
    for _, _, _, t in cands:
        if all(_iou(t["box"], k["box"]) < iou for k in kept):
            kept.append(t)
    return reading_order(kept)


#: A token whose box has at least this share of its area inside a larger token's box is inside it.
FRAGMENT_INSIDE = 0.9


def drop_fragments(tokens: Sequence[Mapping[str, Any]], inside: float = FRAGMENT_INSIDE) -> tuple[list[dict], int]:
    """Drops fragment tokens: a token whose box lies inside a larger token's box (at least ``inside`` of its
    area) and whose text is part of that token's text. A line read by a second pass or crop often comes back
    as the word and as pieces of it (``à`` and ``i`` inside ``hà`` and ``nội``); the pieces are the same ink
    read worse, and as OCR tokens they offer wrong copy targets.

    Args:
      tokens: ``{"text", "box": (x0, y0, x1, y1) in [0, 1], ...}``.
      inside: share of the fragment's box area that must lie inside the larger box.

    Returns:
      ``(kept tokens in their order, number dropped)``.
    """
    def area(b) -> float:
        return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])

    def norm(t) -> str:
        return str(t["text"]).lower()

    out, dropped = [], 0
    for i, t in enumerate(tokens):
        a = area(t["box"])
        is_fragment = False
        for j, u in enumerate(tokens):
            if i == j or area(u["box"]) <= a or norm(t) == norm(u) or norm(t) not in norm(u):
                continue
            x0, y0 = max(t["box"][0], u["box"][0]), max(t["box"][1], u["box"][1])
            x1, y1 = min(t["box"][2], u["box"][2]), min(t["box"][3], u["box"][3])
            if a > 0 and area((x0, y0, x1, y1)) >= inside * a:
                is_fragment = True
                break
        if is_fragment:
            dropped += 1
        else:
            out.append(dict(t))
    return out, dropped


def plausible_token(token: Mapping[str, Any], confident: float = CONFIDENT_SCORE) -> bool:
    """Whether an OCR token can be Vietnamese scene text rather than a misread texture.

    Rejected: a letter outside the Vietnamese alphabet (plus f, j, w, z for loanwords and brands), such
    as ``ñ``, ``œ``, ``ð``, ``ï``, which Tesseract's ``vie`` model emits only when it reads shapes as text;
    and, below ``confident``, an all-letter token without a vowel (every Vietnamese syllable has one;
    abbreviations such as ``đt`` are printed clearly and read confidently).
    """
    text = str(token["text"]).replace(" ", "")
    if any(c.isalpha() and c not in _VI_LETTERS for c in text):
        return False
    alnum = [c for c in text if c.isalnum()]
    if alnum and all(c.isalpha() for c in alnum) and not any(c in _VI_VOWELS for c in alnum):
        return float(token.get("score", 0.0)) >= confident
    return True
