"""After a failed checkpoint write or read, the "Event loop is closed" errors that orbax's and TensorStore's
callbacks raise, while the failed step unwinds and as the process goes on, are dropped from both hooks Python
reports them through; any other error still reaches the hook that was there before."""

import sys
import types

from openvivqa_jax.training import checkpoints


def test_closed_loop_errors_are_dropped_and_others_passed_on(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(("unraisable", str(u.exc_value))))
    monkeypatch.setattr(sys, "excepthook", lambda k, v, tb: seen.append(("except", str(v))))
    checkpoints._quiet_closed_loop_callbacks()
    checkpoints._quiet_closed_loop_callbacks()  # once per process: a second call wraps nothing more
    closed, other = RuntimeError("Event loop is closed"), RuntimeError("something else")
    sys.unraisablehook(types.SimpleNamespace(exc_value=closed))
    sys.excepthook(RuntimeError, closed, None)
    assert seen == []
    sys.unraisablehook(types.SimpleNamespace(exc_value=other))
    sys.excepthook(RuntimeError, other, None)
    sys.excepthook(ValueError, ValueError("Event loop is closed"), None)  # only the RuntimeError is dropped
    assert seen == [("unraisable", "something else"), ("except", "something else"),
                    ("except", "Event loop is closed")]


class _ClosedLoopDuringSave:
    """A checkpoint manager whose save reports the closed loop from "another thread" (through ``sys.excepthook``,
    as TensorStore's threads do) before its failure reaches :func:`checkpoints.save_step`."""

    directory = "/nonexistent/run/checkpoints"

    def __init__(self, reported):
        self.reported = reported

    def save(self, step, args=None, metrics=None):
        sys.excepthook(RuntimeError, RuntimeError("Event loop is closed"), None)
        self.reported.append("during save")

    def wait_until_finished(self):
        raise OSError(28, "No space left on device")


def test_a_failed_save_drops_the_closed_loop_reports_that_come_before_its_error(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(("unraisable", str(u.exc_value))))
    monkeypatch.setattr(sys, "excepthook", lambda k, v, tb: seen.append(("except", str(v))))
    manager = _ClosedLoopDuringSave(seen)
    try:
        checkpoints.save_step(manager, 10, args=None)
    except checkpoints.CheckpointWriteError as e:
        assert ("could not write checkpoint step 10 to /nonexistent/run/checkpoints/10: No space left on device"
                in str(e))
    else:
        raise AssertionError("the failed save raised nothing")
    assert seen == ["during save"]  # the report made while saving reached no hook
