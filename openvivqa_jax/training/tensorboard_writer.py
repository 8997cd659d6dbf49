"""TensorBoard scalars as scalars: a writer of ``simple_value`` events that needs no TensorFlow.

``clu.metric_writers.create_default_writer`` writes through ``tf.summary``, which (TensorFlow 2) stores every
scalar as a rank-0 *tensor* summary: TensorBoard's UI shows it, but ``EventAccumulator.Scalars`` and other
readers of scalar events find nothing; and importing ``clu.metric_writers`` imports TensorFlow.
:class:`ScalarEventWriter` writes ``Summary.Value(simple_value=...)`` events as TFRecords with TensorBoard's own
record writer (``tensorboard.summary.writer.record_writer``, pure Python) into a plain file, named and started
(``file_version`` event) as TensorBoard's ``EventFileWriter`` does. That writer is not used because it reaches
the file system through ``tensorboard.compat.tf``, which imports TensorFlow whenever it is installed: 5-7 s of
start-up for a command that computes nothing with it. It has the ``write_scalars`` / ``flush`` / ``close``
methods of a ``clu`` ``MetricWriter``, the only ones the train loop calls.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from openvivqa_jax import outputs

__all__ = ["ScalarEventWriter", "NullWriter", "create_writer", "event_files"]

_uids = itertools.count()


class NullWriter:
    """Writes nothing (processes other than 0 of a multi-process run)."""

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        """Ignores the values."""
        del step, scalars

    def flush(self) -> None:
        """Nothing to flush."""

    def close(self) -> None:
        """Nothing to close."""


class ScalarEventWriter(NullWriter):
    """Writes scalars to ``<logdir>/events.out.tfevents.*`` as TensorBoard scalar events.

    The event file is created on the first write, so a writer that is never written to leaves no file. A write
    that fails (a full disk) raises :class:`openvivqa_jax.outputs.OutputWriteError` naming the file; the events
    written before stay readable (TensorBoard stops at a record cut short).
    """

    def __init__(self, logdir: str):
        self.logdir = logdir
        self.path: str | None = None
        self._writer = None

    @contextlib.contextmanager
    def _writing(self):
        try:
            yield
        except OSError as e:
            raise outputs.write_error(self.path or self.logdir, e, "the TensorBoard events file") from e

    def _file(self):
        """The record writer of this writer's event file, created (with its ``file_version`` event) on first use."""
        if self._writer is None:
            from tensorboard.compat.proto import event_pb2  # heavy: only when a run writes events
            from tensorboard.summary.writer.record_writer import RecordWriter

            os.makedirs(self.logdir, exist_ok=True)
            name = "events.out.tfevents.%010d.%s.%s.%s" % (time.time(), socket.gethostname(), os.getpid(),
                                                           next(_uids))
            self.path = os.path.join(self.logdir, name)
            self._writer = RecordWriter(open(self.path, "wb"))
            self._writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        return self._writer

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        """One event at ``step`` with one ``simple_value`` per tag (values cast to float), written and flushed at
        once (a killed run keeps every event it wrote)."""
        from tensorboard.compat.proto import event_pb2, summary_pb2  # heavy, as in _file

        values = [summary_pb2.Summary.Value(tag=k, simple_value=float(v)) for k, v in scalars.items()]
        if values:
            event = event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary_pb2.Summary(value=values))
            with self._writing():
                self._file().write(event.SerializeToString())
                self._writer.flush()

    def flush(self) -> None:
        """Writes pending events to disk."""
        if self._writer is not None:
            with self._writing():
                self._writer.flush()

    def close(self) -> None:
        """Flushes and closes the event file."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def create_writer(logdir: str | None, just_logging: bool = False) -> NullWriter:
    """A :class:`ScalarEventWriter` of ``logdir``; a :class:`NullWriter` when ``just_logging`` (processes other
    than 0: the run's own log lines carry the values) or ``logdir`` is None."""
    if logdir is None or just_logging:
        return NullWriter()
    return ScalarEventWriter(logdir)


def event_files(logdir: str) -> list[str]:
    """The TensorBoard event files directly in ``logdir`` (sorted)."""
    try:
        return sorted(os.path.join(logdir, n) for n in os.listdir(logdir) if n.startswith("events.out.tfevents."))
    except OSError:
        return []
