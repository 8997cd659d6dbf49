"""Checks of a prepared TFDS dataset before it is read: its files are complete, and it was built from the sources
and builder config now given.

* :func:`check_split_files`: every shard file a split's info lists exists, and (``array_record``) holds the
  number of records the split info says. A build that lost a shard (a Beam worker that dropped its output)
  then stops with one :class:`IncompleteBuildError` line instead of a reader's traceback in the middle of
  training.
* :func:`sources_fingerprint` / :func:`write_sources` / :func:`compare_sources`: a build records what it was
  built from in :data:`SOURCES_FILE` beside ``dataset_info.json``: the builder config's fields and a
  fingerprint of every file of the manual folder: its size and the SHA-256 of its content (text files:
  annotations, OCR files, CSV; and any file up to 8 KiB), or of its first and last 4 KiB (images and feature
  files: tens of thousands of them, too many bytes to hash at every start; a copy of the folder keeps the
  fingerprint, unlike modification times, and a replaced or re-encoded image changes its header, end or size). :func:`openvivqa_jax.data.datasets.load_builder` compares it with the sources given now and
  rebuilds (``data.rebuild``) or stops with one :class:`StaleDatasetError` line; a prepared dataset is never
  reused silently after its sources changed (the stale-cache failure of dataset libraries that key a cache by
  name only).
* :func:`write_notes` / :func:`read_notes` / :func:`notes_summary`: a reader builder's notes, written in
  :data:`NOTES_FILE` beside ``dataset_info.json``: per split, the annotation flaws it repaired (kind, count per
  file, first ids: :mod:`openvivqa_jax.data.repairs`), the records it skipped per reason and the fields it did not
  store. A user reads them after the build; :func:`openvivqa_jax.data.datasets.load_builder` logs their summary
  when it opens a dataset built earlier, so a run's log says what its data was made from.
* :func:`describe_build`: the one line a run logs about the build it reads, built now or reused (where, when,
  by whom, from which sources): on a cluster with a shared home folder one user's build is every user's data.

Imports neither JAX nor TensorFlow (the builders and the CLIs use it).
"""

from __future__ import annotations

import dataclasses
import datetime
import getpass
import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from openvivqa_jax import outputs
from openvivqa_jax import jsonio
from openvivqa_jax.errors import UserError

__all__ = ["IncompleteBuildError", "StaleDatasetError", "SOURCES_FILE", "NOTES_FILE", "TEXT_SUFFIXES",
           "check_split_files", "count_records", "sources_fingerprint", "write_sources", "read_sources",
           "compare_sources", "config_defaults", "write_notes", "read_notes", "notes_summary", "describe_build"]

#: File written beside ``dataset_info.json``: what the build was made from.
SOURCES_FILE = "openvivqa_sources.json"
#: File written beside ``dataset_info.json``: what the build repaired, skipped and did not store.
NOTES_FILE = "openvivqa_build_notes.json"
#: Suffixes of the manual files whose content is hashed (the others: size and modification time).
TEXT_SUFFIXES = (".json", ".jsonl", ".csv", ".tsv", ".txt")


class IncompleteBuildError(UserError, ValueError):
    """A prepared dataset lacks a shard file, or a shard holds other records than its split info says."""


class StaleDatasetError(UserError, ValueError):
    """A prepared dataset was built from other manual files or another builder config than those given now."""


def _is_array_record(path: Path) -> bool:
    return ".array_record" in path.name


def count_records(path: Path) -> int:
    """Number of records in one shard file: ``array_record`` (its index) or ``tfrecord`` (its length headers).

    Raises:
      OSError: the file cannot be read.
      ValueError: a ``tfrecord`` file ends inside a record.
    """
    path = Path(path)
    if _is_array_record(path):
        from array_record.python.array_record_module import ArrayRecordReader  # heavy: only for such a file

        reader = ArrayRecordReader(str(path))
        try:
            return int(reader.num_records())
        finally:
            reader.close()
    n, size = 0, path.stat().st_size
    with path.open("rb") as f:  # tfrecord: u64 length, u32 crc, data, u32 crc
        pos = 0
        while pos < size:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError(f"{path}: ends inside a record header at byte {pos}")
            pos += 12 + int.from_bytes(head, "little") + 4
            if pos > size:
                raise ValueError(f"{path}: ends inside record {n}")
            f.seek(pos)
            n += 1
    return n


def check_split_files(builder: Any, count_records: bool | None = None) -> None:
    """Checks that every shard file of every split of a prepared builder exists and is complete.

    Args:
      builder: a TFDS builder whose ``info.splits`` is set (prepared, or just written).
      count_records: count the records of each shard against the split info's shard lengths; None = only for
        ``array_record`` files (cheap: the count is in the file's index).

    Raises:
      IncompleteBuildError: one line naming the split, the file and what is wrong, and how to rebuild.
    """
    counter = globals()["count_records"]
    for split, info in sorted(builder.info.splits.items()):
        paths, lengths = list(info.filepaths), list(info.shard_lengths)
        for path, expected in zip(paths, lengths):
            path = Path(os.fspath(path))
            where = (f"{builder.name}/{builder.builder_config.name if builder.builder_config else ''} in "
                     f"{builder.data_dir}: split {split!r} ({sum(lengths)} examples in {len(paths)} files)")
            fix = "rebuild it (--config.data.rebuild=True, or delete that folder)"
            if not path.is_file():
                raise IncompleteBuildError(f"{where}: file {path.name} is missing; {fix}")
            if count_records or (count_records is None and _is_array_record(path)):
                try:
                    n = counter(path)
                except (OSError, ValueError, RuntimeError) as e:
                    raise IncompleteBuildError(f"{where}: file {path.name} cannot be read ({e}); {fix}") from None
                if n != expected:
                    raise IncompleteBuildError(
                        f"{where}: file {path.name} holds {n} records, its split info says {expected}; {fix}")


def _config_fields(config: Any) -> dict:
    if config is None:
        return {}
    if dataclasses.is_dataclass(config):
        out = {}
        for f in dataclasses.fields(config):
            if f.name in ("description", "release_notes", "tags"):
                continue
            out[f.name] = getattr(config, f.name)
    else:
        out = {"name": getattr(config, "name", str(config))}
    return json.loads(json.dumps(out, default=str, sort_keys=True))


#: Bytes hashed at each end of a file that is not a text file (the whole file when it is smaller than twice this).
SAMPLE_BYTES = 1 << 12


def _file_entry(path: Path) -> dict:
    size = path.stat().st_size
    h = hashlib.sha256()
    with path.open("rb") as f:
        if path.suffix.lower() in TEXT_SUFFIXES or size <= 2 * SAMPLE_BYTES:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
            return {"size": size, "sha256": h.hexdigest()}
        h.update(f.read(SAMPLE_BYTES))
        f.seek(size - SAMPLE_BYTES)
        h.update(f.read(SAMPLE_BYTES))
    return {"size": size, "sha256_ends": h.hexdigest()}


def sources_fingerprint(manual_dir: str | os.PathLike | None, config: Any) -> dict:
    """What a build is made from: the builder config's fields and an entry per file of the manual folder.

    Args:
      manual_dir: the manual folder (None or absent: no files).
      config: the builder config (a dataclass ``BuilderConfig``); ``description`` is left out.

    Returns:
      ``{"config": {field: value}, "files": {relative path: {size, sha256 | sha256_ends}}}``.
    """
    files = {}
    if manual_dir is not None and Path(manual_dir).is_dir():
        root = Path(manual_dir)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                p = Path(dirpath) / name
                if p.is_file():
                    files[p.relative_to(root).as_posix()] = _file_entry(p)
    return {"config": _config_fields(config), "files": files}


def _who() -> str:
    """``user@host`` of this process (the user id when the system has no name for it, as in some containers)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"
    return f"{user}@{socket.gethostname()}"


def write_sources(data_dir: str | os.PathLike, manual_dir, config: Any) -> None:
    """Writes :data:`SOURCES_FILE` into a build's folder: :func:`sources_fingerprint`, and the manual folder's
    path, the time (UTC, ISO 8601) and ``user@host`` of the build, which :func:`describe_build` reports."""
    record = sources_fingerprint(manual_dir, config)
    record["manual_dir"] = os.path.abspath(manual_dir) if manual_dir is not None and Path(manual_dir).is_dir() else None
    record["built_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    record["built_by"] = _who()
    outputs.write_json(Path(data_dir, SOURCES_FILE), record, indent=1, sort_keys=True)


def read_sources(data_dir: str | os.PathLike) -> dict | None:
    """The record of a build's sources; None when the build has none (built before builds recorded it)."""
    p = Path(data_dir, SOURCES_FILE)
    if not p.is_file():
        return None
    return jsonio.read_json(p)


def config_defaults(config: Any) -> dict:
    """The default value of every field of a builder config's class, as :func:`sources_fingerprint` records
    values (for :func:`compare_sources`: a field added to the class after a build was recorded)."""
    if not dataclasses.is_dataclass(config):
        return {}
    out = {}
    for f in dataclasses.fields(config):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return json.loads(json.dumps(out, default=str, sort_keys=True))


def compare_sources(recorded: dict, current: dict, limit: int = 3, defaults: dict | None = None) -> list[str]:
    """What differs between two :func:`sources_fingerprint` records, as short phrases (at most ``limit`` files
    named, then a count); ``[]`` when they are the same. A config field the recorded build lacks counts as its
    value in ``defaults`` (:func:`config_defaults`: a field added since, e.g. ``strict``, at its default is no
    change)."""
    out = []
    rc, cc = recorded.get("config", {}), current.get("config", {})
    rc = {**{k: v for k, v in (defaults or {}).items() if k in cc}, **rc}
    changed_fields = sorted(k for k in set(rc) | set(cc) if rc.get(k) != cc.get(k))
    if changed_fields:
        out.append("builder config field(s) " + ", ".join(
            f"{k} ({rc.get(k)!r} -> {cc.get(k)!r})" for k in changed_fields))
    rf, cf = recorded.get("files", {}), current.get("files", {})
    changes = ([f"{k} changed" for k in sorted(set(rf) & set(cf)) if rf[k] != cf[k]]
               + [f"{k} added" for k in sorted(set(cf) - set(rf))]
               + [f"{k} removed" for k in sorted(set(rf) - set(cf))])
    if changes:
        more = f" and {len(changes) - limit} more file(s)" if len(changes) > limit else ""
        out.append("manual file(s) " + ", ".join(changes[:limit]) + more)
    return out


def write_notes(data_dir: str | os.PathLike, notes: dict) -> None:
    """Writes :data:`NOTES_FILE` (``{split: {"repairs": ..., "skipped": ..., "fields_not_stored": ...}}``, as
    :meth:`tfds_builders.readers.BuildCounts.build_notes` gives it) into a build's folder."""
    outputs.write_json(Path(data_dir, NOTES_FILE), notes, indent=1, sort_keys=True)


def read_notes(data_dir: str | os.PathLike) -> dict | None:
    """A build's notes (:func:`write_notes`); None when it has none (a generated dataset, or built before builds
    wrote them)."""
    p = Path(data_dir, NOTES_FILE)
    return jsonio.read_json(p) if p.is_file() else None


def notes_summary(notes: dict) -> list[str]:
    """One phrase per split that had repairs or skips: ``"dev: 32 answer_start_reanchored, 7
    repeated_id_renamed"``; ``[]`` when the build repaired and skipped nothing."""
    out = []
    for split, n in sorted(notes.items()):
        parts = [f"{v.get('count', 0)} {k}" for k, v in sorted((n.get("repairs") or {}).items())]
        parts += [f"{v} skipped ({k})" for k, v in sorted((n.get("skipped") or {}).items())]
        if parts:
            out.append(f"{split}: {', '.join(parts)}")
    return out
#: Builder config fields left out of :func:`describe_build`'s settings (TFDS bookkeeping, not a source).
_NOT_SETTINGS = ("name", "version", "supported_versions", "release_notes", "description", "tags")


def _when(data_dir: Path, record: dict | None) -> str:
    """When the build in ``data_dir`` was made, by whom if recorded: ``2026-12-05 08:53 UTC by root@host``; for a
    build that did not record it, the time of its ``dataset_info.json``."""
    at = (record or {}).get("built_at")
    try:
        when = datetime.datetime.fromisoformat(at) if at else datetime.datetime.fromtimestamp(
            (data_dir / "dataset_info.json").stat().st_mtime, datetime.timezone.utc)
    except (ValueError, OSError):
        return "at an unknown time"
    text = when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    by = (record or {}).get("built_by")
    return f"{text} by {by}" if by else f"{text} (its dataset_info.json; who built it is not recorded)"


def _sources_phrase(record: dict | None) -> str:
    """``from the generator with seed=0, ...`` or ``from the manual folder <path> (N files) with ...``."""
    if record is None:
        return "from sources it did not record (built by an older version)"
    settings = ", ".join(f"{k}={v}" for k, v in sorted((record.get("config") or {}).items())
                         if k not in _NOT_SETTINGS and v is not None)
    files = record.get("files") or {}
    if files or record.get("manual_dir"):
        where = record.get("manual_dir") or "a manual folder"
        head = f"from the manual folder {where} ({len(files)} files fingerprinted)"
    else:
        head = "from the generator"
    return f"{head} with {settings}" if settings else head


def describe_build(builder: Any, built_s: float | None) -> str:
    """One line saying which dataset build a run reads: name, config and version, where, when and by whom it was
    made, from which sources (the manual folder, or the generator and its settings) and its splits; ``built now``
    with the build's seconds when ``built_s`` is given, else ``reusing``.

    Args:
      builder: the prepared TFDS builder.
      built_s: seconds the build took in this process; None when an existing build is reused.
    """
    data_dir = Path(os.fspath(builder.data_dir))
    record = read_sources(data_dir)
    splits = ", ".join(f"{k} {v.num_examples}" for k, v in sorted(builder.info.splits.items()))
    config = getattr(builder, "builder_config", None)
    name = f"{builder.name}/{config.name}" if config is not None else builder.name
    head = f"Dataset {name} {builder.info.version}: "
    if built_s is None:
        head += f"reusing the build in {data_dir}, made {_when(data_dir, record)}"
    else:
        head += f"built now in {data_dir} in {built_s:.0f} s"
    return f"{head}, {_sources_phrase(record)} (splits: {splits})"


class RecordsSources:
    """Mixin for a TFDS ``DatasetBuilder``: after the build, writes :data:`SOURCES_FILE` (:func:`write_sources`:
    the builder config and the manual folder's fingerprint) and, for a builder with ``build_notes()``
    (:class:`tfds_builders.readers.BuildCounts`), :data:`NOTES_FILE` (:func:`write_notes`) into the build's
    folder, before TFDS moves it into place, so every prepared dataset says what it was built from."""

    def _download_and_prepare(self, dl_manager, download_config=None):  # noqa: D401 - TFDS hook
        out = super()._download_and_prepare(dl_manager, download_config)
        try:
            manual = dl_manager.manual_dir
        except (AssertionError, ValueError):  # no manual folder (a generated dataset)
            manual = None
        write_sources(self.data_dir, manual, self.builder_config)
        if callable(getattr(self, "build_notes", None)):
            write_notes(self.data_dir, self.build_notes())
        return out
