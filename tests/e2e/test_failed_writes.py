"""A write that fails (a full disk, a file-size limit, a name too long, a full standard output) ends a command
with one ``error:`` line naming the file and the reason; the old file is left as it was, with no 0-byte or
temporary file beside it; training keeps its last good checkpoint and resumes from it exactly.

A full disk is simulated portably by a file-size limit (``RLIMIT_FSIZE`` in the child, SIGXFSZ ignored, so
a write past the limit fails with EFBIG), standard output by ``/dev/full``, and, where this process may mount
one, by a small tmpfs (skipped, saying why, otherwise)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, build_tiny_tfds, message_lines, read_jsonl, subprocess_env, tiny_model_config

PY = sys.executable


#: Runs ``python ARGS`` with files limited to ``LIMIT`` bytes (``python -c LAUNCHER LIMIT ARGS...``): SIGXFSZ
#: ignored, so that a write past the limit fails with EFBIG, then the interpreter run anew (exec keeps both).
#: A launcher rather than ``preexec_fn``: the test process may have started JAX's threads, and running Python
#: code between fork and exec in a threaded process can deadlock.
_LAUNCHER = ("import os, resource, signal, sys; n = int(sys.argv[1]); signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
             "resource.setrlimit(resource.RLIMIT_FSIZE, (n, n)); os.execv(sys.executable, [sys.executable] + sys.argv[2:])")


def _env() -> dict:
    """The tests' subprocess environment without the shared JAX compilation cache (whose writes would meet the
    file-size limit first)."""
    env = subprocess_env(extra={"JAX_ENABLE_COMPILATION_CACHE": "false"})
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return env


def _run(module: str, *args, limit: int | None = None, stdout=subprocess.PIPE, timeout=600):
    launch = [PY, "-c", _LAUNCHER, str(limit)] if limit else [PY]
    return subprocess.run([*launch, "-m", module, *map(str, args)], cwd=ROOT, env=_env(), stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def _one_line(res, code: int) -> str:
    lines = message_lines(res.stderr)
    assert res.returncode == code, res.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in res.stderr and "Exception ignored" not in res.stderr, \
        res.stderr[-3000:]
    return lines[0]


# ------------------------------------------------------------------------------------------------ evaluate
def _scoring_files(tmp_path):
    preds = tmp_path / "preds.json"
    refs = tmp_path / "refs.json"
    preds.write_text(json.dumps({"1": "màu đỏ", "2": "hai chiếc xe"}, ensure_ascii=False), encoding="utf-8")
    refs.write_text(json.dumps({"1": ["màu đỏ"], "2": ["ba chiếc xe"]}, ensure_ascii=False), encoding="utf-8")
    return preds, refs


def test_evaluate_json_on_a_full_disk_keeps_the_earlier_result(tmp_path):
    preds, refs = _scoring_files(tmp_path)
    out = tmp_path / "result.json"
    args = ("--predictions", preds, "--references", refs, "--metrics", "BLEU-1,CIDEr", "--json", out)
    first = _run("openvivqa_jax.evaluate", *args)
    assert first.returncode == 0, first.stderr
    earlier = out.read_bytes()
    assert json.loads(earlier)["overall"]["BLEU-1"] > 0
    res = _run("openvivqa_jax.evaluate", *args, limit=100)
    assert out.read_bytes() == earlier  # not a 0-byte file
    assert _one_line(res, 2) == f"error: could not write --json {out}: File too large"
    assert sorted(os.listdir(tmp_path)) == ["preds.json", "refs.json", "result.json"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
def test_evaluate_table_into_a_full_standard_output(tmp_path):
    preds, refs = _scoring_files(tmp_path)
    with open("/dev/full", "w") as full:
        res = _run("openvivqa_jax.evaluate", "--predictions", preds, "--references", refs, "--metrics",
                   "BLEU-1,CIDEr", "--table", stdout=full)
    assert _one_line(res, 2) == "error: could not write to standard output: No space left on device"


# ------------------------------------------------------------------------------------------------- predict
@pytest.fixture(scope="module")
def untrained_run(tmp_path_factory):
    """A tiny MLPAG run folder with a step-1 checkpoint of an untrained model (predict answers from it)."""
    from test_predict import _save_untrained_run

    from openvivqa_jax.text.tokenizer import train_sentencepiece

    wd = tmp_path_factory.mktemp("untrained")
    cfg = tiny_model_config("mlpag")
    cfg.mesh.shape = (1, 1)
    sents = ["cửa hàng này tên là gì ?", "xe màu gì ?", "có mấy chiếc xe máy ?", "phở hùng", "màu đỏ"] * 20
    train_sentencepiece(sents, str(wd / "spm.model"), 300)
    _save_untrained_run(wd, cfg)
    return wd


def _questions(tmp_path):
    from PIL import Image

    Image.new("RGB", (64, 48), (200, 30, 30)).save(tmp_path / "a.png")
    q = tmp_path / "questions.json"
    q.write_text(json.dumps({"images": {"1": "a.png"},
                             "annotations": {"10": {"image_id": 1, "question": "cửa hàng này tên gì ?"},
                                             "20": {"image_id": 1, "question": "biển hiệu màu gì ?"}}},
                            ensure_ascii=False), encoding="utf-8")
    return q


@pytest.mark.slow
def test_predict_output_on_a_full_disk_or_with_too_long_a_name(tmp_path, untrained_run):
    """The recipe: ``--output`` over an earlier submission on a full disk, then a name longer than the file
    system allows. Each is one line naming the file and the reason; the earlier submission is intact and
    no 0-byte or temporary file is left."""
    q = _questions(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    sub = out / "submission.json"
    sub.write_text('{"10": "earlier answer", "20": "earlier answer"}', encoding="utf-8")
    args = ("--workdir", untrained_run, "--questions", q, "--ocr", "none")
    res = _run("openvivqa_jax.predict", *args, "--output", sub, limit=8)
    assert _one_line(res, 2) == f"error: could not write --output {sub}: File too large"
    assert sub.read_text(encoding="utf-8") == '{"10": "earlier answer", "20": "earlier answer"}'
    long = out / ("x" * 300 + ".json")
    res = _run("openvivqa_jax.predict", *args, "--output", long)
    assert _one_line(res, 2) == f"error: could not write --output {long}: File name too long"
    assert os.listdir(out) == ["submission.json"]


# ------------------------------------------------------------------------------------------------ training
def _main_args(workdir, data_dir, *overrides):
    return ("--config=configs/tiny.py", f"--workdir={workdir}", f"--config.data.data_dir={data_dir}", *overrides)


def _losses(workdir) -> dict[int, float]:
    """step -> the last logged training loss (a resumed run logs a step again)."""
    return {r["step"]: r["loss"] for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if r["kind"] == "train"}


def _digests(folder) -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, folder)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return build_tiny_tfds(tmp_path_factory)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_data):
    """The training losses of the tiny config's run (20 steps) made without interruption."""
    wd = tmp_path_factory.mktemp("uninterrupted") / "run"
    res = _run("openvivqa_jax.main", *_main_args(wd, tiny_data))
    assert res.returncode == 0, res.stderr[-3000:]
    return _losses(wd)


_KEPT = (r"; the last good checkpoint, step 5 in {checkpoints}, is kept; free some space and rerun the same command "
         r"to resume from it")


@pytest.mark.slow
def test_checkpoint_past_a_file_size_limit_keeps_the_last_good_step(tmp_path, tiny_data, uninterrupted):
    """A run resumed from step 5 under a file-size limit fails to save step 10: one line naming the step's
    folder, the reason and step 5, which is intact; the same command without the limit resumes from step 5
    and logs the uninterrupted run's losses."""
    wd = tmp_path / "run"
    res = _run("openvivqa_jax.main", *_main_args(wd, tiny_data, "--config.train.num_train_steps=5"))
    assert res.returncode == 0, res.stderr[-3000:]
    kept = _digests(wd / "checkpoints" / "5")
    res = _run("openvivqa_jax.main", *_main_args(wd, tiny_data), limit=64 * 1024)
    line = _one_line(res, 1)
    where = re.escape(str(wd))
    assert re.fullmatch(rf"error: CheckpointWriteError: could not write checkpoint step 10 to {where}/(best|checkpoints)"
                        rf"/10: File too large" + _KEPT.format(checkpoints=re.escape(str(wd / "checkpoints"))),
                        line), line
    assert _digests(wd / "checkpoints" / "5") == kept
    assert not [n for n in os.listdir(wd / "checkpoints") + os.listdir(wd / "best") if n.startswith("10")]
    res = _run("openvivqa_jax.main", *_main_args(wd, tiny_data))
    assert res.returncode == 0 and "Resumed from step 5 " in res.stderr, res.stderr[-3000:]
    got = _losses(wd)
    assert sorted(got) == sorted(uninterrupted) == [5, 10, 15, 20]
    for step, loss in uninterrupted.items():
        assert got[step] == pytest.approx(loss, rel=1e-5, abs=1e-6), step


def _mount_tmpfs(folder, size: str) -> str | None:
    """Mounts a tmpfs of ``size`` on ``folder``; None when done, else why it cannot be."""
    if not shutil.which("mount") or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "mounting a tmpfs needs root and mount(8)"
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True,
                         text=True)
    return None if res.returncode == 0 else f"mount -t tmpfs failed: {res.stderr.strip()}"


@pytest.mark.slow
def test_a_full_disk_during_a_checkpoint_save_is_one_line_and_resumes_exactly(tmp_path, tiny_data, uninterrupted):
    """The recipe: the tiny run in a 3 MB tmpfs workdir fills it while saving step 10 (its dev-best checkpoint):
    one line, step 5 kept, a clean exit. With room made (the tmpfs grown), the same command resumes from step 5
    and logs the uninterrupted run's losses."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    why = _mount_tmpfs(mnt, "3m")
    if why:
        pytest.skip(why)
    try:
        wd = mnt / "run"
        res = _run("openvivqa_jax.main", *_main_args(wd, tiny_data))
        line = _one_line(res, 1)
        assert re.fullmatch(rf"error: CheckpointWriteError: could not write checkpoint step 10 to "
                            rf"{re.escape(str(wd))}/(best|checkpoints)/10: No space left on device"
                            + _KEPT.format(checkpoints=re.escape(str(wd / "checkpoints"))), line), line
        assert sorted(os.listdir(wd / "checkpoints")) == ["5"]
        subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
        res = _run("openvivqa_jax.main", *_main_args(wd, tiny_data))
        assert res.returncode == 0 and "Resumed from step 5 " in res.stderr, res.stderr[-3000:]
        got = _losses(wd)
        for step, loss in uninterrupted.items():
            assert got[step] == pytest.approx(loss, rel=1e-5, abs=1e-6), step
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
