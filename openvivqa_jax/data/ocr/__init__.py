"""Scene-text OCR for the VQA builders and ``predict``: engines run on an image, or pre-computed OCR files.

Every OCR token is a dict ``{"text": str, "box": (x0, y0, x1, y1), "score": float}``:

* ``text`` has passed through :func:`openvivqa_jax.text.normalize.normalize_text` (the answer rules).
  Normalization may make several words of one engine word (``"mộc,"`` -> ``"mộc ,"``, ``"10.500đ"`` ->
  ``"10,500 đồng"``); :func:`split_copyable` then makes one token per word with its own box, so that
  every word can be copied by the pointer (answers are matched word by word). :func:`run_tesseract`
  returns unsplit tokens; the engines (:func:`run_ocr`) and OCR files (:func:`load_ocr_file`) split.
* ``box`` is xyxy in image-relative units, every coordinate in ``[0, 1]`` (x divided by the image width,
  y by the image height), ``x0 <= x1`` and ``y0 <= y1``.
* ``score`` is the engine confidence in ``[0, 1]`` (Tesseract's ``conf`` / 100).

The package has three parts, each importable on its own:

* :mod:`~openvivqa_jax.data.ocr.engines`: Tesseract and the DB detector in front of it (:func:`run_ocr`);
* :mod:`~openvivqa_jax.data.ocr.tokens`: token clean-up shared by engines and files (validation, copyable
  words, merging passes, fragments, plausibility);
* :mod:`~openvivqa_jax.data.ocr.files`: OCR JSON files ``{image_id: [tokens]}`` (:func:`load_ocr_file`).

Nothing is dropped silently: every token removed is counted in an optional ``stats`` dict and logged.
"""

from openvivqa_jax.data.ocr.engines import (DEFAULT_ENGINE, DEFAULT_MIN_CONFIDENCE, DEFAULT_MIN_SIDE,
                                            DEFAULT_OCR_PASSES, DEFAULT_PSM, DETECTOR_MIN_CROP_HEIGHT,
                                            DETECTOR_MODEL, DETECTOR_PAD, ENGINES, OcrUnavailableError,
                                            check_engine, check_tesseract, detect_text_boxes,
                                            run_detector_tesseract, run_ocr, run_ocr_passes, run_tesseract)
from openvivqa_jax.data.ocr.files import load_ocr_file, ocr_tokens_for, read_ocr_table
from openvivqa_jax.data.ocr.tokens import (BOX_TOLERANCE, CONFIDENT_SCORE, FRAGMENT_INSIDE, OCR_MERGE_IOU,
                                           OcrFileError, drop_fragments, merge_ocr_passes, plausible_token,
                                           reading_order, split_copyable, tokens_to_arrays, validate_tokens)

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
    "drop_fragments",
    "plausible_token",
    "run_ocr_passes",
    "detect_text_boxes",
    "run_detector_tesseract",
    "run_ocr",
    "check_engine",
    "ENGINES",
    "DEFAULT_ENGINE",
    "DEFAULT_OCR_PASSES",
    "DEFAULT_PSM",
    "DEFAULT_MIN_CONFIDENCE",
    "DEFAULT_MIN_SIDE",
    "DETECTOR_MIN_CROP_HEIGHT",
    "DETECTOR_MODEL",
    "DETECTOR_PAD",
    "BOX_TOLERANCE",
    "CONFIDENT_SCORE",
    "FRAGMENT_INSIDE",
    "OCR_MERGE_IOU",
]
