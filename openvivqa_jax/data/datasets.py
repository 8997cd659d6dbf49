"""Opening a dataset of ``tfds_builders/``: the TFDS builder named by ``config.data``, built first when it is
missing (or rebuilt when it is stale and ``data.rebuild`` is set), and a run's view of its splits
(:class:`DataSplits`: data sources, metadata records, model-ready records, each opened once).

Data flows one way: the builders (``tfds_builders/``) write the dataset, :mod:`openvivqa_jax.data.pipeline`
reads it. This module is where the two meet; the pipeline imports no builder. The builders are imported by name
(``tfds_builders.<builder>``), which registers them with TFDS; TensorFlow Datasets itself is imported only here
and when a source is opened.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import time
from typing import Any

import jax
from absl import logging

from openvivqa_jax import locks
from openvivqa_jax.data import build_check, model_ready, model_ready_cache, pipeline
from openvivqa_jax.data.records import DatasetError

__all__ = ["load_builder", "DataSplits"]


def load_builder(data_cfg, prepare: bool = True):
    """Returns the TFDS builder named by ``data_cfg`` (building it if needed).

    Args:
      data_cfg: ``config.data`` with ``builder`` (e.g. ``synthetic_openvivqa``), ``builder_config`` (a
        config name, or a JSON object of the builder's config class as ``tfds build --config`` takes
        it; its ``name`` must differ from the registered ones), ``data_dir`` (None:
        ``~/tensorflow_datasets``), ``manual_dir``, ``builder_kwargs`` and ``rebuild`` (rebuild a prepared
        dataset whose sources changed, instead of stopping).
      prepare: run ``download_and_prepare`` (idempotent; no network is used by our builders).

    Raises:
      DatasetError: if the builder package does not exist, a JSON builder config is malformed, the
        dataset was prepared in data_dir as tfrecord (`tfds build` without --file_format=array_record), or
        a builder that needs manually downloaded files finds no manual folder (one line naming the folder
        and ``--config.data.manual_dir``, then the builder's download instructions).
      tfds_builders.readers.DatasetInputError: bad source files (names the file and the record),
        raised by the builder and passed on unchanged.
      StaleDatasetError: the prepared dataset was built from other manual files or another builder config
        (:mod:`openvivqa_jax.data.build_check`) and ``data.rebuild`` is not set; with it, the dataset is
        rebuilt.
      IncompleteBuildError: a shard file of the prepared dataset is missing or short.

    With ``prepare``, logs one line saying which build the run reads: built now, or reused from where, made when
    and by whom, from which sources (:func:`openvivqa_jax.data.build_check.describe_build`).
    """
    import tensorflow_datasets as tfds  # heavy: imported when a dataset is opened, not with this module

    name = data_cfg.builder
    try:
        importlib.import_module(f"tfds_builders.{name}")
    except ModuleNotFoundError as e:
        raise DatasetError(f"no dataset builder tfds_builders/{name}: {e}") from e
    bc = data_cfg.get("builder_config") or ""
    data_dir = _data_dir(data_cfg)
    kwargs = dict(data_cfg.get("builder_kwargs") or {})
    if bc.lstrip().startswith("{"):
        # A JSON builder config, as `tfds build --config '{"name": ..., ...}'` takes it, e.g.
        # '{"name": "vivqa_skip", "ocr_engine": "none", "skip_invalid_records": true}'.
        cls = tfds.builder_cls(name)
        try:
            kwargs["config"] = cls.builder_config_cls(**json.loads(bc))
        except (json.JSONDecodeError, TypeError) as e:
            raise DatasetError(f"data.builder_config {bc!r} is not a valid {cls.builder_config_cls.__name__} "
                               f"JSON: {e}") from e
        full = name
    else:
        full = f"{name}/{bc}" if bc else name

    def make():
        try:
            return tfds.builder(full, data_dir=data_dir, file_format="array_record", **kwargs)
        except ValueError as e:
            if "File format is already set" not in str(e):
                raise
            # Prepared by `tfds build` without --file_format (its default is tfrecord).
            raise DatasetError(
                f"{full} in {data_dir} was built as tfrecord files; this pipeline reads array_record (random "
                f"access, no TensorFlow at read time). Rebuild it with `tfds build tfds_builders/{name} ... "
                "--file_format=array_record` (or choose another data.data_dir)") from e

    builder = make()
    if prepare:
        builder = _prepare(builder, make, full, data_cfg, data_dir)
    return builder


def _prepare(builder, make, full: str, data_cfg, data_dir: str):
    """Builds ``builder``'s dataset unless it is built and up to date (:func:`_stale`); returns the builder to
    read it with. A build runs under the dataset folder's build lock (:func:`openvivqa_jax.locks.hold_build`):
    a second process asking meanwhile waits (one note line), then finds it built.

    Raises:
      DatasetError, StaleDatasetError, IncompleteBuildError: as :func:`load_builder`.
    """
    import tensorflow_datasets as tfds

    manual = data_cfg.get("manual_dir")
    dl = tfds.download.DownloadConfig(manual_dir=os.path.expanduser(manual) if manual else None)
    folder = os.path.expanduser(manual) if manual else os.path.join(data_dir, "downloads", "manual")
    how = (getattr(builder, "MANUAL_DOWNLOAD_INSTRUCTIONS", "") or "").strip("\n")
    missing = DatasetError(
        f"{full} needs its source files in a manual folder, and {folder} does not exist or is empty; "
        f"put them there or set --config.data.manual_dir=<folder>. Instructions:\n{how}")

    def state(b, log: bool) -> str:  # "ready", "missing" or "stale"; raises for a missing manual folder
        prepared = os.path.exists(os.path.join(b.data_dir, "dataset_info.json"))
        if how and not prepared and not (os.path.isdir(folder) and os.listdir(folder)):
            raise missing
        if not prepared:
            return "missing"
        return "stale" if _stale(b, full, folder if how else None, bool(data_cfg.get("rebuild")), log) else "ready"

    built_here = False
    t0 = time.perf_counter()
    if state(builder, log=True) == "ready":
        _download_and_prepare(builder, dl, missing)  # built: TFDS only reads what is there
    else:
        with locks.hold_build(builder.data_dir, full):
            builder = make()  # anew: another process may have built it while this one waited
            now = state(builder, log=False)
            if now == "stale":
                shutil.rmtree(builder.data_dir)  # the stale build; rebuilt below from the sources given
                builder = make()
            built_here = now != "ready"
            _download_and_prepare(builder, dl, missing)
    build_check.check_split_files(builder)
    # Said aloud either way: a build found in a shared data folder may be another user's.
    logging.info("%s", build_check.describe_build(builder, time.perf_counter() - t0 if built_here else None))
    if not built_here:  # built earlier or by another process: the build's own log lines are not in this log
        _log_notes(builder, full)
    return builder


def _download_and_prepare(builder, dl, missing: DatasetError) -> None:
    """``builder.download_and_prepare``, TFDS's assertion on an empty manual folder as ``missing``."""
    try:
        builder.download_and_prepare(download_config=dl)
    except AssertionError as e:  # TFDS asserts that the manual folder exists and is not empty
        if not str(e).startswith("Manual directory"):
            raise
        raise missing from None


def _log_notes(builder, full: str) -> None:
    """Logs the notes of a dataset built earlier (:func:`openvivqa_jax.data.build_check.notes_summary`): what its
    build repaired and skipped, and the file that lists the records."""
    notes = build_check.read_notes(builder.data_dir)
    summary = build_check.notes_summary(notes) if notes else []
    if summary:
        logging.info("%s was built with repairs or skips (per file and first ids in %s): %s", full,
                     os.path.join(builder.data_dir, build_check.NOTES_FILE), "; ".join(summary))


def _data_dir(data_cfg) -> str:
    """``data.data_dir`` with ``~`` expanded; ``~/tensorflow_datasets`` when not set (TFDS's default)."""
    return os.path.expanduser(data_cfg.get("data_dir") or "~/tensorflow_datasets")


def _stale(builder, full: str, manual_dir: str | None, rebuild: bool, log: bool = True) -> bool:
    """Whether a prepared dataset must be rebuilt: its recorded sources (:mod:`openvivqa_jax.data.build_check`)
    differ from the builder config and manual folder given now, and ``data.rebuild`` is set.

    Raises:
      StaleDatasetError: they differ and ``data.rebuild`` is not set (one line naming what changed and the
        option that rebuilds).
    """
    recorded = build_check.read_sources(builder.data_dir)
    if recorded is None:
        if log:
            logging.warning("%s in %s has no record of the sources it was built from (built by an older "
                            "version); it is used as it is: set --config.data.rebuild=True to rebuild it from the "
                            "sources given now", full, builder.data_dir)
        return False
    manual = manual_dir if manual_dir and os.path.isdir(manual_dir) else None
    current = build_check.sources_fingerprint(manual, builder.builder_config)
    if manual is None:  # no manual folder given now: only the builder config can be compared
        current["files"] = recorded.get("files", {})
    changes = build_check.compare_sources(recorded, current,
                                          defaults=build_check.config_defaults(builder.builder_config))
    if not changes:
        return False
    if rebuild:
        if log:
            logging.warning("%s in %s was built from other sources (%s); rebuilding it (data.rebuild)", full,
                            builder.data_dir, "; ".join(changes))
        return True
    raise build_check.StaleDatasetError(
        f"{full} in {builder.data_dir} was built from other sources than those given now: {'; '.join(changes)}; "
        "set --config.data.rebuild=True to rebuild it (or choose another data.data_dir)")


class DataSplits:
    """The TFDS builder of ``data_cfg`` (built on first use: predicting from a workdir needs no dataset), and
    per split its data source and metadata records (each read once)."""

    def __init__(self, data_cfg):
        self.data_cfg = data_cfg
        self._builder = None
        self._sources: dict[str, Any] = {}
        self._records: dict[str, list] = {}
        self._model_ready: dict[str, Any] = {}
        self._root: str | None = None

    @property
    def builder(self):
        """The TFDS builder (:func:`load_builder`)."""
        if self._builder is None:
            self._builder = load_builder(self.data_cfg)
        return self._builder

    def source(self, split: str):
        """The random-access data source of ``split``."""
        if split not in self._sources:
            self._sources[split] = pipeline.load_source(self.builder, split)
        return self._sources[split]

    def records(self, split: str) -> list:
        """The :class:`~openvivqa_jax.data.pipeline.Record` s of ``split`` in split order."""
        if split not in self._records:
            self._records[split] = pipeline.read_records(self.source(split), f"{self.builder.name}/{split}")
        return self._records[split]

    def check_splits(self, named: dict[str, str]) -> None:
        """Checks that every split the run will read is in the dataset, before anything is trained or compiled.

        Args:
          named: ``{config field: split spec}``, e.g. ``{"data.eval_split": "dev"}``; a spec may slice
            (``train[90%:]``) or join (``train+test``) the builder's splits.

        Raises:
          DatasetError: a split is not in the dataset (one line: the field, the dataset's splits, the flag).
        """
        have = sorted(self.builder.info.splits)
        for field, spec in named.items():
            missing = [n for n in (s.split("[", 1)[0].strip() for s in str(spec).split("+")) if n not in have]
            if missing:
                raise pipeline.DatasetError(
                    f"config value {field}={spec!r} names split {missing[0]!r}, which {self.builder.name} does not "
                    f"have (its splits: {', '.join(have)}); set --config.{field}=... to one of them")

    def model_ready(self, split: str, pre, workdir: str):
        """The model-ready records of ``split`` (:mod:`openvivqa_jax.data.model_ready`, opened once, built when
        missing or corrupt) when ``data.model_ready`` is on and they cover ``pre``'s batches, else None.

        They come from the shared cache (:mod:`openvivqa_jax.data.model_ready_cache`); process 0 records the
        entry in ``<workdir>/model_ready.json``."""
        if not self.data_cfg.get("model_ready"):
            return None
        why = model_ready.usable(pre)
        if why:
            logging.info("data.model_ready: %s/%s is read per example (%s)", self.builder.name, split, why)
            return None
        if split not in self._model_ready:
            root = self._cache_root(workdir)
            mr = model_ready.open_split(
                self.source(split), pre, root, split, self.builder, source_name=f"{self.builder.name}/{split}",
                num_workers=int(self.data_cfg.get("preprocess_workers", 0) or 0))
            if jax.process_index() == 0:
                model_ready_cache.write_reference(workdir, split, mr.path, mr.key, mr.built_now)
            self._model_ready[split] = mr
        return self._model_ready[split]

    def _cache_root(self, workdir: str) -> str:
        """The model-ready cache's folder (:func:`openvivqa_jax.data.model_ready_cache.cache_root`), said in one
        line the first time, with a note on a workdir's own ``model_ready/`` folder of an older version."""
        if self._root is None:
            self._root, why = model_ready_cache.cache_root(self.data_cfg.get("model_ready_dir"),
                                                           _data_dir(self.data_cfg))
            logging.info("Model-ready records: cache %s (%s); the workdir refers to its entries in %s", self._root, why,
                         os.path.join(workdir, model_ready_cache.REFERENCE_FILE))
            old = os.path.join(workdir, "model_ready")
            if os.path.isdir(old) and os.path.abspath(old) != self._root:
                logging.info("%s holds model-ready records of an older version, which are no longer read; delete it "
                             "to free its disk", old)
        return self._root
