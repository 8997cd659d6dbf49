"""OCR engines run on an image: Tesseract (several passes over colour channels) and a DB text detector in
front of Tesseract.

:func:`run_tesseract` calls Tesseract through ``pytesseract.image_to_data`` (word level, ``level == 5``
rows of Tesseract's TSV output). Small images (OpenViVQA thumbnails are about 280x210 pixels) are
converted to grayscale and upscaled so that the shorter side is at least ``min_side`` pixels, because
Tesseract's LSTM recogniser is trained on text about 20-30 pixels high; on the OpenViVQA sample this
turns nearly empty output into readable words (``"bánh cosy quế các vị"``, ``"10.500"``).
:func:`run_ocr` is the one entry point of the builders and ``predict``: it picks an engine of
:data:`ENGINES` and returns copyable word tokens.

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
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from absl import logging
from PIL import Image, ImageOps

from openvivqa_jax.data.ocr.tokens import (CONFIDENT_SCORE, OCR_MERGE_IOU, _bump, _iou, drop_fragments,
                                           merge_ocr_passes, plausible_token, split_copyable)
from openvivqa_jax.errors import UserError
from openvivqa_jax.text.normalize import normalize_text

#: Tesseract's "sparse text" page segmentation mode: find as much text as possible in no particular
#: order. Scene photos have scattered signboards, not a page layout, so it beats the default (3).
DEFAULT_PSM = 11
#: Words below this Tesseract confidence (0-100) are dropped (counted in ``stats``).
DEFAULT_MIN_CONFIDENCE = 50.0
#: Images whose shorter side is below this (pixels) are upscaled to it before OCR.
DEFAULT_MIN_SIDE = 600


class OcrUnavailableError(UserError, RuntimeError):
    """Raised when the Tesseract binary or a requested language's traineddata is not installed."""


@functools.lru_cache(maxsize=None)
def _installed_languages() -> frozenset[str]:
    """Returns the languages Tesseract reports (``tesseract --list-langs``), cached per process.

    Raises:
        OcrUnavailableError: if pytesseract is not importable or the binary cannot be run.
    """
    try:
        import pytesseract  # optional: only for the tesseract engines
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
    import pytesseract  # optional: only for the tesseract engines

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


# ------------------------------------------------------------------------------ tesseract passes (engine)
#: Tesseract passes merged by the ``tesseract`` engine: grayscale, then the R, G, B channels.
DEFAULT_OCR_PASSES = ("gray", "R", "G", "B")


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
        import rapidocr_onnxruntime  # optional, heavy: only for the text detector
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
    import pytesseract  # optional: only for the tesseract engines

    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    pil = _to_pil(image)
    gray = ImageOps.grayscale(pil)
    quads = detect_text_boxes(pil, threads=threads)
    counts: collections.Counter[str] = collections.Counter(images=1, detected_boxes=len(quads))
    tokens: list[dict] = []
    for quad in quads:
        tokens.extend(_read_line(pytesseract, gray, quad, lang, min_confidence, min_crop_height, counts))
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


def _read_line(pytesseract, gray, quad: np.ndarray, lang: str, min_confidence: float, min_crop_height: int,
               counts: collections.Counter) -> list[dict]:
    """The word tokens of one detected line of :func:`run_detector_tesseract`: the padded crop of ``quad``
    (``(4, 2)`` pixels) from the grayscale image, upscaled to ``min_crop_height``, read by Tesseract as one line,
    each word's box mapped back to the image in ``[0, 1]``; none for a crop under 2 pixels."""
    width, height = gray.size
    tokens: list[dict] = []
    qx0, qy0 = float(quad[:, 0].min()), float(quad[:, 1].min())
    qx1, qy1 = float(quad[:, 0].max()), float(quad[:, 1].max())
    pad = DETECTOR_PAD * (qy1 - qy0)
    cx0, cy0 = max(0, int(math.floor(qx0 - pad))), max(0, int(math.floor(qy0 - pad)))
    cx1, cy1 = min(width, int(math.ceil(qx1 + pad))), min(height, int(math.ceil(qy1 + pad)))
    if cx1 - cx0 < 2 or cy1 - cy0 < 2:
        return []
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
    return tokens


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
