"""Scene-text OCR for the VQA builders: Tesseract at build time, or pre-computed OCR JSON files.

Every OCR token is a dict ``{"text": str, "box": (x0, y0, x1, y1), "score": float}``:

* ``text`` has passed through :func:`openvivqa_jax.text.normalize.normalize_text` (DESIGN §4). One token
  is one recognised *word* of the engine; normalization may split it into several whitespace tokens
  (``"mộc,"`` -> ``"mộc ,"``, ``"10.500đ"`` -> ``"10,500 đồng"``); it stays one OCR token with one box.
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
import json
import math
import os
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from absl import logging
from PIL import Image, ImageOps

from openvivqa_jax.text.normalize import normalize_text

__all__ = [
    "OcrUnavailableError",
    "OcrFileError",
    "check_tesseract",
    "run_tesseract",
    "load_ocr_file",
    "validate_tokens",
    "tokens_to_arrays",
]

#: Tesseract's "sparse text" page segmentation mode: find as much text as possible in no particular
#: order. Scene photos have scattered signboards, not a page layout, so it beats the default (3).
DEFAULT_PSM = 11
#: Words below this Tesseract confidence (0-100) are dropped (counted in ``stats``).
DEFAULT_MIN_CONFIDENCE = 50.0
#: Images whose shorter side is below this (pixels) are upscaled to it before OCR.
DEFAULT_MIN_SIDE = 600


class OcrUnavailableError(RuntimeError):
    """Raised when the Tesseract binary or a requested language's traineddata is not installed."""


class OcrFileError(ValueError):
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
    for level, raw, conf, left, top, w, h in zip(
        data["level"], data["text"], data["conf"], data["left"], data["top"], data["width"], data["height"]
    ):
        if int(level) != 5 or not str(raw).strip():
            continue  # page/block/paragraph/line rows, and empty word rows, carry no text
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


def validate_tokens(
    tokens: Any,
    *,
    source: str,
    image_id: str,
    stats: MutableMapping[str, int] | None = None,
) -> list[dict]:
    """Validates and normalizes one image's OCR tokens read from a file.

    Args:
        tokens: a list of ``{"text": str, "box": [x0, y0, x1, y1], "score": float}``; ``score`` may be
            omitted (then 1.0). Boxes must be xyxy in ``[0, 1]`` (a tolerance of 1e-3 is clipped).
        source: the file the tokens come from (for error messages).
        image_id: the image the tokens belong to (for error messages).
        stats: optional counter; ``dropped_empty_after_normalization`` counts tokens whose text is
            empty after normalization (they are dropped).

    Returns:
        The tokens with normalized text, boxes as float tuples and float scores.

    Raises:
        OcrFileError: naming ``source``, ``image_id`` and the token index for a wrong type, a missing
            key, a box that is not 4 numbers in [0, 1] with x0 <= x1, y0 <= y1, or a score outside [0, 1].
    """
    where = f"{source}: image {image_id!r}"
    if not isinstance(tokens, list):
        raise OcrFileError(f"{where}: expected a list of OCR tokens, got {type(tokens).__name__}")
    out = []
    for i, tok in enumerate(tokens):
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
        if any(v < -1e-3 or v > 1 + 1e-3 for v in box) or box[0] > box[2] or box[1] > box[3]:
            raise OcrFileError(
                f"{where}: token {i} ({tok['text']!r}) 'box' {box} must be xyxy in [0, 1] with x0 <= x1, "
                "y0 <= y1 (pixel boxes must be divided by the image width/height)"
            )
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
            continue
        out.append({"text": text, "box": tuple(min(max(v, 0.0), 1.0) for v in box), "score": score})
    return out


def load_ocr_file(path: str | os.PathLike, stats: MutableMapping[str, int] | None = None) -> dict[str, list[dict]]:
    """Reads a JSON file of per-image OCR tokens ``{image_id: [{"text", "box", "score"}, ...]}``.

    Args:
        path: the JSON file. Image ids are JSON object keys (strings).
        stats: optional counter (see :func:`validate_tokens`); ``dropped_empty_after_normalization``
            totals are also logged.

    Returns:
        ``{image_id: tokens}`` with normalized, validated tokens (see :func:`validate_tokens`).

    Raises:
        OcrFileError: the file cannot be read, is not valid JSON (line and column given), is not an
            object, or any image's tokens are invalid (file and image id named).
    """
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise OcrFileError(f"{path}: cannot read OCR file: {e}") from e
    except json.JSONDecodeError as e:
        raise OcrFileError(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from e
    if not isinstance(data, dict):
        raise OcrFileError(f"{path}: expected a JSON object {{image_id: [tokens]}}, got {type(data).__name__}")
    local: dict[str, int] = {}
    out = {str(k): validate_tokens(v, source=str(path), image_id=str(k), stats=local) for k, v in data.items()}
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
