"""A build checks what it wrote (examples per split, shard files), and records what it was built from; the trainer's
``datasets.load_builder`` checks a prepared dataset's files and sources before reading it."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import ml_collections
import pytest
import tensorflow_datasets as tfds

from openvivqa_jax.data import build_check
from tfds_builders import beam_build

from test_beam_build import make_photos
from test_openvivqa_builder import small_dataset


def _evjvqa(tmp_path: Path, cfg_name: str, **cfg):
    from tfds_builders.evjvqa import Builder, EvjvqaConfig

    return Builder(config=EvjvqaConfig(name=cfg_name, num_workers=1, **cfg), data_dir=str(tmp_path / "data"),
                   file_format="array_record")


def test_beam_build_that_loses_examples_fails_in_one_line(tmp_path, monkeypatch):
    """On Beam (in-memory DirectRunner): a corrupt image skipped and counted by the Beam counter passes the check
    (9 = 12 planned - 3 skipped); a per-image step that loses one image's examples without a
    count fails the build in one line, and nothing is left prepared (about 5 s: two in-memory Beam pipelines)."""
    manual = make_photos(tmp_path / "manual", n=4)  # 4 images x 3 questions
    (manual / "public-test-images" / "00001.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    sent = []
    real_generate = beam_build.generate

    def spy(groups, *a, **k):
        sent.extend(groups)
        return real_generate(groups, *a, **k)

    monkeypatch.setattr(beam_build, "generate", spy)
    beam_cfg = tfds.download.DownloadConfig(manual_dir=str(manual), beam_runner="DirectRunner")
    ok = _evjvqa(tmp_path, "skip", skip_missing_images=True)
    ok.download_and_prepare(download_config=beam_cfg)
    assert ok.use_beam and ok.info.splits["test"].num_examples == 9  # 12 - 3 questions of the bad image
    # Elements sent through Beam: image paths and text fields, no image bytes.
    assert len(sent) == 4 and all(isinstance(g.path, str) for g in sent)
    assert all(len(pickle.dumps(g)) < 2000 for g in sent)
    assert not any(isinstance(v, bytes) for g in sent for _, _, ex in g.records for v in ex.values())

    real = beam_build.image_examples

    def loses_one_image(group, *a, **k):
        return [] if group.path.endswith("00002.jpg") else real(group, *a, **k)

    monkeypatch.setattr(beam_build, "image_examples", loses_one_image)
    bad = _evjvqa(tmp_path, "lossy", skip_missing_images=True)
    with pytest.raises(beam_build.BuildVerificationError) as e:
        bad.download_and_prepare(download_config=beam_cfg)
    msg = str(e.value)
    assert "\n" not in msg
    assert "split 'test': 6 examples written, 9 expected (12 questions planned - 3 skipped for bad images)" in msg
    assert not (Path(bad.data_dir) / "dataset_info.json").exists()


def test_verify_written_compares_counts_and_files(tmp_path):
    """A plain build passes; the same build checked against another count, or with a shard removed, fails in one
    line naming the split and the file."""
    from test_openvivqa_builder import build

    manual = tmp_path / "m"
    small_dataset(manual)
    b = build(manual, tmp_path / "d")
    assert b.info.splits["train"].num_examples == 3
    beam_build.verify_written(b, {"train": (3, "examples generated")})
    with pytest.raises(beam_build.BuildVerificationError, match=r"split 'train': 3 examples written, 4 expected"):
        beam_build.verify_written(b, {"train": (4, "examples generated")})
    shard = b.info.splits["train"].filepaths[0]
    os.remove(shard)
    with pytest.raises(beam_build.BuildVerificationError, match=rf"file {Path(shard).name} is missing"):
        beam_build.verify_written(b, {"train": (3, "examples generated")})


def test_count_records_of_a_tfrecord_file(tmp_path):
    """tfrecord framing: u64 length, u32 crc, data, u32 crc per record; a file cut inside a record is an error."""
    p = tmp_path / "x.tfrecord-00000-of-00001"
    body = b"".join(len(d).to_bytes(8, "little") + b"\0" * 4 + d + b"\0" * 4 for d in (b"abc", b"", b"hello"))
    p.write_bytes(body)
    assert build_check.count_records(p) == 3
    p.write_bytes(body[:-3])
    with pytest.raises(ValueError, match="ends inside record 2"):
        build_check.count_records(p)


def _data_cfg(data_dir: Path, manual: Path, **kw) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "builder": "openvivqa", "data_dir": str(data_dir), "manual_dir": str(manual), "builder_kwargs": {},
        "builder_config": json.dumps({"name": "t_none", "ocr_engine": "none", "num_workers": 1, **kw}),
        "rebuild": False})


def _answers(builder) -> dict[str, list[str]]:
    return {ex["question_id"].decode(): [a.decode() for a in ex["answers"]]
            for ex in builder.as_data_source()["train"]}


def test_stale_dataset_stops_or_rebuilds(tmp_path):
    """Manual folder A, then B (another answer) with the same data_dir: one line naming the changed file and
    data.rebuild; with data.rebuild the examples are B's. A changed builder config field is named too."""
    from openvivqa_jax.data import datasets

    a, b = tmp_path / "A", tmp_path / "B"
    small_dataset(a)
    small_dataset(b, qas={"100": {"image_id": 10, "question": "Biển hiệu ghi gì?", "answer": "bún chả"},
                          "101": {"image_id": 10, "question": "màu gì?", "answer": "màu đỏ"},
                          "102": {"image_id": 11, "question": "có mấy người?", "answer": "hai người"}})
    data = tmp_path / "data"
    built = datasets.load_builder(_data_cfg(data, a))
    assert _answers(built)["100"] == ["phở hòa"]
    assert (Path(built.data_dir) / build_check.SOURCES_FILE).is_file()
    assert _answers(datasets.load_builder(_data_cfg(data, a)))["100"] == ["phở hòa"]  # same sources: reused
    with pytest.raises(build_check.StaleDatasetError) as e:
        datasets.load_builder(_data_cfg(data, b))
    msg = str(e.value)
    assert "\n" not in msg and "manual file(s) train_data.json changed" in msg
    assert "--config.data.rebuild=True" in msg
    cfg = _data_cfg(data, b)
    cfg.rebuild = True
    assert _answers(datasets.load_builder(cfg))["100"] == ["bún chả"]
    with pytest.raises(build_check.StaleDatasetError, match=r"builder config field\(s\) skip_invalid_records "
                                                            r"\(False -> True\)"):
        datasets.load_builder(_data_cfg(data, b, skip_invalid_records=True))


def test_trainer_checks_the_files_of_a_prepared_dataset(tmp_path):
    """A prepared dataset with a shard file missing, or cut short, stops load_builder in one line that names the
    split, the file and how to rebuild (instead of a reader's traceback mid-training)."""
    from openvivqa_jax.data import datasets

    a = tmp_path / "A"
    small_dataset(a)
    cfg = _data_cfg(tmp_path / "data", a)
    built = datasets.load_builder(cfg)
    shard = Path(built.info.splits["train"].filepaths[0])
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(build_check.IncompleteBuildError) as e:
        datasets.load_builder(cfg)
    assert "\n" not in str(e.value) and f"file {shard.name} cannot be read" in str(e.value)
    assert "split 'train' (3 examples in 1 files)" in str(e.value) and "--config.data.rebuild=True" in str(e.value)
    shard.unlink()
    with pytest.raises(build_check.IncompleteBuildError, match=rf"file {shard.name} is missing"):
        datasets.load_builder(cfg)


def test_a_build_recorded_before_a_config_field_existed_is_not_stale(tmp_path):
    """A build whose sources record lacks a config field added since (``strict``) is reused while the field is at its
    default, and named as changed when it is not."""
    from openvivqa_jax.data import datasets

    a = tmp_path / "A"
    small_dataset(a)
    built = datasets.load_builder(_data_cfg(tmp_path / "data", a))
    path = Path(built.data_dir) / build_check.SOURCES_FILE
    record = json.loads(path.read_text(encoding="utf-8"))
    del record["config"]["strict"]  # as written before the field existed
    path.write_text(json.dumps(record), encoding="utf-8")
    assert _answers(datasets.load_builder(_data_cfg(tmp_path / "data", a)))["100"] == ["phở hòa"]
    with pytest.raises(build_check.StaleDatasetError, match=r"builder config field\(s\) strict \(False -> True\)"):
        datasets.load_builder(_data_cfg(tmp_path / "data", a, strict=True))


def _dataset_lines(text: str) -> list[str]:
    return [line[line.index("Dataset "):] for line in text.splitlines() if " Dataset " in line]


def test_a_build_is_said_built_now_then_reused_with_where_when_who_and_sources(tmp_path, caplog, absl_info):
    """The first load_builder builds and says so; the second (another user's run on a shared data folder) says
    which build it reuses: name, config and version, folder, date and user@host of the build, the manual folder
    and the builder config's settings, the splits. A build that recorded no date (older versions) gives its
    dataset_info.json's time and says who built it is not recorded."""
    import datetime
    import logging

    from openvivqa_jax.data import datasets

    caplog.set_level(logging.INFO)
    small_dataset(tmp_path / "A")
    cfg = _data_cfg(tmp_path / "data", tmp_path / "A")
    built = datasets.load_builder(cfg)
    folder = Path(built.data_dir)
    config = built.builder_config
    # The config's fields as the sources file keeps them (JSON: tuples become lists).
    settings = ", ".join(f"{k}={json.loads(json.dumps(getattr(config, k)))}" for k in sorted(vars(config))
                         if k not in ("name", "version", "supported_versions", "release_notes", "description", "tags")
                         and getattr(config, k) is not None)
    files = sum(1 for p in (tmp_path / "A").rglob("*") if p.is_file())
    sources = (f"from the manual folder {tmp_path / 'A'} ({files} files fingerprinted) with {settings} "
               f"(splits: train {built.info.splits['train'].num_examples})")
    first = _dataset_lines(caplog.text)
    assert len(first) == 1, caplog.text
    assert first[0].startswith(f"Dataset openvivqa/t_none {built.info.version}: built now in {folder} in ")
    assert first[0].endswith(f" s, {sources}"), first[0]
    record = json.loads((folder / build_check.SOURCES_FILE).read_text(encoding="utf-8"))
    when = datetime.datetime.fromisoformat(record["built_at"])
    assert abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) < 600
    # Another user on the same data folder: reused, and said to be the other user's.
    record["built_by"] = "alice@node7"
    (folder / build_check.SOURCES_FILE).write_text(json.dumps(record), encoding="utf-8")
    caplog.clear()
    datasets.load_builder(cfg)
    second = _dataset_lines(caplog.text)
    stamp = when.strftime("%Y-%m-%d %H:%M UTC")
    assert second == [f"Dataset openvivqa/t_none {built.info.version}: reusing the build in {folder}, made {stamp} by "
                      f"alice@node7, {sources}"], second
    # Built by an older version: no date or user recorded.
    del record["built_at"], record["built_by"]
    (folder / build_check.SOURCES_FILE).write_text(json.dumps(record), encoding="utf-8")
    mtime = datetime.datetime.fromtimestamp((folder / "dataset_info.json").stat().st_mtime, datetime.timezone.utc)
    caplog.clear()
    datasets.load_builder(cfg)
    assert f"made {mtime.strftime('%Y-%m-%d %H:%M UTC')} (its dataset_info.json; who built it is not recorded)" \
        in _dataset_lines(caplog.text)[0]


def test_a_generated_build_names_the_generator_and_its_settings(tmp_path):
    """A build with no manual folder (the synthetic set) is described by the generator and every field of its
    builder config (but TFDS's name and version fields)."""
    import types

    record = {"config": {"name": "tiny", "seed": 3, "num_train_images": 40, "version": None,
                         "supported_versions": []}, "files": {}, "manual_dir": None,
              "built_at": "2026-12-05T08:53:10+00:00", "built_by": "bob@gpu-node"}
    (tmp_path / build_check.SOURCES_FILE).write_text(json.dumps(record), encoding="utf-8")
    split = types.SimpleNamespace(num_examples=12)
    builder = types.SimpleNamespace(name="synthetic_openvivqa", builder_config=types.SimpleNamespace(name="tiny"),
                                    data_dir=str(tmp_path), info=types.SimpleNamespace(
        version="1.2.0", splits={"train": split, "test": types.SimpleNamespace(num_examples=5)}))
    assert build_check.describe_build(builder, None) == (
        f"Dataset synthetic_openvivqa/tiny 1.2.0: reusing the build in {tmp_path}, made 2026-12-05 08:53 UTC by "
        "bob@gpu-node, from the generator with num_train_images=40, seed=3 (splits: test 5, train 12)")
    assert build_check.describe_build(builder, 95.4) == (
        f"Dataset synthetic_openvivqa/tiny 1.2.0: built now in {tmp_path} in 95 s, from the generator with "
        "num_train_images=40, seed=3 (splits: test 5, train 12)")
