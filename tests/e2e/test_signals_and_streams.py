"""Signals and streams: a second Ctrl-C while the first one's checkpoint is being saved stops the run at once
with one line (it used to be dropped inside JAX's garbage-collector callback, with a traceback, or to leave
orbax's threads printing hundreds of lines); a stream whose encoding cannot hold Vietnamese (``PYTHONIOENCODING=
ascii``) gets escapes, never a crash after the work is done, and JSON printed on it stays valid."""

from __future__ import annotations

import glob
import json
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, build_tiny_tfds, message_lines, subprocess_env
from test_failed_writes import _questions, untrained_run  # noqa: F401 - the fixture, shared

PY = sys.executable


def _ascii_env() -> dict:
    return subprocess_env(extra={"PYTHONIOENCODING": "ascii"})


def _run(module: str, *args, timeout=600):
    return subprocess.run([PY, "-m", module, *map(str, args)], cwd=ROOT, env=_ascii_env(), capture_output=True,
                          text=True, encoding="ascii", timeout=timeout)


def test_evaluate_prints_vietnamese_on_an_ascii_stream(tmp_path):
    """A predictions file with a Vietnamese name (``dự_đoán.json``, named in the result's ``inputs`` and in the
    warning): on an ASCII stream both come out escaped, and the JSON parses back to the name as given."""
    preds = tmp_path / "dự_đoán.json"
    refs = tmp_path / "refs.json"
    preds.write_text(json.dumps({"1": "màu đỏ", "2": "hai chiếc xe", "9": "thừa"}, ensure_ascii=False),
                     encoding="utf-8")
    refs.write_text(json.dumps({"1": ["màu đỏ"], "2": ["ba chiếc xe"]}, ensure_ascii=False), encoding="utf-8")
    res = _run("openvivqa_jax.evaluate", "--predictions", preds, "--references", refs, "--metrics", "BLEU-1")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "d\\u1ef1_\\u0111o\\u00e1n.json" in res.stdout
    out = json.loads(res.stdout)
    assert out["inputs"]["predictions"] == str(preds)
    assert out["overall"]["BLEU-1"] == pytest.approx(0.8)  # 4 of the 5 answer words are in the references; lengths equal
    lines = message_lines(res.stderr)
    assert len(lines) == 1 and lines[0].startswith("warning: 1 of 3 prediction ids are missing")


@pytest.mark.slow
def test_predict_prints_vietnamese_on_an_ascii_stream(tmp_path, untrained_run):  # noqa: F811
    """The recipe: predict with ``PYTHONIOENCODING=ascii`` answered, then crashed printing. Now the text output
    carries the question escaped and ``--json`` parses back to the question as given; a batch's submission
    file is UTF-8 whatever the stream."""
    from PIL import Image

    photo = tmp_path / "a.png"
    Image.new("RGB", (64, 48), (200, 30, 30)).save(photo)
    question = "cửa hàng này tên gì ?"  # as the questions are cleaned (punctuation apart)
    args = ("--workdir", untrained_run, "--image", photo, "--question", question, "--ocr", "none")
    res = _run("openvivqa_jax.predict", *args)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "question: c\\u1eeda h\\u00e0ng n\\u00e0y t\\u00ean g\\u00ec ?" in res.stdout.splitlines()
    res = _run("openvivqa_jax.predict", *args, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["question"] == question
    sub = tmp_path / "sub.json"
    res = _run("openvivqa_jax.predict", "--workdir", untrained_run, "--questions", _questions(tmp_path), "--ocr",
               "none", "--output", sub)
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(json.loads(sub.read_text(encoding="utf-8"))) == ["10", "20"]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return build_tiny_tfds(tmp_path_factory)


@pytest.mark.slow
def test_second_ctrl_c_during_the_checkpoint_save_stops_at_once(tmp_path, tiny_data):
    """The recipe: Ctrl-C during training (the step is finished and saved), then Ctrl-C again while that save
    runs. The process ends with status 130 and one line (no checkpoint was completed, or the save won the
    race and the line names it), no traceback, no "Exception ignored", and the same command runs again."""
    wd = tmp_path / "run"
    args = [PY, "-m", "openvivqa_jax.main", "--config=configs/tiny.py", f"--workdir={wd}",
            f"--config.data.data_dir={tiny_data}", "--config.train.num_train_steps=100000",
            "--config.train.checkpoint_every_steps=100000", "--config.train.eval_every_steps=0",
            "--config.train.log_every_steps=2"]
    proc = subprocess.Popen(args, cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    jsonl = wd / "metrics.jsonl"
    deadline = time.time() + 540
    while time.time() < deadline and proc.poll() is None:
        if jsonl.exists() and jsonl.read_text().count('"kind": "train"') >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGINT)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not glob.glob(str(wd / "checkpoints" / "*-tmp*")):
        time.sleep(0.001)
    time.sleep(0.2)  # into the save: where the old handler's exception was dropped in a gc callback
    proc.send_signal(signal.SIGINT)
    sent = time.time()
    _, err = proc.communicate(timeout=300)
    took = time.time() - sent
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    lines = message_lines(err)
    assert len(lines) == 1, err[-3000:]
    assert re.fullmatch(r"interrupted; no checkpoint yet; rerun the same command to start again from step 0|"
                        r"interrupted at step (\d+); last checkpoint step \1; rerun the same command to resume",
                        lines[0]), lines[0]
    assert took < 20, took  # no wait for the save's threads (they took seconds, or printed for minutes)
    if lines[0].startswith("interrupted; no checkpoint yet"):  # the unfinished save is passed over: a new start
        rerun = [a if not a.startswith("--config.train.num_train_steps=") else "--config.train.num_train_steps=2"
                 for a in args]
        res = subprocess.run(rerun, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
        assert res.returncode == 0 and "training starts at step 0" in res.stderr, res.stderr[-3000:]
