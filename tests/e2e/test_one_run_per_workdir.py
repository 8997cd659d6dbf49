"""One run per workdir and one build per dataset folder (openvivqa_jax.locks): a second ``main`` on a workdir in
use refuses at once in one line naming the other process, whatever its mode; a killed holder leaves nothing
locked; a second build of one dataset into one ``data_dir`` waits for the first and uses what it built."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, build_tiny_tfds, message_lines, subprocess_env

PY = sys.executable


def _main_cmd(workdir, data_dir, *overrides) -> list[str]:
    cmd = [PY, "-m", "openvivqa_jax.main", "--config=configs/tiny.py", f"--config.data.data_dir={data_dir}"]
    return cmd + ([f"--workdir={workdir}"] if workdir else []) + list(overrides)


def _run(cmd, timeout=300):
    return subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    """The tiny synthetic set, built once for the module (no build in the runs below)."""
    return build_tiny_tfds(tmp_path_factory)


def _wait_for(condition, proc, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the process ended before {what}: {proc.communicate()[1][-3000:]}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def _assert_refused(res, workdir, pid: int, mode: str) -> None:
    """Exit status 2 and one line naming the holder by pid, host, mode and start time."""
    lines = message_lines(res.stderr)
    assert res.returncode == 2, res.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    pattern = (rf"error: WorkdirInUseError: --workdir {re.escape(str(workdir))} is in use by another run: pid {pid} on "
               rf"host {re.escape(socket.gethostname())} \({re.escape(mode)}, started \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d "
               r"UTC\): \S*python\S* .*; wait for it to end, or choose another --workdir")
    assert re.fullmatch(pattern, lines[0]), lines[0]


def _contents(folder) -> dict[str, int]:
    """``{relative path: size}`` of every file under ``folder``."""
    out = {}
    for d, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, folder)] = os.path.getsize(p)
    return out


def test_every_mode_refuses_a_workdir_in_use_and_a_killed_holder_frees_it(tmp_path):
    """A process holding the workdir (the lock as ``main`` takes it) makes ``main`` refuse in every mode, in one
    line and before anything is read or written (no dataset is opened: the data folder does not even exist);
    once the holder is killed with SIGKILL the workdir's lock is free."""
    from openvivqa_jax import locks

    wd, data = tmp_path / "run", tmp_path / "tfds"
    wd.mkdir()
    code = ("import sys, time; from openvivqa_jax import locks\n"
            "with locks.hold_workdir(sys.argv[1], 'main --mode train'): print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([PY, "-c", code, str(wd)], cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _contents(wd)
        for mode in ("train", "evaluate", "prepare"):
            res = _run(_main_cmd(wd, data, f"--mode={mode}"))
            _assert_refused(res, wd, holder.pid, "main --mode train")
        assert _contents(wd) == before and not data.exists()  # nothing written, no data folder left behind
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with locks.hold_workdir(str(wd), "main --mode evaluate"):  # not stuck: the OS released the killed holder's lock
        side = json.loads((wd / ".openvivqa-run.lock.json").read_text())
        assert side["pid"] == os.getpid() and side["mode"] == "main --mode evaluate"
    assert not (wd / ".openvivqa-run.lock.json").exists()


@pytest.mark.slow
def test_a_second_training_on_a_workdir_refuses_and_the_first_goes_on(tmp_path, tiny_data):
    """The recipe: ``main`` twice on one workdir, the second while the first trains; and ``--mode evaluate``
    beside it. Each refuses in one line naming the training process; the training goes on, saves, and stops
    on Ctrl-C with its usual line."""
    wd = tmp_path / "run"
    args = ["--config.train.num_train_steps=100000", "--config.train.checkpoint_every_steps=4",
            "--config.train.eval_every_steps=0", "--config.train.log_every_steps=2"]
    first = subprocess.Popen(_main_cmd(wd, tiny_data, *args), cwd=ROOT, env=subprocess_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ckpt = wd / "checkpoints"
    try:
        _wait_for(lambda: ckpt.is_dir() and any(n.isdigit() for n in os.listdir(ckpt)), first, 540,
                  "the first checkpoint")
        for mode in ("train", "evaluate"):
            res = _run(_main_cmd(wd, tiny_data, *args, f"--mode={mode}"))
            _assert_refused(res, wd, first.pid, "main --mode train")
        saved = max(int(n) for n in os.listdir(ckpt) if n.isdigit())
        _wait_for(lambda: any(n.isdigit() and int(n) > saved for n in os.listdir(ckpt)), first, 300,
                  "a later checkpoint of the first run")
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 130 and "Traceback" not in err, err[-3000:]
    lines = message_lines(err)
    assert len(lines) == 1 and re.fullmatch(r"interrupted at step (\d+); last checkpoint step \1; rerun the same "
                                            r"command to resume", lines[0]), err[-3000:]
    steps = [r["step"] for r in map(json.loads, (wd / "metrics.jsonl").read_text().splitlines())]
    assert steps == sorted(steps) and len(steps) == len(set(steps))  # one writer: no step logged twice


#: A synthetic set large enough that its build (about 30 s) is still under way when the other process asks.
_BUILD = json.dumps({"name": "lock_test", "num_train_images": 300, "num_validation_images": 10,
                     "num_test_images": 10})


@pytest.mark.slow
def test_a_second_build_into_one_data_dir_waits_for_the_first(tmp_path):
    """The recipe: two ``--mode prepare`` of one dataset into one fresh data_dir, started together. One builds;
    the other says once whom it waits for, builds nothing, and both end with the same dataset's splits."""
    data = tmp_path / "tfds"
    cmd = _main_cmd(None, data, "--mode=prepare", f"--config.data.builder_config={_BUILD}")
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    notes = [[ln for ln in err.splitlines() if ln.startswith("note: ")] for _, err in outs]
    assert sorted(map(len, notes)) == [0, 1], [err[-2000:] for _, err in outs]
    waiter = 0 if notes[0] else 1
    builder = procs[1 - waiter]
    assert re.fullmatch(rf"note: synthetic_openvivqa is being built into {re.escape(str(data))}/synthetic_openvivqa/"
                        rf"lock_test by pid {builder.pid} on host {re.escape(socket.gethostname())} \(building "
                        r"synthetic_openvivqa, started .*\): \S*python\S* .*; waiting for that build to finish, then "
                        r"using it", notes[waiter][0]), notes[waiter][0]
    assert "Downloading and preparing dataset" in outs[1 - waiter][0]
    assert "Downloading and preparing dataset" not in outs[waiter][0]  # it built nothing
    found = [re.findall(r"^synthetic_openvivqa/lock_test/\S+ \{'train': \d+, 'validation': \d+, 'test': \d+\}$", out,
                        re.M) for out, _ in outs]
    assert len(found[0]) == 1 and found[0] == found[1], outs  # the same dataset, read by both
    assert not glob.glob(str(data / "synthetic_openvivqa" / "lock_test" / ".*.build.lock.json"))  # released


def _process_cmd(workdir, data_dir, port: int, pid: int) -> list[str]:
    """``main`` as process ``pid`` of a 2-process run (one CPU device each, coordinator on ``port``)."""
    return _main_cmd(workdir, data_dir, "--config.train.num_train_steps=2", "--config.train.eval_every_steps=0",
                     "--config.train.checkpoint_every_steps=2", "--config.eval.ocr_ablation=False",
                     "--config.distributed.initialize=True", f"--config.distributed.coordinator_address=127.0.0.1:{port}",
                     "--config.distributed.num_processes=2", f"--config.distributed.process_id={pid}",
                     "--config.distributed.cpu_collectives=gloo")


@pytest.mark.slow
def test_the_processes_of_one_run_share_its_workdir_and_a_second_launch_is_refused(tmp_path, tiny_data):
    """Two JAX processes of one run on one host and one workdir: each locks its own file, so both train; a
    second launch of that run, while the workdir's locks are held, is refused by each of its processes."""
    from test_distributed import _env, _free_port, _run_all

    wd = tmp_path / "run"
    port = _free_port()
    _run_all([(_process_cmd(wd, tiny_data, port, pid), _env(1)) for pid in range(2)], str(tmp_path))
    assert sorted(n for n in os.listdir(wd) if n.startswith(".openvivqa-run")) == [".openvivqa-run.1.lock",
                                                                                   ".openvivqa-run.lock"]
    assert (wd / "checkpoints" / "2").is_dir()
    code = ("import sys, time; from openvivqa_jax import locks\n"
            "with locks.hold_workdir(sys.argv[1], 'main --mode train', process_index=0), "
            "locks.hold_workdir(sys.argv[1], 'main --mode train', process_index=1): "
            "print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([PY, "-c", code, str(wd)], cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        port = _free_port()
        procs = [subprocess.Popen(_process_cmd(wd, tiny_data, port, pid), cwd=ROOT, env=_env(1),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for pid in range(2)]
        results = []
        for p in procs:
            try:
                _, err = p.communicate(timeout=300)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            results.append(subprocess.CompletedProcess(p.args, p.returncode, "", err))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    for res in results:
        _assert_refused(res, wd, holder.pid, "main --mode train")
