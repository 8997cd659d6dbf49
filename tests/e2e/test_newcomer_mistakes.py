"""What a new user trips on, each answered in one line before any work starts, or by a WARNING line:
an unknown model name or config variant, an out-of-range value (before TensorFlow and JAX are imported), a
split the dataset does not have (before the tokenizer, the compile and training), a smoke run that trains
nothing (warm-up past the last step, a vocabulary far below ``vocab_size``, inputs mostly cut), a finished run
started again, per-split OCR counts, TensorBoard scalars."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from conftest import ROOT, load_config, message_lines, run_main_cli, subprocess_env

PY = sys.executable


_main = run_main_cli
_lines = message_lines


def test_unknown_model_name_is_one_line_with_the_names_before_the_dataset(tmp_path):
    res = _main("--config", "configs/tiny.py", "--workdir", tmp_path / "w", "--config.model.name=mlpagg",
                f"--config.data.data_dir={tmp_path / 'tfds'}")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    lines = _lines(res.stderr)
    assert lines == ["error: ConfigError: config value model.name='mlpagg' is out of range: must be one of 'mlpag', "
                     "'fst', 'qumlag', 'm4c', 'saaa', 'mcan', 'lorra' (set it with --config.model.name=...)"]
    assert not (tmp_path / "tfds").exists() and not (tmp_path / "w").exists()  # nothing was built


def test_unknown_config_variant_lists_the_variants_without_a_traceback(tmp_path):
    res = _main("--config", "configs/openvivqa/mlpag.py:image", "--workdir", tmp_path / "w")
    assert res.returncode == 2
    assert _lines(res.stderr) == ["error: config file configs/openvivqa/mlpag.py:image did not load: ValueError: "
                                  "unknown variant 'image'; expected one of ('images', 'cnn', 'features', "
                                  "'benchmark')"]
    assert "Traceback" not in res.stderr and "File " not in res.stderr


def test_out_of_range_value_fails_before_tensorflow_and_jax_are_imported(tmp_path):
    """The check runs first: neither TensorFlow nor JAX is imported when the error line is printed."""
    code = ("import atexit, sys, runpy\n"
            "atexit.register(lambda: print('imported:', sorted(m for m in ('tensorflow', 'jax', 'flax') "
            "if m in sys.modules)))\n"
            f"sys.argv = ['main', '--config', 'configs/tiny.py', '--workdir', {str(tmp_path / 'w')!r}, "
            "'--config.train.batch_size=0']\n"
            "runpy.run_module('openvivqa_jax.main', run_name='__main__')\n")
    res = subprocess.run([PY, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 1, res.stderr[-2000:]
    assert _lines(res.stderr) == ["error: ConfigError: config value train.batch_size=0 is out of range: must be an "
                                  "integer >= 1 (set it with --config.train.batch_size=...)"]
    assert res.stdout.strip() == "imported: []"


def test_misspelled_vision_kind_is_checked_with_the_config():
    """A vision kind the pipeline does not know would otherwise give every question empty regions."""
    from openvivqa_jax.config_check import ConfigError, check_config

    cfg = load_config("configs/default.py")
    cfg.model.vision.kind = "proposal"
    with pytest.raises(ConfigError, match=r"model.vision.kind='proposal' is out of range: must be one of 'cnn', "
                                          r"'vit', 'region', 'proposals' \(set it with --config.model.vision.kind"):
        check_config(cfg)


def test_misspelled_ocr_feature_group_is_checked_with_the_config():
    from openvivqa_jax.config_check import ConfigError, check_config

    cfg = load_config("configs/default.py")
    cfg.model.ocr_features = ("phoc", "appearance", "boxgrid")
    with pytest.raises(ConfigError, match=r"model.ocr_features=\('phoc', 'appearance', 'boxgrid'\) is out of range: "
                                          r"must be a tuple of 'pieces', 'phoc', 'appearance', 'box_grid'"):
        check_config(cfg)


def test_model_dtype_is_checked_with_the_config():
    from openvivqa_jax.config_check import ConfigError, check_config

    cfg = load_config("configs/tiny.py")
    cfg.model.dtype = "float16"
    with pytest.raises(ConfigError, match=r"model.dtype='float16' is out of range: must be one of 'float32', "
                                          r"'bfloat16'"):
        check_config(cfg)


def test_warmup_past_the_last_step_warns_with_the_rate_reached(caplog):
    from openvivqa_jax.vqa import train

    cfg = load_config("configs/tiny.py")
    cfg.train.schedule, cfg.train.warmup_steps, cfg.train.num_train_steps, cfg.train.lr_scale = "noam", 10000, 5, 1.0
    cfg.model.d_model = 512
    with caplog.at_level(logging.WARNING), caplog.at_level(logging.WARNING, logger="absl"):
        train.warn_warmup(cfg)
    (rec,) = [r for r in caplog.records if "warmup_steps" in r.getMessage()]
    assert rec.levelno == logging.WARNING
    # noam at step s (counted from 1): d^-0.5 * s * warm^-1.5; last step 5, peak at step 10000
    last, peak = 512 ** -0.5 * 5 * 10000 ** -1.5, 512 ** -0.5 * 10000 ** -0.5
    msg = rec.getMessage()
    assert f"reaches {last:.2e} at the last step" in msg and f"peak {peak:.2e} is at step 10000" in msg
    assert "--config.train.warmup_steps=1" in msg
    caplog.clear()
    cfg.train.warmup_steps = 5
    with caplog.at_level(logging.WARNING), caplog.at_level(logging.WARNING, logger="absl"):
        train.warn_warmup(cfg)
    assert not caplog.records


def test_inputs_mostly_cut_warn(caplog):
    from openvivqa_jax.vqa import train

    cfg = load_config("configs/tiny.py")
    with caplog.at_level(logging.WARNING), caplog.at_level(logging.WARNING, logger="absl"):
        train.warn_cut_inputs("evaluation", {"question_truncation_rate": 1.0, "answer_truncation_rate": 0.2},
                              cfg.model)
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == [f"100.0% of the evaluation questions were cut at model.max_question_len="
                    f"{cfg.model.max_question_len}: raise --config.model.max_question_len; a tokenizer trained on "
                    "little text splits words into many short pieces (docs/datasets.md, Tiny folders)"]


def test_a_small_corpus_giving_fewer_pieces_than_vocab_size_warns(tmp_path, caplog):
    from openvivqa_jax.text.tokenizer import train_sentencepiece

    sentences = ["cửa hàng tên gì", "biển hiệu màu gì", "có mấy cửa hàng"] * 5
    with caplog.at_level(logging.WARNING), caplog.at_level(logging.WARNING, logger="absl"):
        tok = train_sentencepiece(sentences, str(tmp_path / "spm.model"), 4000)
    assert tok.vocab_size < 4000
    (rec,) = [r for r in caplog.records if "gives only" in r.getMessage() or "give only" in r.getMessage()]
    assert f"give only {tok.vocab_size} pieces" in rec.getMessage() and "tokenizer.vocab_size=4000" in rec.getMessage()


def test_finished_step_needs_the_last_checkpoint_and_its_final_records(tmp_path):
    from openvivqa_jax.vqa.train import finished_step

    (tmp_path / "checkpoints" / "10").mkdir(parents=True)
    assert finished_step(str(tmp_path), 10) is None  # no metrics.jsonl
    with open(tmp_path / "metrics.jsonl", "w", encoding="utf-8") as f:
        f.write(json.dumps({"step": 10, "kind": "train", "loss": 1.0}) + "\n")
    assert finished_step(str(tmp_path), 10) is None  # trained, final evaluation not done
    with open(tmp_path / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": 10, "kind": "final", "test/CIDEr": 0.1}) + "\n{\"step\": 1")  # cut last line
    assert finished_step(str(tmp_path), 10) == 10
    assert finished_step(str(tmp_path), 20) is None  # asked to train longer: resume


def test_ocr_counts_per_split_are_not_cumulative(caplog):
    from tfds_builders import readers

    src = readers.OcrSource("none", None)
    with caplog.at_level(logging.INFO), caplog.at_level(logging.INFO, logger="absl"):
        src.stats.update({"images": 7, "tokens_kept": 30})
        src.log_summary("x/train")
        src.stats.update({"images": 10, "tokens_kept": 41})  # 3 more images in the next split
        src.log_summary("x/test")
    lines = [r.getMessage() for r in caplog.records if "OCR engine" in r.getMessage()]
    assert lines == ["x/train: OCR engine none, stats {'images': 7, 'tokens_kept': 30}",
                     "x/test: OCR engine none, stats {'images': 3, 'tokens_kept': 11}"]
    assert src.stats == {"images": 10, "tokens_kept": 41}


def test_tensorboard_events_are_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from openvivqa_jax.training.tensorboard_writer import ScalarEventWriter, event_files

    w = ScalarEventWriter(str(tmp_path))
    assert event_files(str(tmp_path)) == []  # no file before the first write
    w.write_scalars(5, {"train/loss": 2.5, "dev/CIDEr": 0.25})
    w.write_scalars(10, {"train/loss": 1.5})
    w.close()
    (path,) = event_files(str(tmp_path))
    acc = EventAccumulator(path)
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["dev/CIDEr", "train/loss"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(5, 2.5), (10, 1.5)]


@pytest.mark.slow
def test_missing_dev_split_is_one_line_before_training(tmp_path):
    res = _main("--config", "configs/tiny.py", "--workdir", tmp_path / "w", f"--config.data.data_dir={tmp_path / 't'}",
                "--config.data.eval_split=dev")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert _lines(res.stderr)[-1:] == [
        "error: DatasetError: config value data.eval_split='dev' names split 'dev', which synthetic_openvivqa does "
        "not have (its splits: test, train, validation); set --config.data.eval_split=... to one of them"]
    assert not (tmp_path / "w" / "spm.model").exists() and not (tmp_path / "w" / "checkpoints").exists()


@pytest.mark.slow
def test_rerunning_a_finished_run_does_nothing_and_says_how_to_rescore(tmp_path):
    """The second run prints one line, appends nothing to metrics.jsonl and writes no second TensorBoard file;
    the first wrote the final test scores to TensorBoard as scalars and the dev/test files by role."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from openvivqa_jax.training.tensorboard_writer import event_files

    wd, data = tmp_path / "w", tmp_path / "t"
    args = ("--config", "configs/tiny.py", "--workdir", wd, f"--config.data.data_dir={data}",
            "--config.train.num_train_steps=4", "--config.train.eval_every_steps=4", "--config.train.log_every_steps=2",
            "--config.train.checkpoint_every_steps=4")
    first = _main(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (wd / "eval" / "dev_metrics.json").exists() and (wd / "eval" / "test_metrics.json").exists()
    assert not (wd / "eval" / "validation_metrics.json").exists()
    (events,) = event_files(str(wd))
    acc = EventAccumulator(events)
    acc.Reload()
    test_cider = json.loads((wd / "eval" / "test_metrics.json").read_text(encoding="utf-8"))["overall"]["CIDEr"]
    assert [(e.step, e.value) for e in acc.Scalars("test/CIDEr")] == [(4, pytest.approx(test_cider, rel=1e-6))]
    assert "dev/CIDEr" in acc.Tags()["scalars"] and "train/loss" in acc.Tags()["scalars"]
    assert {"test/shop_name_copy_rate", "test/text_qa_cider_ocr_ratio"} <= set(acc.Tags()["scalars"])
    before = (wd / "metrics.jsonl").read_text(encoding="utf-8")
    # the table of each split is printed once (stdout), not logged again
    assert first.stdout.count("== dev: validation (41 questions) ==") == 1
    assert "validation metrics (" not in first.stderr and "dev metrics (" not in first.stderr

    again = _main(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip() == (f"{wd}: this run finished at step 4 and its final scores are in metrics.jsonl "
                                    "and eval/; nothing to do. To score it again: --mode evaluate; to train longer: "
                                    "--config.train.num_train_steps=<more than 4>")
    assert (wd / "metrics.jsonl").read_text(encoding="utf-8") == before
    assert event_files(str(wd)) == [events]
