"""A corrupt newest checkpoint (a data file of its step truncated): restoring falls back to the newest step that
restores with one warning line naming the bad step, keeps the bad step, and ends in one ``error:`` line when no
step restores. In process (parameters of a small saved state) and end to end (resume, --mode evaluate, predict)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import ROOT, subprocess_env
from openvivqa_jax.training import checkpoints


def _truncate_data_files(step_dir: Path) -> list[Path]:
    """Cuts every array data file of a step's ``state`` item to half its size (the TensorStore chunks)."""
    files = [p for p in (step_dir / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
    assert files, sorted(str(p) for p in (step_dir / "state").rglob("*"))
    for p in files:
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 2])
    return files


def _save_steps(directory: Path, values: dict[int, float]) -> None:
    mngr = ocp.CheckpointManager(str(directory), item_names=("state", "data_iter"),
                                 options=ocp.CheckpointManagerOptions(max_to_keep=5, create=True))
    for step, v in values.items():
        state = {"step": jnp.int32(step), "params": {"w": jnp.full((8, 8), v, jnp.float32)},
                 "opt_state": {"m": jnp.zeros((8, 8))}}
        mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                data_iter=ocp.args.JsonSave({"iterator": step})))
    mngr.wait_until_finished()
    mngr.close()


def _abstract():
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))
    s = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return {"w": jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=s)}


def test_restore_params_falls_back_to_the_newest_step_that_restores(tmp_path, capsys):
    _save_steps(tmp_path / "checkpoints", {2: 2.0, 4: 4.0})
    _truncate_data_files(tmp_path / "checkpoints" / "4")
    params, step = checkpoints.restore_params(str(tmp_path), _abstract(), "checkpoints")
    assert step == 2 and float(params["w"][0, 0]) == 2.0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2 and "checkpoint step 4 in" in warnings[0] and "does not restore" in warnings[0]
    assert "restored step 2" in warnings[1]
    assert (tmp_path / "checkpoints" / "4" / "state").is_dir()  # the bad step is kept
    _truncate_data_files(tmp_path / "checkpoints" / "2")
    with pytest.raises(checkpoints.CheckpointCorruptError) as e:
        checkpoints.restore_params(str(tmp_path), _abstract(), "checkpoints")
    assert "\n" not in str(e.value) and "restores: step(s) 4, 2 fail" in str(e.value)


def test_unretrieved_read_errors_of_a_step_being_restored_stay_off_stderr(tmp_path):
    """asyncio reports the reads of a failed step that nobody awaited ("Task exception was never retrieved", at
    a time the garbage collector picks): those naming a step that restore_newest tried are dropped, others not."""
    import logging

    _save_steps(tmp_path / "checkpoints", {2: 2.0, 4: 4.0})
    _truncate_data_files(tmp_path / "checkpoints" / "4")
    checkpoints.restore_params(str(tmp_path), _abstract(), "checkpoints")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    log = logging.getLogger("asyncio")
    handler = Keep()
    log.addHandler(handler)
    try:
        def report(path: str) -> None:
            e = ValueError(f'OUT_OF_RANGE: Error reading "params.w/.zarray" in OCDBT database at local file "{path}"')
            log.error("Task exception was never retrieved\nfuture: <Task finished>", exc_info=(ValueError, e, None))

        report(f"{tmp_path}/checkpoints/4/state/")
        report(f"{tmp_path}/other_run/checkpoints/4/state/")  # not a step this process tried
        log.error("Task exception was never retrieved\nfuture: <Task finished>")  # no exception: kept
    finally:
        log.removeHandler(handler)
    assert len(seen) == 2 and all(m.startswith("Task exception was never retrieved") for m in seen), seen


def test_best_falls_back_to_checkpoints(tmp_path, capsys):
    """best/ holds one step; when it does not restore, the newest step of checkpoints/ is used."""
    _save_steps(tmp_path / "checkpoints", {3: 3.0, 6: 6.0})
    _save_steps(tmp_path / "best", {5: 5.0})
    _truncate_data_files(tmp_path / "best" / "5")
    params, step = checkpoints.restore_params(str(tmp_path), _abstract(), "best")
    assert step == 6 and float(params["w"][0, 0]) == 6.0
    assert "checkpoint step 5 in" in capsys.readouterr().err


PY = sys.executable


def _run(*args, timeout=600):
    return subprocess.run([PY, *map(str, args)], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                          timeout=timeout)


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(("warning:", "error:"))]


@pytest.mark.slow
def test_tiny_run_with_a_truncated_latest_step(tmp_path):
    """Tiny run, checkpoints at steps 2 and 4 (best at 4); step 4's data files truncated in checkpoints/ and
    best/: --mode evaluate and predict use step 2 with one warning naming step 4; the resume sets step 4 aside
    as 4.corrupt and trains on from step 2 (2-4 min: four start-ups of JAX)."""
    from tfds_builders.synthetic_openvivqa import Builder

    data = tmp_path / "tfds"
    Builder(config="tiny", data_dir=str(data), file_format="array_record").download_and_prepare()
    wd = tmp_path / "run"
    base = ["-m", "openvivqa_jax.main", "--config=configs/tiny.py", f"--workdir={wd}",
            f"--config.data.data_dir={data}", "--config.train.checkpoint_every_steps=2",
            "--config.train.eval_every_steps=4"]
    res = _run(*base, "--config.train.num_train_steps=4")
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(os.listdir(wd / "checkpoints")) == ["2", "4"] and os.listdir(wd / "best") == ["4"]
    _truncate_data_files(wd / "checkpoints" / "4")
    _truncate_data_files(wd / "best" / "4")

    res = _run(*base, "--mode=evaluate")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "OUT_OF_RANGE" not in "".join(
        line for line in res.stderr.splitlines() if not line.startswith("warning:"))
    w = _warnings(res.stderr)
    assert any(re.match(r"warning: checkpoint step 4 in .*best does not restore", x) for x in w), w
    assert any(re.match(r"warning: checkpoint step 4 in .*checkpoints does not restore", x) for x in w), w

    from PIL import Image

    Image.new("RGB", (64, 48), (200, 30, 30)).save(tmp_path / "a.png")
    res = _run("-m", "openvivqa_jax.predict", "--workdir", wd, "--image", tmp_path / "a.png", "--question",
               "biển hiệu ghi gì?", "--ocr", "none")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and any("checkpoint step 4 in" in x for x in _warnings(res.stderr))

    res = _run(*base, "--config.train.num_train_steps=6")
    assert res.returncode == 0, res.stderr[-3000:]
    w = _warnings(res.stderr)
    assert any(x.startswith("warning: checkpoint step 4 in") and "4.corrupt" in x for x in w), w
    assert (wd / "checkpoints" / "4.corrupt").is_dir()
    assert "6" in os.listdir(wd / "checkpoints") and "4" in os.listdir(wd / "checkpoints")  # saved again

    for step in os.listdir(wd / "checkpoints"):
        if step.isdigit():  # the steps the manager keeps (keep_checkpoints may have removed step 2)
            _truncate_data_files(wd / "checkpoints" / step)
    for step in os.listdir(wd / "best"):
        _truncate_data_files(wd / "best" / step)
    res = _run(*base, "--mode=evaluate")
    errors = [x for x in _warnings(res.stderr) if x.startswith("error:")]
    assert res.returncode == 1 and len(errors) == 1 and "CheckpointCorruptError" in errors[0], res.stderr[-3000:]
