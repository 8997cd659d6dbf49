"""The moment between a holder taking a lock and writing who it is (openvivqa_jax.locks): a process arriving
then waits for the side file instead of naming nobody, and takes the lock if the holder ends meanwhile."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time

import pytest
from openvivqa_jax import locks


class _Holder:
    """Another holder of the lock file, as a second process would be: its own open file and ``flock`` (the
    call the lock library makes on POSIX), with no side file written."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _later(seconds: float, fn) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(seconds), fn()))
    t.start()
    return t


def test_a_refusal_in_the_window_names_the_holder_once_it_has_said(tmp_path):
    path = locks.workdir_lock_path(str(tmp_path))
    holder = _Holder(path)
    rec = {"pid": 4242, "host": "vm", "mode": "main --mode train", "started": "2026-12-05 08:00:00 UTC",
           "command": "python -m openvivqa_jax.main"}
    t = _later(0.4, lambda: (tmp_path / (locks.RUN_LOCK + ".json")).write_text(json.dumps(rec)))
    try:
        with pytest.raises(locks.WorkdirInUseError) as err:
            with locks.hold_workdir(str(tmp_path), "main --mode evaluate"):
                pass
    finally:
        t.join()
        holder.release()
    assert "pid 4242 on host vm (main --mode train, started 2026-12-05 08:00:00 UTC)" in str(err.value)
    assert "not said" not in str(err.value)


def test_a_build_whose_holder_ends_in_the_window_is_taken_without_a_note(tmp_path, capsys):
    dataset_dir = str(tmp_path / "ds" / "cfg" / "1.0.0")
    path = locks.build_lock_path(dataset_dir)
    (tmp_path / "ds" / "cfg").mkdir(parents=True)
    holder = _Holder(path)
    t = _later(0.3, holder.release)  # ends before it ever wrote its side file
    start = time.monotonic()
    with locks.hold_build(dataset_dir, "ds"):
        took = time.monotonic() - start
        assert json.loads(open(path + ".json").read())["mode"] == "building ds"
    t.join()
    assert 0.25 < took < locks.HOLDER_SAY_S
    assert "note:" not in capsys.readouterr().err


def test_a_holder_that_never_says_is_named_plainly_after_the_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "HOLDER_SAY_S", 0.3)
    path = locks.workdir_lock_path(str(tmp_path))
    holder = _Holder(path)
    try:
        with pytest.raises(locks.WorkdirInUseError, match=r"in use by another run: another process \(it has not "
                                                            r"said which yet\)"):
            with locks.hold_workdir(str(tmp_path), "main --mode evaluate"):
                pass
    finally:
        holder.release()
