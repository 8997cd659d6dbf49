"""Scene-text OCR for the VQA builders: Tesseract at build time, or pre-computed OCR JSON files.

Every OCR token is a dict ``{"text": str, "box": (x0, y0, x1, y1), "score": float}``:

* ``text`` has passed through :func:`openvivqa_jax.text.normalize.normalize_text` (the answer rules).
  Normalization may make several words of one engine word (``"mộc,"`` -> ``"mộc ,"``, ``"10.500đ"`` ->
  ``"10,500 đồng"``); :func:`split_copyable` then makes one token per word with its own box, so that
  every word can be copied by the pointer (answers are matched word by word). :func:`run_tesseract`
  returns unsplit tokens; the engines (:func:`run_ocr`) and OCR files (:func:`load_ocr_file`) split.
* ``box`` is xyxy in image-relative units, every coordinate in ``[0, 1]`` (x divided by the image width,
  y by the image height), ``x0 <= x1`` and ``y0 <= y1``.
* ``score`` is the engine confidence in ``[0, 1]`` (Tesseract's ``conf`` / 100).

:func:`run_tesseract` calls Tesseract through ``pytesseract.image_to_data`` (word level, ``level == 5``
rows of Tesseract's TSV output). Small images (OpenViVQA thumbnails are about 280x210 pixels) are
converted to grayscale and upscaled so that the shorter side is at least ``min_side`` pixels, because
Tesseract's LSTM recogniser is trained on text about 20-30 pixels high; on the OpenViVQA sample this
turns nearly empty output into readable words (``"bánh cosy quế các vị"``, ``"10.500"``).

:func:`load_ocr_file` reads a JSON file ``{image_id: [{"text", "box", "score"}, ...]}`` of per-image
OCR tokens (for example produced by another OCR system) and validates every token.

Nothing is dropped silently: tokens removed because of low confidence, because they are empty after
normalization, or because they contain no letter or digit are counted in an optional ``stats`` dict and
logged with absl logging.
"""

from __future__ import annotations

import collections
import functools
import io
import math
import os
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from absl import logging
from PIL import Image, ImageOps

from openvivqa_jax.text.normalize import normalize_text
from openvivqa_jax.errors import UserError

__all__ = [
    "OcrUnavailableError",
    "OcrFileError",
    "check_tesseract",
    "run_tesseract",
    "load_ocr_file",
    "read_ocr_table",
    "ocr_tokens_for",
    "validate_tokens",
    "tokens_to_arrays",
    "split_copyable",
    "reading_order",
    "merge_ocr_passes",
    "plausible_token",
    "run_ocr_passes",
    "detect_text_boxes",
    "run_detector_tesseract",
    "run_ocr",
    "check_engine",
    "ENGINES",
    "DEFAULT_ENGINE",
    "DEFAULT_OCR_PASSES",
]

#: Tesseract's "sparse text" page segmentation mode: find as much text as possible in no particular
#: order. Scene photos have scattered signboards, not a page layout, so it beats the default (3).
DEFAULT_PSM = 11
#: Words below this Tesseract confidence (0-100) are dropped (counted in ``stats``).
DEFAULT_MIN_CONFIDENCE = 50.0
#: Images whose shorter side is below this (pixels) are upscaled to it before OCR.
DEFAULT_MIN_SIDE = 600


class OcrUnavailableError(UserError, RuntimeError):
    """Raised when the Tesseract binary or a requested language's traineddata is not installed."""


class OcrFileError(UserError, ValueError):
    """Raised when an OCR JSON file is malformed; the message names the file and the image id."""


@functools.lru_cache(maxsize=None)
def _installed_languages() -> frozenset[str]:
    """Returns the languages Tesseract reports (``tesseract --list-langs``), cached per process.

    Raises:
        OcrUnavailableError: if pytesseract is not importable or the binary cannot be run.
    """
    try:
        import pytesseract
    except ImportError as e:  # pragma: no cover - pytesseract is a hard dependency
        raise OcrUnavailableError(
            "pytesseract is not installed; `pip install pytesseract` and install the tesseract binary "
            "(Debian/Ubuntu: `apt-get install tesseract-ocr tesseract-ocr-vie`)."
        ) from e
    try:
        pytesseract.get_tesseract_version()
        langs = pytesseract.get_languages(config="")
    except (pytesseract.TesseractNotFoundError, OSError) as e:
        raise OcrUnavailableError(
            f"The tesseract binary was not found or cannot run ({e}). Install it (Debian/Ubuntu: "
            "`apt-get install tesseract-ocr tesseract-ocr-vie`) or set "
            "`pytesseract.pytesseract.tesseract_cmd` to its path; alternatively give the builder a "
            "pre-computed OCR JSON file."
        ) from e
    return frozenset(langs)


def check_tesseract(lang: str = "vie") -> None:
    """Checks that Tesseract and every language of ``lang`` (``"vie"``, ``"vie+eng"``) are installed.

    Args:
        lang: Tesseract language string; several languages are joined with ``+``.

    Raises:
        OcrUnavailableError: naming what is missing and how to install it.
    """
    installed = _installed_languages()
    missing = [part for part in lang.split("+") if part and part not in installed]
    if missing:
        pkgs = " ".join(f"tesseract-ocr-{m.lower().replace('_', '-')}" for m in missing)
        raise OcrUnavailableError(
            f"Tesseract language data {missing} not installed (installed: {sorted(installed)}). Install "
            f"it (Debian/Ubuntu: `apt-get install {pkgs}`) or put `{missing[0]}.traineddata` into the "
            "tessdata directory (TESSDATA_PREFIX)."
        )


def _to_pil(image: Any) -> Image.Image:
    """Converts a PIL image, ``(height, width, 3)`` / ``(height, width)`` uint8 array, encoded bytes
    or a file path to an RGB PIL image.

    Raises:
        TypeError: for any other type. ValueError: for an array of the wrong rank.
    """
    if isinstance(image, Image.Image):
        img = image
    elif isinstance(image, np.ndarray):
        if image.ndim not in (2, 3):
            raise ValueError(f"image array must be (height, width[, channels]), got shape {image.shape}")
        arr = image if image.dtype == np.uint8 else np.clip(image, 0, 255).astype(np.uint8)
        img = Image.fromarray(arr[..., :3] if arr.ndim == 3 else arr)
    elif isinstance(image, (bytes, bytearray)):
        img = Image.open(io.BytesIO(image))
    elif isinstance(image, (str, os.PathLike)):
        img = Image.open(image)
    else:
        raise TypeError(f"run_tesseract: unsupported image type {type(image).__name__}")
    return img.convert("RGB")


def _bump(stats: MutableMapping[str, int] | None, key: str, n: int = 1) -> None:
    if stats is not None and n:
        stats[key] = stats.get(key, 0) + n


def _word_rows(data: dict, min_confidence: float, counts: collections.Counter, keep_symbols: bool = False):
    """The word rows of a ``pytesseract.image_to_data`` dict that pass the filters, as ``(text, conf, left,
    top, width, height)`` with ``text`` normalized and ``conf`` a float in [0, 100]; every row dropped is
    counted in ``counts`` (low confidence, empty after normalization, symbols only unless ``keep_symbols``).
    Page/block/paragraph/line rows (level != 5) and empty word rows carry no text and are skipped."""
    for level, raw, conf, left, top, w, h in zip(
        data["level"], data["text"], data["conf"], data["left"], data["top"], data["width"], data["height"]
    ):
        if int(level) != 5 or not str(raw).strip():
            continue
        counts["words_raw"] += 1
        conf = float(conf)
        if conf < min_confidence:
            counts["dropped_low_confidence"] += 1
            continue
        text = normalize_text(str(raw))
        if not text:
            counts["dropped_empty_after_normalization"] += 1
            continue
        if not keep_symbols and not any(ch.isalnum() for ch in text):
            counts["dropped_symbols_only"] += 1
            continue
        yield text, conf, left, top, w, h


def run_tesseract(
    image: Any,
    lang: str = "vie",
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    psm: int = DEFAULT_PSM,
    min_side: int = DEFAULT_MIN_SIDE,
    keep_symbols: bool = False,
    stats: MutableMapping[str, int] | None = None,
) -> list[dict]:
    """Runs Tesseract on one image and returns its words as normalized OCR tokens.

    Preprocessing: RGB -> grayscale (Tesseract binarises internally; colour photos of signboards read
    much better from luminance), then Lanczos upscaling by ``min_side / min(height, width)`` when the
    shorter side is below ``min_side``. Boxes are divided by the *upscaled* size, so they are relative
    to the original image too. Sets ``OMP_THREAD_LIMIT=1`` in the environment if it is unset (the
    Tesseract manual's advice when several OCR calls share few cores; it is also faster here).

    Args:
        image: PIL image, ``(height, width, 3)`` uint8 array, encoded image bytes, or a path.
        lang: Tesseract language(s), e.g. ``"vie"`` or ``"vie+eng"``.
        min_confidence: words whose Tesseract confidence (0-100) is below this are dropped.
        psm: Tesseract page segmentation mode (11: sparse text, suited to scene photos).
        min_side: shorter-side size in pixels below which the image is upscaled.
        keep_symbols: if False, words without any letter or digit (``"|"``, ``"—"``, ``"`"``, mostly
            texture misread as glyphs) are dropped.
        stats: optional counter dict; incremented keys: ``images``, ``words_raw``, ``kept``,
            ``dropped_low_confidence``, ``dropped_empty_after_normalization``, ``dropped_symbols_only``.

    Returns:
        A list of ``{"text": str, "box": (x0, y0, x1, y1), "score": float}`` in Tesseract's reading
        order; ``text`` normalized (non-empty), box xyxy in ``[0, 1]``, score = conf / 100 in ``[0, 1]``.

    Raises:
        OcrUnavailableError: if the tesseract binary or the language data is missing.
        TypeError, ValueError: for an unsupported image value.
    """
    check_tesseract(lang)
    import pytesseract

    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    img = ImageOps.grayscale(_to_pil(image))
    width, height = img.size
    if min(width, height) < min_side:
        scale = min_side / min(width, height)
        img = img.resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.LANCZOS)
    big_w, big_h = img.size
    try:
        data = pytesseract.image_to_data(
            img, lang=lang, config=f"--psm {int(psm)}", output_type=pytesseract.Output.DICT
        )
    except pytesseract.TesseractNotFoundError as e:  # binary removed after the check
        raise OcrUnavailableError(f"The tesseract binary was not found: {e}") from e
    counts: collections.Counter[str] = collections.Counter()
    tokens = []
    for text, conf, left, top, w, h in _word_rows(data, min_confidence, counts, keep_symbols):
        x0 = min(max(float(left) / big_w, 0.0), 1.0)
        y0 = min(max(float(top) / big_h, 0.0), 1.0)
        x1 = min(max(float(left + w) / big_w, 0.0), 1.0)
        y1 = min(max(float(top + h) / big_h, 0.0), 1.0)
        tokens.append({"text": text, "box": (x0, y0, x1, y1), "score": min(max(conf / 100.0, 0.0), 1.0)})
    counts["kept"] += len(tokens)
    counts["images"] += 1
    logging.debug("run_tesseract: %s", dict(counts))
    if stats is not None:
        for key, n in counts.items():
            _bump(stats, key, n)
    return tokens


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
        raise OcrFileError(f"{where}: expected a list of OCR tokens, got {type(tokens).__name__}")
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
        raise OcrFileError(f"{where}: token {i} is {type(tok).__name__}, expected an object")
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
            "width/height; skip_invalid_records / --skip_bad skip such tokens)"
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
    from openvivqa_jax import jsonio

    data = jsonio.read_json(path, what="OCR file", error=OcrFileError, repeated_keys="error")
    if not isinstance(data, dict):
        raise OcrFileError(f"{path}: expected a JSON object {{image_id: [tokens]}}, got {type(data).__name__}")
    local: dict[str, int] = {}
    out = {str(k): validate_tokens(v, source=str(path), image_id=str(k), stats=local, skip_invalid=skip_invalid)
           for k, v in data.items()}
    if local:
        logging.info("load_ocr_file(%s): %s", path, local)
    for key, n in local.items():
        _bump(stats, key, n)
    return out


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


# ------------------------------------------------------------------------------ tesseract passes (engine)
#: Tesseract passes merged by the ``tesseract`` engine: grayscale, then the R, G, B channels.
DEFAULT_OCR_PASSES = ("gray", "R", "G", "B")
#: Boxes of two passes' words overlapping by at least this IoU are one word (the more confident is kept).
OCR_MERGE_IOU = 0.5
#: Tesseract confidence (/100) above which a word of a colour-channel pass, or a vowel-less word, is trusted alone.
CONFIDENT_SCORE = 0.9
_VI_VOWELS = frozenset("aeiouyăâêôơư" "àáảãạằắẳẵặầấẩẫậèéẻẽẹềếểễệìíỉĩịòóỏõọồốổỗộờớởỡợùúủũụừứửữựỳýỷỹỵ")
_VI_LETTERS = frozenset("abcdeghiklmnopqrstuvxyđfjwz") | _VI_VOWELS


def _iou(a, b) -> float:
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


def run_ocr_passes(image: Any, passes: Sequence[str] = DEFAULT_OCR_PASSES, stats: MutableMapping[str, int] | None = None,
                   filter_tokens: bool = True, lang: str = "vie") -> list[dict]:
    """The ``tesseract`` engine: :func:`run_tesseract` (psm 11) over the named passes of ``image``,
    filtered and merged by :func:`merge_ocr_passes`.

    Tesseract binarizes one channel of a colour image, so text on saturated signboards (white on red,
    black on blue) can vanish in luminance and survive in a channel. With ``filter_tokens``: the first
    pass is trusted; a word of a later pass is kept only when it is read with confidence >=
    :data:`CONFIDENT_SCORE` or another pass read something at the same place (IoU >=
    :data:`OCR_MERGE_IOU`); then tokens failing :func:`plausible_token` are dropped. On 40 synthetic
    street scenes (89 shop names) this keeps 76 names readable with as many spurious words as the
    grayscale pass alone (22 vs 23), which reads only 44 names; all passes unfiltered read 80 names but
    add 74 spurious words.

    Args:
      image: RGB PIL image (or anything :func:`run_tesseract` takes).
      passes: subset of ``gray``, ``R``, ``G``, ``B``, in order.
      stats: optional counter dict: run_tesseract's counters summed over passes, plus
        ``dropped_uncorroborated``, ``dropped_implausible`` and ``merged_duplicates``.
      filter_tokens: apply the two filters above (False: the union of all passes).
      lang: Tesseract language(s).

    Returns:
      Merged tokens in reading order; texts normalized, not yet split (see :func:`run_ocr`).

    Raises:
      ValueError: an unknown pass name. OcrUnavailableError: no tesseract / language data.
    """
    arr = np.asarray(_to_pil(image))
    results = []
    for p in passes:
        if p == "gray":
            src = arr
        elif p in ("R", "G", "B"):
            src = arr[..., "RGB".index(p)]
        else:
            raise ValueError(f"unknown OCR pass {p!r}; expected gray, R, G or B")
        results.append(run_tesseract(src, lang=lang, stats=stats))
    counts = {"dropped_uncorroborated": 0, "dropped_implausible": 0}
    if filter_tokens:
        kept = [results[0]] if results else []
        for i in range(1, len(results)):
            ok = [t for t in results[i] if float(t["score"]) >= CONFIDENT_SCORE or any(
                _iou(t["box"], u["box"]) >= OCR_MERGE_IOU for j, other in enumerate(results) if j != i for u in other)]
            counts["dropped_uncorroborated"] += len(results[i]) - len(ok)
            kept.append(ok)
        n = sum(map(len, kept))
        kept = [[t for t in toks if plausible_token(t)] for toks in kept]
        counts["dropped_implausible"] += n - sum(map(len, kept))
        results = kept
    merged = merge_ocr_passes(results)
    counts["merged_duplicates"] = sum(map(len, results)) - len(merged)
    merged, counts["dropped_fragments"] = drop_fragments(merged)
    for k, v in counts.items():
        _bump(stats, k, v)
    return merged


# ------------------------------------------------------------------------ detector + tesseract (engine)
#: Crops of detected text boxes are scaled so that their height is at least this (pixels) before
#: Tesseract reads them as one line (``--psm 7``). On the 7 real OpenViVQA examples 48 reads 8 of the 15
#: answer words the question lacks, 32 and 64 read 7.
DETECTOR_MIN_CROP_HEIGHT = 48
#: Padding around a detected box, as a fraction of its height, before cropping.
DETECTOR_PAD = 0.15
#: The DB detector shipped in the ``rapidocr-onnxruntime`` wheel (PP-OCRv4, PaddleOCR's text detector).
DETECTOR_MODEL = "ch_PP-OCRv4_det_infer.onnx"


@functools.lru_cache(maxsize=None)
def _detector(threads: int):
    """The DB text detector of ``rapidocr-onnxruntime`` (ONNX file inside the wheel), one per process.

    Raises:
      OcrUnavailableError: the package (or its onnxruntime / opencv dependencies) is not installed.
    """
    try:
        import rapidocr_onnxruntime
        from rapidocr_onnxruntime.ch_ppocr_det import TextDetector
    except ImportError as e:
        raise OcrUnavailableError(f"the detector+tesseract OCR engine needs `pip install rapidocr-onnxruntime` "
                                  f"({e})") from e
    model = Path(rapidocr_onnxruntime.__file__).parent / "models" / DETECTOR_MODEL
    if not model.is_file():
        raise OcrUnavailableError(f"{model}: the DB detector model is missing from rapidocr-onnxruntime")
    # The wheel's own Det settings (config.yaml): input scaled so the shorter side is 736, DB thresholds
    # 0.3 (pixel) / 0.5 (box), unclip ratio 1.6.
    config = {"model_path": str(model), "use_cuda": False, "use_dml": False, "intra_op_num_threads": threads,
              "inter_op_num_threads": 1, "limit_side_len": 736, "limit_type": "min", "mean": [0.5, 0.5, 0.5],
              "std": [0.5, 0.5, 0.5], "thresh": 0.3, "box_thresh": 0.5, "max_candidates": 1000,
              "unclip_ratio": 1.6, "use_dilation": True, "score_mode": "fast"}
    return TextDetector(config)


def detect_text_boxes(image: Any, threads: int = 1) -> np.ndarray:
    """Text boxes of PP-OCR's DB detector (``rapidocr-onnxruntime``'s ONNX model; nothing is downloaded).

    Args:
      image: anything :func:`run_tesseract` takes; RGB.
      threads: onnxruntime intra-op threads (1 suits one process per core).

    Returns:
      float32 ``(num_boxes, 4, 2)`` quadrilaterals in pixels of ``image`` (x, y per corner, clockwise from
      top-left).
    """
    arr = np.asarray(_to_pil(image))
    boxes, _ = _detector(int(threads))(np.ascontiguousarray(arr[..., ::-1]))  # the model reads BGR (OpenCV)
    if boxes is None or len(boxes) == 0:
        return np.zeros((0, 4, 2), np.float32)
    return np.asarray(boxes, np.float32).reshape(-1, 4, 2)


def run_detector_tesseract(
    image: Any,
    lang: str = "vie",
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    min_crop_height: int = DETECTOR_MIN_CROP_HEIGHT,
    threads: int = 1,
    filter_tokens: bool = True,
    stats: MutableMapping[str, int] | None = None,
) -> list[dict]:
    """The ``detector+tesseract`` engine: DB text detection, then Tesseract on each detected line.

    Each detected quadrilateral's axis-aligned bounds, padded by :data:`DETECTOR_PAD` of its height, are
    cropped from the grayscale image, scaled (Lanczos) so that the crop is at least ``min_crop_height``
    pixels high, and read with ``tesseract -l <lang> --psm 7`` (one text line) through
    ``pytesseract.image_to_data``. Tesseract's word rows give each word of the line its own box (mapped
    back from crop pixels to the image), so one detected line becomes several word tokens. Words below
    ``min_confidence`` or without a letter or digit are dropped (counted); with ``filter_tokens`` tokens
    failing :func:`plausible_token` are dropped too (``dropped_implausible``). Overlapping detections are
    merged as in :func:`merge_ocr_passes`.

    Args:
      image: RGB PIL image, ``(height, width, 3)`` uint8 array, encoded bytes or a path.
      lang: Tesseract language(s).
      min_confidence: Tesseract word confidence (0-100) below which a word is dropped.
      min_crop_height: crops shorter than this (pixels) are upscaled to it.
      threads: onnxruntime intra-op threads for the detector.
      filter_tokens: drop implausible tokens (:func:`plausible_token`).
      stats: optional counter: ``images``, ``detected_boxes``, ``words_raw``, ``kept``,
        ``dropped_low_confidence``, ``dropped_empty_after_normalization``, ``dropped_symbols_only``,
        ``dropped_implausible``, ``merged_duplicates``.

    Returns:
      Tokens ``{"text", "box": (x0, y0, x1, y1) in [0, 1], "score": conf / 100}`` in reading order; texts
      normalized, not yet split (see :func:`run_ocr`).

    Raises:
      OcrUnavailableError: tesseract, its language data or rapidocr-onnxruntime is missing.
    """
    check_tesseract(lang)
    import pytesseract

    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    pil = _to_pil(image)
    width, height = pil.size
    gray = ImageOps.grayscale(pil)
    quads = detect_text_boxes(pil, threads=threads)
    counts: collections.Counter[str] = collections.Counter(images=1, detected_boxes=len(quads))
    tokens: list[dict] = []
    for quad in quads:
        qx0, qy0 = float(quad[:, 0].min()), float(quad[:, 1].min())
        qx1, qy1 = float(quad[:, 0].max()), float(quad[:, 1].max())
        pad = DETECTOR_PAD * (qy1 - qy0)
        cx0, cy0 = max(0, int(math.floor(qx0 - pad))), max(0, int(math.floor(qy0 - pad)))
        cx1, cy1 = min(width, int(math.ceil(qx1 + pad))), min(height, int(math.ceil(qy1 + pad)))
        if cx1 - cx0 < 2 or cy1 - cy0 < 2:
            continue
        crop = gray.crop((cx0, cy0, cx1, cy1))
        scale = max(1.0, min_crop_height / (cy1 - cy0))
        if scale > 1.0:
            crop = crop.resize((max(1, round((cx1 - cx0) * scale)), max(1, round((cy1 - cy0) * scale))), Image.LANCZOS)
        sx, sy = crop.size[0] / (cx1 - cx0), crop.size[1] / (cy1 - cy0)
        data = pytesseract.image_to_data(crop, lang=lang, config="--psm 7", output_type=pytesseract.Output.DICT)
        for text, conf, left, top, w, h in _word_rows(data, min_confidence, counts):
            x0 = (cx0 + left / sx) / width
            y0 = (cy0 + top / sy) / height
            x1 = (cx0 + (left + w) / sx) / width
            y1 = (cy0 + (top + h) / sy) / height
            box = tuple(min(max(v, 0.0), 1.0) for v in (x0, y0, x1, y1))
            tokens.append({"text": text, "box": box, "score": min(max(conf / 100.0, 0.0), 1.0)})
    if filter_tokens:
        n = len(tokens)
        tokens = [t for t in tokens if plausible_token(t)]
        counts["dropped_implausible"] += n - len(tokens)
    merged = merge_ocr_passes([tokens])
    counts["merged_duplicates"] += len(tokens) - len(merged)
    merged, n_fragments = drop_fragments(merged)
    counts["dropped_fragments"] += n_fragments
    counts["kept"] += len(merged)
    for key, n in counts.items():
        _bump(stats, key, n)
    return merged


# ------------------------------------------------------------------------------------------- engines
#: OCR engines run on an image (builders' ``ocr_engine`` and ``predict --ocr``).
ENGINES = ("detector+tesseract", "tesseract", "none")
#: The default engine: it finds the most answer words on real photos (docs/results.md, OCR engines).
DEFAULT_ENGINE = "detector+tesseract"


def run_ocr(image: Any, engine: str = DEFAULT_ENGINE, *, lang: str = "vie", stats: MutableMapping[str, int] | None = None,
            passes: Sequence[str] = DEFAULT_OCR_PASSES, filter_tokens: bool = True, threads: int = 1) -> list[dict]:
    """Runs one OCR engine on one image and returns copyable word tokens.

    Engines (:data:`ENGINES`): ``tesseract`` (:func:`run_ocr_passes`), ``detector+tesseract``
    (:func:`run_detector_tesseract`), ``none`` (no tokens). An image of one colour has no text and
    gets no tokens without running an engine (counted as ``uniform_images_skipped``). The tokens are then
    split into single words with their own boxes by :func:`split_copyable`. A pure function of its arguments (the same image
    gives the same tokens), so it can run in worker processes.

    Args:
      image: RGB PIL image, ``(height, width, 3)`` uint8 array, encoded bytes or a path.
      engine: one of :data:`ENGINES`.
      lang: Tesseract language(s).
      stats: optional counter dict (the engine's counters and :func:`split_copyable`'s).
      passes: the ``tesseract`` engine's passes.
      filter_tokens: the engines' plausibility filters.
      threads: the detector's onnxruntime threads.

    Returns:
      ``[{"text": one normalized word, "box": (x0, y0, x1, y1) in [0, 1], "score" in [0, 1]}]`` in
      reading order.

    Raises:
      ValueError: an unknown engine. OcrUnavailableError: the engine's programs are not installed.
    """
    if engine == "none":
        return []
    if engine not in ENGINES:
        raise ValueError(f"unknown OCR engine {engine!r}; expected one of {', '.join(ENGINES)}")
    image = _to_pil(image)
    extrema = image.getextrema()  # per band (min, max)
    if all(b[0] == b[1] for b in extrema):  # one colour everywhere: no text to read
        _bump(stats, "uniform_images_skipped")
        return []
    if engine == "tesseract":
        tokens = run_ocr_passes(image, passes, stats, filter_tokens=filter_tokens, lang=lang)
    else:
        tokens = run_detector_tesseract(image, lang=lang, threads=threads, filter_tokens=filter_tokens, stats=stats)
    return split_copyable(tokens, stats)


def check_engine(engine: str, lang: str = "vie") -> None:
    """Checks up front that ``engine``'s programs are installed.

    Raises:
      ValueError: an unknown engine. OcrUnavailableError: naming what is missing.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown OCR engine {engine!r}; expected one of {', '.join(ENGINES)}")
    if engine != "none":
        check_tesseract(lang)
    if engine == "detector+tesseract":
        _detector(1)


def read_ocr_table(path: str, skip_invalid: bool = False) -> dict[str, list[dict]] | list[dict]:
    """Reads an OCR file given to prediction: ``{image: [tokens]}`` (validated by :func:`load_ocr_file`; keys
    are image ids, file names or stems) or, for a single image, a plain token list (validated by
    :func:`validate_tokens` under image id ``"(all)"``).

    Raises:
      OcrFileError: unreadable file, invalid JSON (line and column), or invalid tokens; the message starts
        with the path.
    """
    from openvivqa_jax import jsonio

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
