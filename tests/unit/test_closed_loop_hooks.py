"""After a failed checkpoint write or read, the "Event loop is closed" errors that orbax's and TensorStore's
callbacks raise as the process goes on are dropped from both hooks Python reports them through; any other error
still reaches the hook that was there before."""

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
