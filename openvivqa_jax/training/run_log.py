"""The run's ``metrics.jsonl`` and the means of the train-step metrics between two log lines, shared by every
trainer (answer generation, the relevance encoder, the ViQuAD reader).

Each line of ``metrics.jsonl`` is one JSON object ``{"step", "kind", "time", <name>: value, ...}`` with ``kind``
``train``, ``eval`` or ``final``; :mod:`openvivqa_jax.plot` reads it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

__all__ = ["JsonlWriter", "MeanAccumulator", "write_jsonl"]


class JsonlWriter:
    """Appends records to a run's ``metrics.jsonl``; only JAX process 0 writes (the others' ``write`` does
    nothing), so several processes of one run leave one file."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)

    def write(self, step: int, kind: str, values: Mapping[str, Any]) -> None:
        """Appends ``{"step": step, "kind": kind, "time": <unix seconds>, **values}``; scalar values as floats,
        arrays as lists."""
        if jax.process_index() != 0:
            return
        rec = {"step": int(step), "kind": kind, "time": time.time()}
        rec.update({k: (float(v) if np.ndim(v) == 0 else np.asarray(v).tolist()) for k, v in values.items()})
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


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


def write_jsonl(workdir: str, step: int, kind: str, values: Mapping[str, Any]) -> None:
    """Appends one record to ``<workdir>/metrics.jsonl`` (:meth:`JsonlWriter.write`)."""
    JsonlWriter(os.path.join(workdir, "metrics.jsonl")).write(step, kind, values)
