"""Examples built per image, in this process or on Apache Beam when the user asks for it.

Building a real dataset is slow where every photo is decoded, re-encoded and OCRed at build time. The
builders that do that work describe each split as a list of :class:`ImageGroup` (one image file and the
questions about it, everything but the ``image`` and ``ocr`` features already filled in) and hand it to
:func:`generate`, which turns each group into examples with one pure, module-level function,
:func:`image_examples` (the per-image work itself is :func:`tfds_builders.image_work.process_image`):

* without Beam options: in this process, over :func:`tfds_builders.image_work.map_images` (``num_workers``
  processes, results in task order);
* with Beam options (``tfds build ... --beam_pipeline_options=...``, or ``DownloadConfig(beam_runner=...,
  beam_options=...)``): as a Beam ``PTransform`` (``Create`` of the groups, ``Reshuffle``, ``FlatMap`` of
  :func:`image_examples`) that TFDS writes with its Beam writer. Locally the DirectRunner with
  ``direct_running_mode=multi_processing,direct_num_workers=N`` uses N processes; the same builder runs on
  Dataflow, Spark or Flink with their runner options.

Both paths call the same function on the same groups, and TFDS orders the written examples by a hash of their
keys in both writers, so the two builds hold the same examples in the same order.

Bad images: under the builder's ``skip_missing_images`` the questions of a bad image are skipped, counted
and logged (in this process: in the builder's skip counter; on Beam: in the Beam counter
``<name>/missing_or_corrupt_image`` and the worker's log); otherwise the build stops with a
:class:`tfds_builders.readers.ImageFileError` naming the annotation file, the question and the image.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

from absl import logging

from tfds_builders import image_work, readers

__all__ = ["ImageGroup", "beam_requested", "BeamWhenAsked", "image_examples", "generate"]


@dataclasses.dataclass(frozen=True)
class ImageGroup:
    """One image file and the examples of the questions about it (plain, picklable values).

    Attributes:
      path: the image file.
      source: the annotation file, named in errors.
      records: ``(key, record label, example)`` per question: the example holds every feature except
        ``image`` and ``ocr``; the label (``"question 17"``) is named in errors.
      tokens: the image's OCR tokens from a file (``[{text, box, score}]``), or None to use the tokens
        of ``settings.ocr_engine`` (none when that engine is ``"none"``).
    """

    path: str
    source: str
    records: tuple[tuple[str, str, dict], ...]
    tokens: tuple[dict, ...] | None = None


def beam_requested(download_config: Any) -> bool:
    """Whether a ``tfds.download.DownloadConfig`` asks for Beam (a runner or pipeline options given)."""
    return download_config is not None and bool(
        getattr(download_config, "beam_runner", None) or getattr(download_config, "beam_options", None))


class BeamWhenAsked:
    """Mixin for a ``GeneratorBasedBuilder``: records in ``self.use_beam`` whether the build was given Beam
    options (:func:`beam_requested`), before the split generators run."""

    use_beam: bool = False

    def _download_and_prepare(self, dl_manager, download_config=None):  # noqa: D401 - TFDS hook
        self.use_beam = beam_requested(download_config)
        if self.use_beam:
            logging.info("%s: generating examples with Apache Beam (%s)", self.name,
                         getattr(download_config, "beam_options", None) or getattr(download_config, "beam_runner"))
        return super()._download_and_prepare(dl_manager, download_config)


def _first(group: ImageGroup) -> str:
    return group.records[0][1] if group.records else ""


def image_examples(group: ImageGroup, settings: image_work.ImageSettings, skip_missing_images: bool = False,
                   name: str = "build", result: image_work.ImageResult | None = None) -> list[tuple[str, dict]]:
    """The examples of one image: the per-image work, then ``image`` and ``ocr`` added to each question's example.

    Pure apart from logging and (on Beam) a counter: the examples depend only on the group, the image file
    and ``settings``.

    Args:
      group: the image and its questions.
      settings: the decoder limits and OCR engine (:class:`tfds_builders.image_work.ImageSettings`).
      skip_missing_images: a bad image skips its questions (counted) instead of stopping the build.
      name: counter namespace and log prefix (``"evjvqa/test"``).
      result: the image's :func:`~tfds_builders.image_work.process_image` result when already computed
        (the in-process path computes it in worker processes); None = compute it here.

    Returns:
      ``[(key, example)]`` in the group's order; ``[]`` for a skipped bad image.

    Raises:
      ImageFileError: a bad image (one line: annotation file, question, image) unless skipped.
    """
    if result is None:
        result = image_work.process_image(image_work.ImageTask(group.path, _first(group)), settings)
    if result.error is not None:
        error = readers.record_error(group.source, _first(group), result.error, readers.ImageFileError)
        if not skip_missing_images:
            raise error
        logging.warning("%s: skipped %d questions (missing_or_corrupt_image): %s", name, len(group.records), error)
        try:
            from apache_beam.metrics import Metrics

            Metrics.counter(name, "missing_or_corrupt_image").inc(len(group.records))
        except ImportError:  # pragma: no cover - Beam is only needed when it runs
            pass
        return []
    tokens = list(group.tokens) if group.tokens is not None else result.tokens
    ocr = readers.ocr_feature(tokens)
    return [(key, {**example, "image": result.encoded, "ocr": ocr}) for key, _, example in group.records]


def _in_process(groups: Sequence[ImageGroup], settings, skip_missing_images, name, num_workers, policy,
                ocr_stats) -> Iterator[tuple[str, dict]]:
    tasks = [image_work.ImageTask(g.path, _first(g)) for g in groups]
    for group, result in zip(groups, image_work.map_images(tasks, settings, num_workers)):
        for key, n in result.stats.items():
            ocr_stats[key] = ocr_stats.get(key, 0) + n
        try:
            yield from image_examples(group, settings, False, name, result)
        except readers.ImageFileError as e:
            for _ in group.records:  # one skip per question, as the builders count them
                policy.handle("missing_or_corrupt_image", e)


def generate(groups: Sequence[ImageGroup], settings: image_work.ImageSettings, *, use_beam: bool,
             skip_missing_images: bool, name: str, num_workers: int | None = None,
             policy: readers.ErrorPolicy | None = None, ocr_stats: dict | None = None):
    """The examples of a split: an iterator (in this process) or a Beam ``PTransform`` (``use_beam``).

    Args:
      groups: the split's images and questions, in file order.
      settings: per-image work settings.
      use_beam: return a Beam ``PTransform`` (module doc) instead of an iterator.
      skip_missing_images: as the builder config (module doc).
      name: counter namespace / log prefix.
      num_workers: processes for the in-process path (:func:`tfds_builders.image_work.map_images`).
      policy: the builder's error policy (in-process path: counts skips per question).
      ocr_stats: dict the in-process path adds the OCR engine's counters to.

    Returns:
      ``Iterator[(key, example)]`` or ``beam.PTransform`` producing ``(key, example)``.
    """
    image_work.ocr.check_engine(settings.ocr_engine, settings.ocr_lang)  # fail fast, before any worker
    if not use_beam:
        if policy is None:
            policy = readers.ErrorPolicy(readers.SkipCounter(name), skip_missing_images, False)
        return _in_process(list(groups), settings, skip_missing_images, name, num_workers, policy,
                           {} if ocr_stats is None else ocr_stats)
    import apache_beam as beam

    return (beam.Create(list(groups))
            | "Reshuffle" >> beam.Reshuffle()  # spread the images over the workers
            | "PerImage" >> beam.FlatMap(image_examples, settings=settings,
                                         skip_missing_images=skip_missing_images, name=name))
