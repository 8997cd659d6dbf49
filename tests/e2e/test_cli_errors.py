"""One-line errors of ``python -m openvivqa_jax.main`` where a newcomer met tracebacks: a misspelt config field,
a misspelt config path, a config value out of range, a real-data config without its manual folder, a dataset
smaller than one batch, and Ctrl-C / SIGTERM during training (a checkpoint, one line, and the resume)."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, message_lines, run_main_cli, subprocess_env

PY = sys.executable


_main = functools.partial(run_main_cli, timeout=300)
_error_lines = message_lines


def _assert_one_line(res, code: int, *needles: str) -> str:
    lines = _error_lines(res.stderr)
    assert res.returncode == code, (res.returncode, res.stderr[-3000:])
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert len(lines) == 1, res.stderr[-3000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_misspelt_config_field_keeps_the_suggestion(tmp_path):
    res = _main("--config", "configs/tiny.py", "--workdir", tmp_path, "--config.train.num_train_step=5")
    line = _assert_one_line(res, 2, "--config.train.num_train_step", 'Did you mean "num_train_steps"')
    assert line.startswith("error: ")


def test_misspelt_config_section(tmp_path):
    res = _main("--config", "configs/tiny.py", "--workdir", tmp_path, "--config.trian.batch_size=3")
    _assert_one_line(res, 2, "no field 'trian'", 'Did you mean "train"')


def test_misspelt_config_path(tmp_path):
    res = _main("--config", "configs/defualt.py", "--workdir", tmp_path)
    line = _assert_one_line(res, 2)
    assert line == "error: config file configs/defualt.py not found; did you mean configs/default.py?"


def test_config_file_that_does_not_load(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("def get_config(:\n    pass\n")
    res = _main("--config", bad, "--workdir", tmp_path / "w")
    _assert_one_line(res, 2, f"config file {bad} did not load: SyntaxError")


def test_bad_config_value_type(tmp_path):
    res = _main("--config", "configs/tiny.py", "--workdir", tmp_path, "--config.train.batch_size=abc")
    _assert_one_line(res, 2, "--config.train.batch_size=abc", "invalid literal for int()")


@pytest.mark.parametrize("override, needle", [
    ("--config.tokenizer.vocab_size=100", "tokenizer.vocab_size=100 is out of range: must be an integer >= 261"),
    ("--config.model.num_heads=3", "model.d_model=32 is not divisible by model.num_heads=3"),
])
def test_config_value_out_of_range(tmp_path, override, needle):
    res = _main("--config", "configs/tiny.py", "--workdir", tmp_path / "w", override,
                f"--config.data.data_dir={tmp_path / 'tfds'}")
    line = _assert_one_line(res, 1, "error: ConfigError: ", needle)
    assert "--config." + needle.split("=", 1)[0].split()[0] in line  # the flag that sets it
    assert not (tmp_path / "tfds").exists()  # refused before anything is built


@pytest.mark.parametrize("field, value, message", [
    ("train.batch_size", 0, "config value train.batch_size=0 is out of range: must be an integer >= 1 "
                            "(set it with --config.train.batch_size=...)"),
    ("model.dropout", 1.5, "config value model.dropout=1.5 is out of range: must be a number in [0, 1) "
                           "(set it with --config.model.dropout=...)"),
    ("eval.beam_size", 0, "config value eval.beam_size=0 is out of range: must be an integer >= 1 "
                          "(set it with --config.eval.beam_size=...)"),
    ("tokenizer.vocab_size", 261, None),  # the smallest that holds 256 byte pieces + 4 specials + 1
    ("data.image_size", (64, 4), "config value data.image_size=(64, 4) is out of range: must be (width, height), "
                                 "two integers >= 8 (set it with --config.data.image_size=...)"),
    ("eval.answer_rules", "englsh", "config value eval.answer_rules='englsh' is out of range: must be one of "
                                    "'vietnamese', 'english' (set it with --config.eval.answer_rules=...)"),
    ("tokenizer.model_type", "word", "config value tokenizer.model_type='word' is out of range: must be one of "
                                     "'bpe', 'unigram' (set it with --config.tokenizer.model_type=...)"),
    ("eval.decoding", "beams", "config value eval.decoding='beams' is out of range: must be one of 'greedy', "
                               "'beam' (set it with --config.eval.decoding=...)"),
    ("eval.answer_rules", "english", None),
    ("eval.text_mode", "offical", "config value eval.text_mode='offical' is out of range: must be one of "
                                  "'openvivqa', 'official', 'pycocoevalcap' (set it with --config.eval.text_mode=...)"),
    ("eval.text_mode", "official", None),
])
def test_check_config_ranges(field, value, message):
    from openvivqa_jax.config_check import ConfigError, check_config
    from conftest import load_config

    cfg = load_config("configs/tiny.py")
    section, name = field.split(".")
    cfg[section][name] = value
    if message is None:
        check_config(cfg)
    else:
        with pytest.raises(ConfigError) as e:
            check_config(cfg)
        assert str(e.value) == message


def test_every_shipped_config_passes_the_range_checks():
    import glob

    from openvivqa_jax.config_check import check_config
    from openvivqa_jax.config_files import load_config

    paths = sorted(glob.glob(os.path.join(ROOT, "configs", "**", "*.py"), recursive=True))
    paths = [p for p in paths if os.path.basename(p) != "common.py"]  # shared helpers, not a config
    assert len(paths) >= 10
    for p in paths:
        check_config(load_config(p))


@pytest.mark.slow  # imports TFDS and the builders: about 10 s idle, 35 s on a loaded 2-core machine
def test_missing_manual_folder_gives_one_line_then_the_instructions(tmp_path):
    res = _main("--config", "configs/openvivqa/mlpag.py", "--workdir", tmp_path / "w",
                f"--config.data.data_dir={tmp_path / 'tfds'}")
    assert res.returncode == 1, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    lines = _error_lines(res.stderr)
    folder = tmp_path / "tfds" / "downloads" / "manual"
    assert lines[0] == (f"error: DatasetError: openvivqa/default needs its source files in a manual folder, and "
                        f"{folder} does not exist or is empty; put them there or set "
                        "--config.data.manual_dir=<folder>. Instructions:")
    from tfds_builders.openvivqa import Builder

    assert "\n".join(lines[1:]) == "\n".join(
        ln for ln in Builder.MANUAL_DOWNLOAD_INSTRUCTIONS.strip("\n").splitlines() if ln.strip())
    assert "Downloading and preparing" not in res.stdout  # refused before TFDS starts a build


def test_quiet_filter_drops_backend_notices_only():
    from openvivqa_jax.main import _QuietLibraries

    def rec(path, level, msg):
        return logging.LogRecord("x", level, path, 1, msg, None, None)

    f = _QuietLibraries()
    assert not f.filter(rec("/x/jax/_src/xla_bridge.py", logging.INFO,
                            "Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so"))
    assert f.filter(rec("/x/jax/_src/xla_bridge.py", logging.WARNING, "Unable to initialize backend 'cuda'"))
    assert f.filter(rec("/work/openvivqa_jax/vqa/train.py", logging.INFO, "step 5/20 loss 3.1"))
    assert not f.filter(rec("/x/orbax/checkpoint/foo.py", logging.INFO, "saved"))


_FAKE_TF = '''import os
os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n")
os.write(2, b"I0000 00:00:1.0 1 port.cc:153] oneDNN custom operations are on. You may see ...\\n")
os.write(2, b"E0000 real C++ error from the library\\n")
'''


def _with_fake_tensorflow(tmp_path, code: str) -> subprocess.CompletedProcess:
    """Runs ``python -c code`` with the stand-in ``tensorflow`` package of ``_FAKE_TF`` first on the path."""
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text(_FAKE_TF)
    env = subprocess_env()
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    return subprocess.run([PY, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_tensorflow_start_up_notices_are_dropped_and_other_lines_kept(tmp_path):
    """A stand-in ``tensorflow`` package writes two notices and one real error line straight to file
    descriptor 2 (as TensorFlow's C++ logging does, ignoring TF_CPP_MIN_LOG_LEVEL): only the error line
    reaches standard error, once, and a second call does not import again."""
    res = _with_fake_tensorflow(tmp_path, "import sys; from openvivqa_jax.quiet import import_tensorflow_quietly "
                                          "as q; print(q(), q()); print('after', file=sys.stderr)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "False"]
    assert res.stderr.splitlines() == ["E0000 real C++ error from the library", "after"]


def test_tensorflow_is_imported_only_when_asked_and_then_quietly(tmp_path):
    """``quiet_tensorflow_imports`` imports nothing; the first ``import tensorflow`` afterwards (here of the
    stand-in package) has its notices dropped and the real error line kept."""
    res = _with_fake_tensorflow(tmp_path, "import sys; from openvivqa_jax.quiet import quiet_tensorflow_imports as q; "
                                          "q(); q(); print('tensorflow' in sys.modules); import tensorflow; "
                                          "print('tensorflow' in sys.modules); print('after', file=sys.stderr)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True"]
    assert res.stderr.splitlines() == ["E0000 real C++ error from the library", "after"]


def test_tensorboard_events_are_written_without_tensorflow(tmp_path):
    """Writing scalars imports no TensorFlow (TensorBoard's own event-file writer would, when it is installed)."""
    code = ("import sys; from openvivqa_jax.training.tensorboard_writer import ScalarEventWriter as W; "
            f"w = W({str(tmp_path)!r}); w.write_scalars(3, {{'train/loss': 1.25}}); w.close(); "
            "print('tensorflow' in sys.modules)")
    res = subprocess.run([PY, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.split() == ["False"], res.stderr
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1


@pytest.mark.slow  # 10-30 s on 2 cores: left to the full suite
def test_real_tensorflow_import_prints_no_start_up_notice():
    """With the installed TensorFlow: nothing of its start-up notices reaches standard error."""
    pytest.importorskip("tensorflow")
    code = "from openvivqa_jax.quiet import import_tensorflow_quietly as q; import tensorflow_datasets; print(q())"
    res = subprocess.run([PY, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert "oneDNN" not in res.stderr and "InitializeLog" not in res.stderr, res.stderr

def _tiny_args(tmp_path, data_dir, *extra):
    return ["--config", "configs/tiny.py", "--workdir", tmp_path / "run", f"--config.data.data_dir={data_dir}",
            "--config.eval.decoding=greedy", "--config.eval.ocr_ablation=False", *extra]


@pytest.mark.slow
def test_dataset_smaller_than_one_batch_names_the_flag(tmp_path):
    from tfds_builders.synthetic_openvivqa import Builder, SyntheticOpenVivqaConfig

    sizes = {"name": "one_image", "num_train_images": 1, "num_validation_images": 1, "num_test_images": 1}
    # Built here, so the run's stderr holds no TFDS progress bars, only what the run itself says.
    Builder(config=SyntheticOpenVivqaConfig(**sizes), data_dir=str(tmp_path / "tfds"),
            file_format="array_record").download_and_prepare()
    tiny = json.dumps(sizes)
    res = _main(*_tiny_args(tmp_path, tmp_path / "tfds", f"--config.data.builder_config={tiny}",
                            "--config.train.batch_size=64"), timeout=600)
    line = _assert_one_line(res, 1, "error: DatasetError: synthetic_openvivqa/train: ",
                            "is fewer than one global batch (64 x 1 processes); lower --config.train.batch_size")
    n = int(re.search(r"train: (\d+) examples", line).group(1))
    assert 3 <= n <= 5 and f"(at most {n})" in line  # one image has 3-5 questions
    assert "Unable to initialize backend" not in res.stderr  # JAX's start-up notice is quiet on CPU


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    """The tiny synthetic set, built here (the runs' stderr then holds no TFDS progress bars)."""
    from tfds_builders.synthetic_openvivqa import Builder

    data = tmp_path_factory.mktemp("tfds")
    Builder(config="tiny", data_dir=str(data), file_format="array_record").download_and_prepare()
    return data


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_saves_a_checkpoint_and_the_rerun_resumes(tmp_path, tiny_data, sig, code):
    """A signal during training: the step is finished and saved, one line says where, and the same command
    resumes from that step (before the first periodic checkpoint, which would otherwise lose everything)."""
    data = tiny_data
    args = _tiny_args(tmp_path, data, "--config.train.num_train_steps=100000",
                      "--config.train.checkpoint_every_steps=100000", "--config.train.eval_every_steps=0",
                      "--config.train.log_every_steps=2")
    proc = subprocess.Popen([PY, "-m", "openvivqa_jax.main", *map(str, args)], cwd=ROOT, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jsonl = tmp_path / "run" / "metrics.jsonl"
    deadline = time.time() + 540
    while time.time() < deadline and proc.poll() is None:  # wait for logged training steps
        if jsonl.exists() and jsonl.read_text().count('"kind": "train"') >= 2:
            break
        time.sleep(1)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in err
    lines = _error_lines(err)
    assert len(lines) == 1, err[-3000:]
    m = re.fullmatch(r"interrupted at step (\d+); last checkpoint step (\d+); rerun the same command to resume",
                     lines[0])
    assert m and m.group(1) == m.group(2), lines[0]
    step = int(m.group(1))
    assert step >= 4 and (tmp_path / "run" / "checkpoints" / str(step)).is_dir()
    # The same command (with an end in sight) resumes from that step.
    resume = [a if not str(a).startswith("--config.train.num_train_steps=") else
              f"--config.train.num_train_steps={step + 2}" for a in args]
    res = _main(*resume, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"Resumed from step {step} " in res.stderr
    steps = [json.loads(ln)["step"] for ln in jsonl.read_text().splitlines() if '"kind": "train"' in ln]
    # The interrupted run logged steps <= step; the resumed one steps step+1 (when log_every_steps divides
    # it) and step+2, its last.
    resumed = next(i for i, s in enumerate(steps) if s > step)
    assert all(s <= step for s in steps[:resumed]) and steps[resumed:] in ([step + 1, step + 2], [step + 2])


@pytest.mark.slow
def test_interrupt_during_setup_is_one_line(tmp_path, tiny_data):
    """Ctrl-C before the training loop (here: once the tokenizer is written, while the model is built) gives
    one line too, saying that there is no checkpoint to resume from."""
    args = _tiny_args(tmp_path, tiny_data, "--config.train.num_train_steps=100000")
    proc = subprocess.Popen([PY, "-m", "openvivqa_jax.main", *map(str, args)], cwd=ROOT, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (tmp_path / "run" / "spm.model").exists():
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    lines = _error_lines(err)
    assert len(lines) == 1, err[-3000:]
    assert re.fullmatch(r"interrupted(?: at step \d+)?; (?:no checkpoint yet; rerun the same command to start again "
                        r"from step 0|last checkpoint step \d+; rerun the same command to resume)", lines[0]), lines[0]


@pytest.mark.slow
def test_checkpoint_of_other_model_settings_is_one_line(tmp_path, tiny_data):
    """Resuming or evaluating a run with model settings other than its checkpoint's (here d_model 48 against the
    tiny config's 32) gives one line naming the setting, both values and the run's config.json, exit status 1,
    and leaves config.json as the run wrote it. A config.json that no longer says what the checkpoint holds
    (edited by hand) meets the restore's own check: one line naming a parameter with both shapes."""
    res = _main(*_tiny_args(tmp_path, tiny_data, "--config.train.num_train_steps=4",
                            "--config.train.checkpoint_every_steps=4", "--config.train.eval_every_steps=0"),
                timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    config_path = tmp_path / "run" / "config.json"
    config_json = config_path.read_text()
    assert json.loads(config_json)["model"]["d_model"] == 32
    for mode in ("train", "evaluate"):
        res = _main(*_tiny_args(tmp_path, tiny_data, "--config.train.num_train_steps=8", "--config.model.d_model=48",
                                f"--mode={mode}"))
        _assert_one_line(res, 1, f"error: CheckpointMismatchError: config value model.d_model=48 differs from the "
                                 f"run's 32 ({config_path}), with which its checkpoints were made: resume with the "
                                 "run's setting, or start a fresh run with the new one in another --workdir")
        assert config_path.read_text() == config_json
    config_path.write_text(config_json.replace('"d_model": 32', '"d_model": 48'))
    res = _main(*_tiny_args(tmp_path, tiny_data, "--config.model.d_model=48", "--mode=evaluate"))
    line = _assert_one_line(res, 1, "error: CheckpointMismatchError: checkpoint ", "/4/state does not fit the model "
                            "of this config: ", "parameters differ in shape (e.g. ",
                            ": (32,) in the checkpoint, (48,) in the model)",
                            f"the run was trained with {config_path}")
    assert "Use the model settings the run was trained with, or another --workdir" in line
