"""The builders' per-image work (decode + OCR) as one pure function, and a parallel map over images.

:func:`process_image` is everything a builder does with one image file: decode it with the project's
one decoder (:func:`openvivqa_jax.data.images.decode_image`: EXIF orientation, transparency onto white,
16-bit by range, refusals of bombs, empty, truncated and too-small files), choose the bytes to store
(:func:`openvivqa_jax.data.images.encode_for_storage`: the file's bytes when they already decode to the
canonical pixels, else a lossless PNG) and run the OCR engine (:func:`openvivqa_jax.data.ocr.run_ocr`).
It depends only on its arguments (a file path and a frozen :class:`ImageSettings`), returns plain
picklable values and never raises for a bad image (the error is in the result), so any engine can call
it: :func:`map_images` here (worker processes), or a distributed runner such as Apache Beam
(``beam.Map(process_image, settings=settings)``).

:func:`map_images` runs it over many images in ``num_workers`` processes (default: the CPUs this
process may use) and yields the results in the order of the tasks, so the examples and their OCR tokens
are the same whatever the number of workers.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from openvivqa_jax.data import images, ocr

__all__ = ["ImageSettings", "ImageTask", "ImageResult", "process_image", "map_images", "default_num_workers"]


@dataclasses.dataclass(frozen=True)
class ImageSettings:
    """What to do with every image of a build (frozen, picklable).

    Attributes:
      ocr_engine: an engine of :data:`openvivqa_jax.data.ocr.ENGINES` run on the image, or ``"none"``
        (the builder takes OCR tokens from a file or not at all).
      ocr_lang: Tesseract language(s), e.g. ``"vie"``.
      max_pixels: the largest ``width * height`` accepted (checked from the header).
      min_side: the smallest shorter side accepted, pixels.
      keep_pixels: also return the decoded ``(height, width, 3)`` uint8 array (for builders that need
        the pixels, e.g. feature extraction); off by default to keep results small.
    """

    ocr_engine: str = "none"
    ocr_lang: str = "vie"
    max_pixels: int = images.DEFAULT_MAX_PIXELS
    min_side: int = images.DEFAULT_MIN_SIDE
    keep_pixels: bool = False


@dataclasses.dataclass(frozen=True)
class ImageTask:
    """One image to process.

    Attributes:
      path: the image file.
      question: the first question asking about it (its id or text), named in errors.
    """

    path: str
    question: str = ""


@dataclasses.dataclass
class ImageResult:
    """What :func:`process_image` returns (plain values; picklable).

    Attributes:
      path: the image file (as in the task).
      encoded: the bytes to store in the ``image`` feature, or None on error.
      width, height: pixels after the EXIF rotation (0 on error).
      tokens: OCR tokens ``[{"text", "box": (x0, y0, x1, y1) in [0, 1], "score"}]`` of the engine, one
        copyable word each (``[]`` for engine ``none`` and on error).
      stats: the engine's counters for this image.
      error: None, or a one-line message naming the file, the question and what is wrong.
      pixels: the decoded uint8 ``(height, width, 3)`` array when ``settings.keep_pixels``, else None.
    """

    path: str
    encoded: bytes | None
    width: int
    height: int
    tokens: list[dict]
    stats: dict[str, int]
    error: str | None = None
    pixels: Any = None


def process_image(task: ImageTask, settings: ImageSettings) -> ImageResult:
    """Decodes one image, picks its stored bytes and runs OCR on it (module doc). Pure: the result
    depends only on the file's bytes and ``settings``.

    Args:
      task: the image file and the question named in errors.
      settings: the decoder limits and the OCR engine.

    Returns:
      An :class:`ImageResult`; a bad image gives ``error`` (one line) and no bytes, and never raises.

    Raises:
      openvivqa_jax.data.ocr.OcrUnavailableError: the OCR engine's programs are not installed (an
        installation problem, not a bad image: the build stops).
    """
    try:
        raw = images.source_bytes(task.path)
    except OSError as e:
        where = f"image {task.path}" + (f" (question {task.question!r})" if task.question else "")
        return ImageResult(task.path, None, 0, 0, [], {}, f"{where}: cannot read ({e.strerror or e})")
    try:
        decoded = images.decode_image(raw, name=str(task.path), question=task.question or None,
                                      max_pixels=settings.max_pixels, min_side=settings.min_side)
    except images.ImageDecodeError as e:
        return ImageResult(task.path, None, 0, 0, [], {}, str(e))
    stats: dict[str, int] = {}
    tokens = ocr.run_ocr(decoded.pil, settings.ocr_engine, lang=settings.ocr_lang, stats=stats)
    return ImageResult(task.path, images.encode_for_storage(raw, decoded), decoded.pil.width, decoded.pil.height,
                       tokens, stats, None, decoded.array if settings.keep_pixels else None)


def default_num_workers() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _init_worker() -> None:
    os.environ["OMP_THREAD_LIMIT"] = "1"  # one core per worker for Tesseract (its manual's advice)


def map_images(tasks: Iterable[ImageTask], settings: ImageSettings, num_workers: int | None = None,
               ) -> Iterator[ImageResult]:
    """Runs :func:`process_image` over ``tasks`` and yields the results in the order of ``tasks``.

    With ``num_workers > 1`` (default :func:`default_num_workers`) and more than one task, the work runs
    in that many ``spawn``-started processes (``multiprocessing.Pool.imap``, which keeps the order; spawn
    rather than fork, since the builder's process holds TensorFlow's threads). The output does not
    depend on ``num_workers``: each image's result is a function of that image alone.

    Args:
      tasks: the images; a sequence or any iterable (consumed once).
      settings: passed to every call.
      num_workers: processes; 1 runs in this process.

    Yields:
      One :class:`ImageResult` per task, in order.

    Raises:
      ValueError: ``num_workers < 1``. OcrUnavailableError: the engine is not installed.
    """
    tasks = list(tasks) if not isinstance(tasks, Sequence) else tasks
    n = default_num_workers() if num_workers is None else int(num_workers)
    if n < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    ocr.check_engine(settings.ocr_engine, settings.ocr_lang)
    fn = functools.partial(process_image, settings=settings)
    if n == 1 or len(tasks) <= 1:
        yield from map(fn, tasks)
        return
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(min(n, len(tasks)), initializer=_init_worker) as pool:
        yield from pool.imap(fn, tasks, chunksize=1)
