"""`tfds build <builder> --manual_dir=...` from the command line, for every builder in tfds_builders/.

Each test runs the installed ``tfds`` console script of tensorflow-datasets (the one next to this Python;
it imports apache_beam and mlcroissant at start-up, which the ``tfds-cli`` extra installs and ``[test]``
includes) in a subprocess, from the repository root and without PYTHONPATH, as a user would type it:

    tfds build tfds_builders/<name> --manual_dir=<files in the published format> --data_dir=<d> \
        --file_format=array_record

No ``--config``: tfds builds every config of the builder, so the manual folders hold everything every config
needs (ST-VQA's three tasks and the global dictionary, OpenViVQA's per-image feature files). Every built
config and split is then read back through ``tfds.data_source`` and compared with the files, read
independently here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds

from conftest import subprocess_env
from test_dataset_builders import VIVQA_SAMPLE, _expected_rows, _vivqa_images, read
from test_dataset_configs import STVQA_TEST_DICT, TINY, TINY_M4C, make_stvqa, make_textvqa, make_viquad
from test_openvivqa_builder import SAMPLE, SAMPLE_EXPECTED

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def tfds_build(name: str, manual: Path | None, data_dir: Path, *extra: str,
               file_format: str | None = "array_record") -> subprocess.CompletedProcess:
    """Runs ``tfds build tfds_builders/<name> [--manual_dir=manual] --data_dir=data_dir
    [--file_format=file_format] *extra`` with the ``tfds`` script of this environment (None: tfds' default
    format, tfrecord).

    Fails the test with the script's stderr if it exits non-zero, or if the script is not installed.
    """
    script = Path(sys.executable).parent / "tfds"
    if not script.is_file():
        pytest.fail(f"no `tfds` command next to {sys.executable}; install the project with pip install -e '.[test]'")
    args = [str(script), "build", f"tfds_builders/{name}", f"--data_dir={data_dir}"]
    if file_format is not None:
        args.append(f"--file_format={file_format}")
    if manual is not None:
        args.append(f"--manual_dir={manual}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the builder must find the repo itself
    res = subprocess.run([*args, *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"{' '.join(args)}\n{res.stderr[-4000:]}"
    return res


def built(data_dir: Path, name: str, config: str, version: str = "1.1.0"):
    """The prepared builder of ``name/config/version`` under data_dir (fails if the config was not built)."""
    path = data_dir / name / config / version
    assert path.is_dir(), f"{path} not built; built: {sorted(p.name for p in (data_dir / name).iterdir())}"
    return tfds.builder_from_directory(str(path))


def qa(examples: dict[str, dict]) -> dict[str, tuple[str, list[str]]]:
    return {k: (v["question"], v["answers"]) for k, v in examples.items()}


# ---------------------------------------------------------------------------------------------- OpenViVQA


@pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"OpenViVQA sample folder {SAMPLE} not present")
def test_openvivqa_every_config(tmp_path):
    """The real sample (images + release JSON, tesseract OCR in `default`) plus the authors' feature files
    (`features`: 2048-d region features, scene text) written here for each image."""
    manual = tmp_path / "manual"
    shutil.copytree(SAMPLE, manual)
    rng = np.random.default_rng(0)
    files = {}
    (manual / "features").mkdir()
    for img in sorted((manual / "images").glob("*.jpg")):
        files[img.stem] = {"region_features": rng.normal(size=(2, 2048)).astype(np.float32),
                           "region_boxes": np.array([[0.0, 0.0, 0.5, 0.5], [0.25, 0.25, 1.0, 1.0]], np.float32),
                           "texts": ["phố", "Tạ Hiện"],
                           "boxes": np.array([[0.1, 0.1, 0.3, 0.2], [0.4, 0.1, 0.9, 0.2]]),
                           "scores": np.array([0.9, 0.7], np.float32)}
        np.save(manual / "features" / f"{img.stem}.npy", files[img.stem], allow_pickle=True)
    data = tmp_path / "data"
    tfds_build("openvivqa", manual, data)

    release = json.loads((SAMPLE / "examples_data.json").read_text(encoding="utf-8"))
    stem_of = {str(k): Path(v).stem for k, v in release["images"].items()}
    for config in ("default", "features"):
        got = read(built(data, "openvivqa", config, "1.2.0"), "train")
        assert {k: (v["image_id"], v["question"], v["answers"][0]) for k, v in got.items()} == SAMPLE_EXPECTED
    feats = read(built(data, "openvivqa", "features", "1.2.0"), "train")
    for qid, ex in feats.items():
        f = files[stem_of[ex["image_id"]]]
        np.testing.assert_array_equal(ex["objects"]["features"], f["region_features"].astype(np.float16))
        assert ex["ocr"]["text"] == ["phố", "tạ", "hiện"]  # normalized (lowercase NFC), one copyable word each
        np.testing.assert_allclose(ex["ocr"]["score"], [0.9, 0.7, 0.7], rtol=1e-6)


# ----------------------------------------------------------------------------------------------------- ViVQA


@pytest.mark.skipif(not VIVQA_SAMPLE.is_dir(), reason=f"{VIVQA_SAMPLE} not present")
def test_vivqa_every_config(tmp_path):
    """The ViVQA sample CSVs with stand-in COCO-named images; configs `default` (no OCR) and `tesseract`."""
    manual = tmp_path / "manual"
    manual.mkdir()
    for name in ("train.csv", "test.csv"):
        shutil.copy(VIVQA_SAMPLE / name, manual / name)
    _vivqa_images(manual, [manual / "train.csv", manual / "test.csv"])
    data = tmp_path / "data"
    tfds_build("vivqa", manual, data)
    for config in ("default", "tesseract"):
        builder = built(data, "vivqa", config)
        for split in ("train", "test"):
            expected = _expected_rows(VIVQA_SAMPLE / f"{split}.csv")
            got = read(builder, split)
            assert {k: (v["image_id"], v["question"], v["answers"][0], v["question_type"]) for k, v in got.items()} \
                == {k: (i, q, a, t) for k, (i, q, a, t) in expected.items()}


# ---------------------------------------------------------------------------------------------------- ST-VQA


def test_st_vqa_every_config(tmp_path):
    """ST-VQA's three tasks (train_task_<t>.json / test_task_<t>.json), global_dictionary.txt and ocr.json."""
    manual = make_stvqa(tmp_path / "manual")
    for t in (2, 3):
        for split in ("train", "test"):
            d = json.loads((manual / f"{split}_task_1.json").read_text(encoding="utf-8"))
            for rec in d["data"]:  # per-question dictionaries are task 1's only
                rec.pop("dictionary", None)
            (manual / f"{split}_task_{t}.json").write_text(json.dumps(d, ensure_ascii=False), encoding="utf-8")
    (manual / "global_dictionary.txt").write_text("pizza\nOpen\nsale\nphở\n", encoding="utf-8")
    data = tmp_path / "data"
    tfds_build("st_vqa", manual, data)

    train_file = json.loads((manual / "train_task_1.json").read_text(encoding="utf-8"))["data"]
    # The normalizer lowercases and spaces out "?" (docs/design.md §4); the answers are plain ASCII words.
    expected_train = {str(r["question_id"]): (r["question"].lower().replace("?", " ?"),
                                              [a.lower() for a in r["answers"]]) for r in train_file}
    for config in ("task1", "task2", "task3", "task3_tesseract"):
        builder = built(data, "st_vqa", config)
        assert qa(read(builder, "train")) == expected_train, config
        test = read(builder, "test")
        assert sorted(test) == ["100", "101", "102"]
        assert all(ex["answers"] == [] for ex in test.values())
        dictionaries = {tuple(ex["dictionary"]) for ex in test.values()}
        assert dictionaries == {
            "task1": {tuple(STVQA_TEST_DICT)},
            "task2": {("pizza", "open", "sale", "phở")},
            "task3": {()}, "task3_tesseract": {()},
        }[config], config


# --------------------------------------------------------------------------------------------------- TextVQA


def test_textvqa(tmp_path):
    """TextVQA 0.5.1 JSON (10 answers per question) and the Rosetta OCR files."""
    manual = make_textvqa(tmp_path / "manual")
    data = tmp_path / "data"
    tfds_build("textvqa", manual, data)
    builder = built(data, "textvqa", "default")
    for split in ("train", "val", "test"):
        recs = json.loads((manual / f"TextVQA_0.5.1_{split}.json").read_text(encoding="utf-8"))["data"]
        ocr = {r["image_id"]: r["ocr_tokens"] for r in
               json.loads((manual / f"TextVQA_Rosetta_OCR_v0.2_{split}.json").read_text(encoding="utf-8"))["data"]}
        got = read(builder, split)
        assert {k: (v["question"], v["answers"], v["ocr"]["text"]) for k, v in got.items()} == {
            str(r["question_id"]): (r["question"].lower().replace("?", " ?"), r.get("answers", []), ocr[r["image_id"]])
            for r in recs}


def _main(workdir: Path, data_dir: Path, manual_dir: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "openvivqa_jax.main", "--config=configs/textvqa/m4c.py", f"--workdir={workdir}",
           f"--config.data.data_dir={data_dir}", f"--config.data.manual_dir={manual_dir}", *TINY, *TINY_M4C]
    return subprocess.run(cmd, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=900)


def test_main_trains_on_a_tfds_build_data_dir(tmp_path):
    """A dataset built by `tfds build --file_format=array_record` is used as it is by the trainer: the
    manual folder is gone by then, so nothing is rebuilt; every val and test question gets a prediction."""
    manual = make_textvqa(tmp_path / "manual")
    data = tmp_path / "data"
    tfds_build("textvqa", manual, data)
    shutil.rmtree(manual)
    res = _main(tmp_path / "run", data, manual)
    assert res.returncode == 0, res.stderr[-4000:]
    for split, ids in (("dev", ["100", "101", "102"]), ("test", ["200", "201"])):  # val is the dev split
        preds = json.loads((tmp_path / "run" / "eval" / f"{split}_predictions.json").read_text(encoding="utf-8"))
        assert sorted(p["question_id"] for p in preds) == ids


def test_main_names_a_tfrecord_build(tmp_path):
    """`tfds build` without --file_format writes tfrecord, which the input pipeline cannot read at random:
    the trainer stops with one line that says so and how to rebuild."""
    manual = make_textvqa(tmp_path / "manual")
    data = tmp_path / "data"
    tfds_build("textvqa", manual, data, file_format=None)
    assert list((data / "textvqa" / "default" / "1.1.0").glob("*.tfrecord-*"))
    res = _main(tmp_path / "run", data, manual)
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last == (f"error: DatasetError: textvqa/default in {data} was built as tfrecord files; this pipeline "
                    "reads array_record (random access, no TensorFlow at read time). Rebuild it with `tfds build "
                    "tfds_builders/textvqa ... --file_format=array_record` (or choose another data.data_dir)")
    assert "Traceback" not in res.stderr


# ---------------------------------------------------------------------------------------------------- ViQuAD


def test_viquad(tmp_path):
    """UIT-ViQuAD in the SQuAD v1.1 JSON form (text only)."""
    manual = make_viquad(tmp_path / "manual")
    data = tmp_path / "data"
    tfds_build("viquad", manual, data, "--config=default")  # without it tfds builds every config
    builder = built(data, "viquad", "default", "1.3.0")
    assert qa(read(builder, "train")) == {
        "uit_1": ("thủ đô của việt nam là gì ?", ["hà nội"]),
        "uit_2": ("thành phố nằm bên sông nào ?", ["sông hồng", "hồng"])}
    dev = read(builder, "dev")
    assert qa(dev) == {"uit_9": ("sông nào ?", ["sông hồng"])}
    assert dev["uit_9"]["context"] == "sông hồng chảy qua hà nội ."


# ----------------------------------------------------------------------------------------- synthetic OpenViVQA


def test_synthetic_tiny(tmp_path):
    """The embedded synthetic set needs no manual files; `--config tiny` builds 40/10/10 images."""
    data = tmp_path / "data"
    tfds_build("synthetic_openvivqa", None, data, "--config", "tiny")
    builder = built(data, "synthetic_openvivqa", "tiny", "1.2.0")
    counts = {s: builder.info.splits[s].num_examples for s in ("train", "validation", "test")}
    images = {s: len({ex["image_id"] for ex in builder.as_data_source()[s]}) for s in ("train", "validation", "test")}
    assert images == {"train": 40, "validation": 10, "test": 10}
    assert all(n >= images[s] for s, n in counts.items())
