"""The run's ``metrics.jsonl`` and the means of the train-step metrics between two log lines, shared by every
trainer (answer generation, the relevance encoder, the ViQuAD reader).

Each line of ``metrics.jsonl`` is one JSON object ``{"step", "kind", "time", <name>: value, ...}`` with ``kind``
``train``, ``eval`` or ``final``; :mod:`openvivqa_jax.plot` reads it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from absl import logging

from openvivqa_jax import outputs

__all__ = ["IntervalTimer", "JsonlWriter", "MeanAccumulator", "format_duration", "peak_device_memory_mib",
           "process_cpu_minutes", "write_jsonl"]


class JsonlWriter:
    """Appends records to a run's ``metrics.jsonl``; only JAX process 0 writes (the others' ``write`` does
    nothing), so several processes of one run leave one file."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)

    def write(self, step: int, kind: str, values: Mapping[str, Any]) -> None:
        """Appends ``{"step": step, "kind": kind, "time": <unix seconds>, **values}``; scalar values as floats,
        arrays as lists.

        Raises:
          openvivqa_jax.outputs.OutputWriteError: the file cannot be written (names it and the reason).
        """
        if jax.process_index() != 0:
            return
        rec = {"step": int(step), "kind": kind, "time": time.time()}
        rec.update({k: (float(v) if np.ndim(v) == 0 else np.asarray(v).tolist()) for k, v in values.items()})
        try:  # appended (a log cannot be replaced whole); its readers skip a line cut short
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        except OSError as e:
            raise outputs.write_error(self.path, e) from e


class MeanAccumulator:
    """Collects a train step's metrics (device scalars, not fetched) until the next log line, then gives their
    means: one device-to-host transfer per log line instead of one per step."""

    def __init__(self) -> None:
        self._values: dict[str, list[Any]] = {}

    def add(self, metrics: Mapping[str, Any]) -> None:
        """Adds one step's ``{name: scalar}``."""
        for k, v in metrics.items():
            self._values.setdefault(k, []).append(v)

    def pop_means(self) -> dict[str, float]:
        """The mean of each metric since the last call (``{}`` when nothing was added), and starts again."""
        means = {k: float(np.mean(jax.device_get(v))) for k, v in self._values.items()}
        self._values = {}
        return means


class IntervalTimer:
    """Training speed between two log lines: steps per second and the input wait, the fraction of the interval
    the loop spent blocked on its next batch.

    The loop wraps ``next(iterator)`` in :meth:`waiting` and evaluations and checkpoint saves in
    :meth:`excluded`, whose time counts in neither the interval nor its steps per second. Train steps are
    dispatched asynchronously, so a device that is the bottleneck lets the host run ahead and fill the input
    queue (input wait near 0); an input pipeline that is the bottleneck keeps the loop in ``next`` (input wait
    near 1). Times are wall-clock seconds (``time.perf_counter``).
    """

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._wait = 0.0
        self._excluded = 0.0
        self._steps = 0

    @contextlib.contextmanager
    def _adding_to(self, field: str, steps: int):
        t = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, field, getattr(self, field) + time.perf_counter() - t)
            self._steps += steps

    def waiting(self):
        """Counts the time inside the ``with`` block as input wait, and one step."""
        return self._adding_to("_wait", 1)

    def excluded(self):
        """Leaves the time inside the ``with`` block out of the interval (evaluations, checkpoint saves)."""
        return self._adding_to("_excluded", 0)

    def restart(self) -> float:
        """Starts the interval again from now, with no steps, and returns the seconds since the interval began.

        The training loops call it after a run's first step when that step is not logged: the first step's time
        is the compilation of the train step and the input pipeline's start (tens of seconds on a CPU), and
        counting it as training would make the first log line's rate too low and its time left too long.
        """
        now = time.perf_counter()
        seconds = now - self._start
        self._start, self._wait, self._excluded, self._steps = now, 0.0, 0.0, 0
        return seconds

    def first_step_done(self, step: int) -> None:
        """After a run's first step, when that step is not logged: one line with its time, and :meth:`restart`,
        so the first log line's steps per second and time left are those of the steps after it."""
        logging.info("step %d: compiled and started in %.1f s (left out of the steps/s)", step, self.restart())

    def pop(self) -> dict[str, float]:
        """``{"steps_per_sec", "input_wait"}`` of the interval since the last call (or since construction), and
        starts the next one."""
        now = time.perf_counter()
        elapsed = max(1e-9, now - self._start - self._excluded)
        out = {"steps_per_sec": self._steps / elapsed, "input_wait": min(1.0, self._wait / elapsed)}
        self._start, self._wait, self._excluded, self._steps = now, 0.0, 0.0, 0
        return out


def format_duration(seconds: float) -> str:
    """A duration in seconds as ``1h02m``, ``5m07s`` or ``42s`` (rounded to the second; the progress lines' time
    left)."""
    s = max(int(round(seconds)), 0)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def process_cpu_minutes() -> float:
    """The process's CPU time since it started, all threads, in minutes: a run's cost apart from the machine's
    load, which stretches the wall time of a CPU run by whatever else runs beside it."""
    return time.process_time() / 60


def peak_device_memory_mib() -> float | None:
    """The most memory this process's first local device has held so far (``memory_stats()``'s
    ``peak_bytes_in_use``, MiB), or None where the backend reports none (CPU)."""
    try:
        stats = jax.local_devices()[0].memory_stats()
    except Exception:  # backends without memory statistics raise instead of returning None
        return None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return stats["peak_bytes_in_use"] / 2**20


def write_jsonl(workdir: str, step: int, kind: str, values: Mapping[str, Any]) -> None:
    """Appends one record to ``<workdir>/metrics.jsonl`` (:meth:`JsonlWriter.write`)."""
    JsonlWriter(os.path.join(workdir, "metrics.jsonl")).write(step, kind, values)
