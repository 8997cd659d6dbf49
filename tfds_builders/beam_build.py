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

Two ways in: the ``evjvqa`` builder plans its groups itself (:class:`GroupPlanner`) and uses :func:`generate`
for both paths; the older builders (``openvivqa``, ``vivqa``, ``st_vqa``, ``textvqa``) keep their own generator
for plain builds and, with Beam options, run that same generator through :func:`from_local_generator`, which
swaps in stand-ins that decode nothing and sends the grouped examples to Beam.

Files: the launching process reads the annotation files and every worker opens the image files by their path,
so the manual folder must be visible at the same local path everywhere (true for the DirectRunner and for
clusters with a shared filesystem; ``gs://`` manual folders are not supported by the builders' readers).

Verification: a build checks what it wrote before TFDS moves it into place (:meth:`BeamWhenAsked._download_and_prepare`,
:func:`verify_written`): per split, the examples written must equal the questions planned minus the questions
skipped (in this process: the examples the generator yielded; on Beam: the planned questions minus the Beam counter
``<name>/missing_or_corrupt_image``), and every shard file must exist and hold the number of records its split info
says. Otherwise the build stops with one :class:`BuildVerificationError` line naming the split and both counts,
and the incomplete folder is removed, so a build that lost data (a Beam worker that dropped its output, a shard
never written) is never reported as prepared.

Element sizes: the elements that go through Beam before the per-image step are :class:`ImageGroup` s (an image
path, the questions' text fields and OCR tokens from a file), never image bytes; the stored bytes exist only from
the per-image step on, on their way to TFDS's writer.

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

from openvivqa_jax.data import build_check
from openvivqa_jax.errors import UserError
from tfds_builders import image_work, readers

__all__ = ["ImageGroup", "GroupPlanner", "beam_requested", "BeamWhenAsked", "image_examples", "generate",
           "from_local_generator", "BuildVerificationError", "verify_written"]

#: Name of the Beam counter of questions skipped for a bad image (namespace ``<builder>/<split>``).
SKIP_COUNTER = "missing_or_corrupt_image"


class BuildVerificationError(readers.DatasetInputError, UserError):
    """A build wrote other examples than it planned (a split short of examples, a shard file missing or short)."""


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


class GroupPlanner:
    """Collects a split's questions into :class:`ImageGroup` s, one per (image file, OCR key), in first-seen order.

    A builder parses its annotation files as usual (record errors, duplicates, missing files) and calls
    :meth:`add` for every question that has an image file; :meth:`groups` then gives the groups, with the
    OCR-file tokens of each image when ``ocr`` reads them from a file.
    """

    def __init__(self):
        self._groups: dict[tuple[str, str], list[tuple[str, str, dict]]] = {}
        self._sources: dict[tuple[str, str], str] = {}

    def add(self, image_path: Any, ocr_key: str, source: Any, key: str, record: str, example: dict) -> None:
        """Adds one question: its image, the image's OCR key (image id), the annotation file, the example key,
        the record label named in errors and the example without ``image``/``ocr``."""
        group = (str(image_path), str(ocr_key))
        self._sources.setdefault(group, str(source))
        self._groups.setdefault(group, []).append((key, record, example))

    def __len__(self) -> int:
        return sum(len(v) for v in self._groups.values())

    def groups(self, ocr: "readers.OcrSource | None" = None) -> list[ImageGroup]:
        """The groups; with an ``ocr`` source of engine ``file`` each group carries that file's tokens."""
        from_file = ocr is not None and ocr.engine == "file"
        return [ImageGroup(path=p, source=self._sources[(p, k)], records=tuple(recs),
                           tokens=tuple(ocr.get(k, None)) if from_file else None)
                for (p, k), recs in self._groups.items()]


def beam_requested(download_config: Any) -> bool:
    """Whether a ``tfds.download.DownloadConfig`` asks for Beam (a runner or pipeline options given)."""
    return download_config is not None and bool(
        getattr(download_config, "beam_runner", None) or getattr(download_config, "beam_options", None))


class BeamWhenAsked(build_check.RecordsSources):
    """Mixin for a ``GeneratorBasedBuilder``: records in ``self.use_beam`` whether the build was given Beam
    options (:func:`beam_requested`), before the split generators run, and verifies what the build wrote
    (:func:`verify_written`) before TFDS moves the build into place; what the build was made from is recorded
    (:class:`openvivqa_jax.data.build_check.RecordsSources`).

    A builder that overrides ``_generate_examples`` passes its split's examples through :meth:`_expect`.
    """

    use_beam: bool = False

    def _download_and_prepare(self, dl_manager, download_config=None):  # noqa: D401 - TFDS hook
        self.use_beam = beam_requested(download_config)
        self._planned: dict[str, int] = {}
        self._yielded: dict[str, int] = {}
        self._beam_skips: dict[str, int | None] = {}
        if self.use_beam:
            logging.info("%s: generating examples with Apache Beam (%s)", self.name,
                         getattr(download_config, "beam_options", None) or getattr(download_config, "beam_runner"))
        out = super()._download_and_prepare(dl_manager, download_config)
        if download_config is None or not download_config.max_examples_per_split:
            verify_written(self, self._expected_counts())
        return out

    def _expect(self, split: str, examples, planned: int | None = None):
        """Registers a split's examples for verification and returns them: an iterator is wrapped to count the
        examples it yields; a Beam ``PTransform`` needs ``planned`` (questions sent to Beam).

        Raises:
          DatasetInputError: (when the split is generated) it has no examples, naming the split and its skips.
        """
        if planned is not None:
            if not planned:
                raise self._no_examples(split)
            self._planned[split] = int(planned)
            return examples

        def counted():
            self._yielded[split] = 0
            for item in examples:
                self._yielded[split] += 1
                yield item
            if not self._yielded[split]:  # TFDS would stop with a traceback ("No examples were yielded")
                raise self._no_examples(split)

        return counted()

    def _no_examples(self, split: str) -> readers.DatasetInputError:
        """The one-line error of a split left without examples (an empty file, or every question skipped)."""
        skipped = dict(getattr(self, "skip_counts", {}).get(split) or {})
        why = f"every question was skipped ({skipped})" if skipped else "its annotation file holds no question"
        return readers.DatasetInputError(f"{self.name}/{self.builder_config.name} split {split!r} has no examples: "
                                         f"{why}; fix or drop its file")

    def _process_pipeline_result(self, pipeline_result) -> None:  # noqa: D401 - TFDS hook
        """Reads the Beam skip counters of the planned splits (None where the runner reports no metrics)."""
        super()._process_pipeline_result(pipeline_result)
        for split in self._planned:
            self._beam_skips[split] = beam_counter(pipeline_result, f"{self.name}/{split}", SKIP_COUNTER)

    def _expected_counts(self) -> dict[str, tuple[int, str]]:
        out = {split: (n, "examples generated") for split, n in self._yielded.items()}
        for split, n in self._planned.items():
            skipped = self._beam_skips.get(split)
            if skipped is None and self.builder_config.skip_missing_images:
                logging.warning("%s/%s: the Beam runner reported no skip counter; only the shard files are "
                                "checked", self.name, split)
                continue
            skipped = skipped or 0
            out[split] = (n - skipped, f"{n} questions planned - {skipped} skipped for bad images")
        return out

    def _beam_applies(self) -> bool:
        """Whether this build generates on Beam: Beam options were given (a builder may add conditions)."""
        return self.use_beam

    def _generate_examples(self, split: str, *args):
        """The split's examples: the builder's ``_generate_local(split, *args)`` iterator, or, when
        :meth:`_beam_applies`, a Beam ``PTransform`` running the same generator with its per-image work on
        Beam (:func:`from_local_generator`)."""
        if self._beam_applies():
            transform, planned = from_local_generator(
                self, lambda: self._generate_local(split, *args), name=f"{self.name}/{split}",
                skip_missing_images=self.builder_config.skip_missing_images, with_count=True)
            return self._expect(split, transform, planned)
        return self._expect(split, self._generate_local(split, *args))


def beam_counter(result, namespace: str, name: str) -> int | None:
    """The committed (else attempted) value of a Beam counter in a pipeline result; None where the runner
    reports no metrics. A counter never incremented is 0."""
    try:
        from apache_beam.metrics.metric import MetricsFilter

        found = result.metrics().query(MetricsFilter().with_namespace(namespace).with_name(name))["counters"]
    except Exception:  # noqa: BLE001 - runners without metrics support raise various errors
        return None
    total = 0
    for c in found:
        value = c.committed if c.committed is not None else c.attempted
        total += int(value or 0)
    return total


def verify_written(builder, expected: dict[str, tuple[int, str]]) -> None:
    """Checks a finished build: each split's examples against ``expected``, and every shard file on disk.

    Args:
      builder: the TFDS builder, its ``info.splits`` set by the writer and ``data_dir`` the build's folder.
      expected: ``{split: (examples, how they were counted)}``.

    Raises:
      BuildVerificationError: one line naming the split, the written and the expected counts, or the shard
        file that is missing or holds other records than its split info says.
    """
    splits = builder.info.splits
    for split, (n, how) in sorted(expected.items()):
        written = splits[split].num_examples if split in splits else 0
        if written != n:
            raise BuildVerificationError(
                f"{builder.name}/{builder.builder_config.name} split {split!r}: {written} examples written, {n} "
                f"expected ({how}); the build lost examples and was not kept (on Beam's DirectRunner, "
                "direct_running_mode=multi_processing can drop a worker's output: rerun with fewer workers or "
                "without Beam options)")
    try:
        build_check.check_split_files(builder, count_records=True)
    except build_check.IncompleteBuildError as e:
        raise BuildVerificationError(f"{e}; the build was not kept") from None


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

    OCR: the group's file tokens when given; else the tokens of ``settings.ocr_engine`` when it is not
    ``"none"``; else the example's own ``ocr`` (none when it has none).

    Returns:
      ``[(key, example)]`` in the group's order; ``[]`` for a skipped bad image.

    Raises:
      ImageFileError: a bad image (one line: annotation file, question, image) unless skipped.
    """
    if result is None:
        result = image_work.process_image(image_work.ImageTask(group.path), settings)  # record named below
    if result.error is not None:
        error = readers.record_error(group.source, _first(group), result.error, readers.ImageFileError)
        if not skip_missing_images:
            raise error
        logging.warning("%s: skipped %d questions (missing_or_corrupt_image): %s", name, len(group.records), error)
        try:
            from apache_beam.metrics import Metrics

            Metrics.counter(name, SKIP_COUNTER).inc(len(group.records))
        except ImportError:  # pragma: no cover - Beam is only needed when it runs
            pass
        return []
    if group.tokens is not None:
        ocr = readers.ocr_feature(list(group.tokens))
    elif settings.ocr_engine != "none":
        ocr = readers.ocr_feature(result.tokens)
    else:  # no engine: the example's own OCR (from a file, or none)
        return [(key, {"ocr": readers.ocr_feature([]), **example, "image": result.encoded})
                for key, _, example in group.records]
    return [(key, {**example, "image": result.encoded, "ocr": ocr}) for key, _, example in group.records]


def _in_process(groups: Sequence[ImageGroup], settings, skip_missing_images, name, num_workers, policy,
                ocr_stats) -> Iterator[tuple[str, dict]]:
    tasks = [image_work.ImageTask(g.path) for g in groups]
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


@dataclasses.dataclass(frozen=True)
class _Pending:
    """Stands for an image's stored bytes while a builder's generator is planned (:func:`from_local_generator`)."""

    path: str
    source: str
    record: str


class _DeferredImages(readers.LoadOrSkip):
    """A stand-in for :class:`tfds_builders.readers.ImageCache` that decodes nothing: :meth:`load` returns a
    :class:`~tfds_builders.readers.LoadedImage` whose ``encoded`` is a :class:`_Pending` (size 0 x 0)."""

    def __init__(self, settings: image_work.ImageSettings):
        self.settings = settings

    def prepare(self, items) -> None:
        del items

    def load(self, path, *, source, record) -> readers.LoadedImage:
        return readers.LoadedImage(encoded=_Pending(str(path), str(source), str(record)), pil=None, width=0, height=0)


class _DeferredOcr:
    """A stand-in for an :class:`tfds_builders.readers.OcrSource` that runs an engine: no tokens while planning
    (the engine runs on Beam, per image); everything else is the wrapped source's."""

    def __init__(self, ocr: "readers.OcrSource"):
        self._ocr = ocr

    def get(self, image_id, image) -> list:
        del image_id, image
        return []

    def __getattr__(self, name):
        return getattr(self._ocr, name)


def from_local_generator(builder: Any, make_local, *, name: str, skip_missing_images: bool,
                         with_count: bool = False):
    """A builder's own example generator, turned into a Beam ``PTransform`` for its per-image work.

    The builder's generator (``make_local()``, which loads images through ``builder._images`` and OCR tokens
    through ``builder._ocr``) runs here with stand-ins that decode nothing and run no OCR engine, so every
    record check, duplicate and missing file is handled exactly as in a plain build; each yielded example's
    ``image`` is then a placeholder. The examples are grouped per image file and the groups go to Beam, where
    :func:`image_examples` decodes each image once, stores its bytes and, when the builder's OCR source runs an
    engine, fills ``ocr`` with that engine's tokens (OCR from a file is already in the examples).

    Args:
      builder: a builder with ``_images`` (:class:`tfds_builders.readers.ImageCache`) and ``_ocr``
        (:class:`tfds_builders.readers.OcrSource` or None), as the image builders set them up.
      make_local: returns the builder's ``(key, example)`` iterator for the split.
      name: counter namespace / log prefix.
      skip_missing_images: the builder config's flag (bad images: counted skip on Beam, else an error).
      with_count: also return the number of questions sent to Beam.

    Returns:
      A Beam ``PTransform`` producing ``(key, example)`` (and, with ``with_count``, the number of questions).
    """
    images, ocr = builder._images, builder._ocr
    settings = images.settings
    builder._images = _DeferredImages(settings)
    if ocr is not None and settings.ocr_engine != "none":
        builder._ocr = _DeferredOcr(ocr)
    planner = GroupPlanner()
    try:
        for key, example in make_local():
            pending = example.pop("image")
            planner.add(pending.path, pending.path, pending.source, key, pending.record, example)
    finally:
        builder._images, builder._ocr = images, ocr
    logging.info("%s: %d questions on %d images go to Beam", name, len(planner), len(planner.groups()))
    transform = generate(planner.groups(), settings, use_beam=True, skip_missing_images=skip_missing_images, name=name)
    return (transform, len(planner)) if with_count else transform
