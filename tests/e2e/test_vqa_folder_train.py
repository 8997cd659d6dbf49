"""A folder of photos and a CSV trains with the documented commands: ``python -m openvivqa_jax.main --config
configs/folder/mlpag.py --config.data.manual_dir=<folder>`` (tiny sizes), then ``predict`` on one of its photos;
a bad row stops the main job with the one-line error; ``tfds build tfds_builders/vqa_folder`` from the command line.
The folder is the one tests/unit/test_vqa_folder_builder.py writes (PNG and JPEG in subfolders, Vietnamese and
English rows)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, message_lines, read_jsonl, run_main_cli, subprocess_env
from test_dataset_configs import TINY, TINY_MLPAG
from test_vqa_folder_builder import VALIDATION, make_folder

CONFIG = "configs/folder/mlpag.py"


def _main(workdir: Path, manual: Path, data_dir: Path, *overrides: str):
    return run_main_cli(f"--config={CONFIG}", f"--workdir={workdir}", f"--config.data.manual_dir={manual}",
                        f"--config.data.data_dir={data_dir}", *TINY, *TINY_MLPAG, *overrides, timeout=600)


@pytest.mark.slow
def test_folder_trains_evaluates_and_predicts(tmp_path):
    manual = make_folder(tmp_path / "my photos", validation=VALIDATION)  # no test file: held out of train
    wd = tmp_path / "run"
    res = _main(wd, manual, tmp_path / "tfds")
    assert res.returncode == 0, res.stderr[-4000:]
    assert "no test file; holding out 1 of the 5 train images (1 questions) as test" in res.stderr
    recs = read_jsonl(wd / "metrics.jsonl")
    assert [r["step"] for r in recs if r["kind"] == "train"] == [1, 2]
    assert sorted(p.name for p in (wd / "eval").glob("*_metrics.json")) == ["dev_metrics.json", "test_metrics.json"]
    dev = json.loads((wd / "eval" / "dev_metrics.json").read_text(encoding="utf-8"))
    assert dev["num_questions"]["overall"] == 2 and {"EM", "F1", "CIDEr"} <= set(dev["metrics"])
    assert set(dev["by_field"]["language"]) == {"en", "vi"}
    preds = json.loads((wd / "eval" / "dev_predictions.json").read_text(encoding="utf-8"))
    assert sorted(p["question_id"] for p in preds) == ["7", "v1"]
    assert "shop_name_copy_rate" not in json.loads((wd / "eval" / "test_metrics.json").read_text(encoding="utf-8"))
    # predict on one of the folder's photos, without OCR as the model was trained
    res = subprocess.run([sys.executable, "-m", "openvivqa_jax.predict", "--workdir", str(wd), "--image",
                          str(manual / "blue.jpeg"), "--question", "What colour is it?", "--ocr", "none", "--json"],
                         cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert isinstance(out["answer"], str) and out["ocr"] == []


@pytest.mark.slow
def test_a_bad_row_stops_the_main_job_with_one_line(tmp_path):
    manual = make_folder(tmp_path / "m", train="image,question,answer\nblue.jpeg,what?,blue\ncat.png,what?\n",
                         validation=VALIDATION, test=VALIDATION)
    res = _main(tmp_path / "run", manual, tmp_path / "tfds")
    assert res.returncode == 1
    assert message_lines(res.stderr)[-1] == (
        f"error: DatasetInputError: {manual / 'train.csv'}: line 3: expected 3 fields (image,question,answer), got 2: "
        "['cat.png', 'what?']")


@pytest.mark.slow
def test_tfds_build_command_line(tmp_path):
    from test_tfds_cli import tfds_build

    manual = make_folder(tmp_path / "m", validation=VALIDATION, test=VALIDATION)
    tfds_build("vqa_folder", manual, tmp_path / "d", "--config", "default")
    import tensorflow_datasets as tfds

    built = tfds.builder_from_directory(str(tmp_path / "d" / "vqa_folder" / "default" / "1.1.0"))
    assert {s: built.info.splits[s].num_examples for s in built.info.splits} == {"train": 5, "validation": 2,
                                                                                 "test": 2}


@pytest.mark.slow
def test_beam_build_equals_plain_build(tmp_path):
    """Plain and Beam (DirectRunner, multi_processing, 2 workers) builds of a folder, its test split held out of
    train: the same examples, every feature, in the same order."""
    import tensorflow_datasets as tfds
    from apache_beam.options.pipeline_options import PipelineOptions
    from test_beam_build import _assert_same_builds

    from tfds_builders.vqa_folder import Builder, VqaFolderConfig

    manual = make_folder(tmp_path / "m", validation=VALIDATION)
    cfg = VqaFolderConfig(name="one_worker", num_workers=1)
    plain = Builder(config=cfg, data_dir=str(tmp_path / "plain"), file_format="array_record")
    plain.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
    options = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                               "--direct_num_workers=2"])
    beam = Builder(config=cfg, data_dir=str(tmp_path / "beam"), file_format="array_record")
    beam.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual),
                                                                           beam_options=options))
    assert beam.use_beam and not plain.use_beam and beam.held_out == plain.held_out == {"test": (1, 1)}
    _assert_same_builds(plain, beam)
