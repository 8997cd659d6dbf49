"""The region counter's training input: a stream of counting questions beside the main batches.

The region counter (:mod:`openvivqa_jax.models.counting`) learns which regions to count from the counts alone,
which takes many more counting questions than the mixed training batches carry (a few per batch). So when
``model.counter.weight`` > 0 each training batch also carries ``model.counter.batch_size`` counting questions of
the training split (those whose first answer gives a count, :func:`openvivqa_jax.text.counts.answer_count`),
drawn by an iterator of their own (shuffled with ``seed + 1``, epoch after epoch), as the ``counting_`` fields
of :data:`~openvivqa_jax.models.counting.COUNTING_FIELDS`. Only the counter reads them. The two iterators'
states are checkpointed together, so a resumed run draws what the uninterrupted run would have.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from openvivqa_jax.data.pipeline import DatasetError
from openvivqa_jax.models.counting import COUNTING_FIELDS
from openvivqa_jax.text.counts import answer_count

__all__ = ["WithCountingStream", "counting_indices", "read_features", "input_statistics", "first_use_draw"]


class WithCountingStream:
    """Iterator of the main training batches, each with the counting stream's next batch added as its
    ``counting_*`` fields; ``get_state``/``set_state`` cover both iterators (``{"main": ..., "counting": ...}``)."""

    def __init__(self, main, counting):
        self.main, self.counting = main, counting

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        batch = dict(next(self.main))
        c = next(self.counting)
        batch.update({f"counting_{k}": c[k] for k in COUNTING_FIELDS})
        return batch

    def get_state(self) -> dict:
        """Both iterators' states, JSON-serializable."""
        return {"main": self.main.get_state(), "counting": self.counting.get_state()}

    def set_state(self, state: dict) -> None:
        """Restores :meth:`get_state`'s states.

        Raises:
          ValueError: ``state`` is not one of this class's (a checkpoint made without the counter).
        """
        if not isinstance(state, dict) or set(state) != {"main", "counting"}:
            raise ValueError("the checkpoint's input state has no counting stream: it was saved by a run without "
                             "model.counter; resume it with --config.model.counter.weight=0, or start a new workdir")
        self.main.set_state(state["main"])
        self.counting.set_state(state["counting"])


def counting_indices(records: Sequence, source_name: str) -> list[int]:
    """The split positions of the counting questions among ``records``: those whose first reference answer gives
    a count (:func:`~openvivqa_jax.text.counts.answer_count`). Logs how many; when there is none (a set without
    Vietnamese counting questions), a WARNING line says that the counter stays untrained, and the list is empty.
    """
    idx = [r.index for r in records if r.answers and answer_count(r.question, r.answers[0])]
    if not idx:
        logging.warning("%s: no counting question (a 'bao nhiêu' / 'mấy' / 'how many' question whose answer gives "
                        "one count) among its %d questions, so the region counter is not trained and its count token "
                        "says nothing; set --config.model.counter.weight=0 to leave it out", source_name, len(records))
        return []
    logging.info("Region counter: a stream of the %d counting questions of %s (of %d)", len(idx), source_name,
                 len(records))
    return idx


def read_features(module_params) -> int:
    """``F``, how many stored region features a module with input statistics reads (the region counter's, the
    region verifier's parameters): its ``input_mean``'s width less the box's 4."""
    return int(module_params["input_mean"][...].shape[0]) - 4


def input_statistics(batches: Callable[[], dict], num_batches: int,
                     owner: str = "model.counter: the counting questions'",
                     read_features: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-feature mean and standard deviation of the region counter's inputs (each valid region's features and
    box, :meth:`~openvivqa_jax.models.counting.RegionCounter.inputs`) over ``num_batches`` batches drawn by
    ``batches()`` in every process (each draws its own rows of the global batches; the sums are gathered, so
    every process sets the same values): ``(mean (F + 4,), std (F + 4,), number of regions)`` float32; the std
    is at least 1e-3, so a feature constant in the sample does not divide by zero. ``read_features``: ``F``, the
    first stored features the module reads (None: all of them).

    Raises:
      DatasetError: the batches hold no valid region (the message starts with ``owner``, whose pictures they
        are). ValueError: ``num_batches`` < 1.
    """
    n, total, squares = 0, 0.0, 0.0
    if num_batches < 1:
        raise ValueError(f"input_statistics needs at least one batch, got num_batches={num_batches}")
    for _ in range(num_batches):
        b = batches()
        feats = np.asarray(b["region_features"], np.float64)[..., :read_features]
        x = np.concatenate([feats, np.asarray(b["region_boxes"], np.float64)], -1)[np.asarray(b["region_mask"], bool)]
        n, total, squares = n + len(x), total + x.sum(0), squares + (x ** 2).sum(0)
    f = np.size(squares)
    local = np.concatenate([[float(n)], total, squares])
    sums = np.asarray(multihost_utils.process_allgather(local), np.float64).reshape(-1, 1 + 2 * f).sum(0)
    n = int(sums[0])
    if not n:
        raise DatasetError(f"{owner} pictures have no valid region")
    mean = sums[1:1 + f] / n
    var = np.maximum(sums[1 + f:] / n - mean ** 2, 0.0)
    return mean.astype(np.float32), np.maximum(np.sqrt(var), 1e-3).astype(np.float32), n


def first_use_draw(make: Callable[[], Iterator[dict]]) -> Callable[[], dict]:
    """A function returning the next batch of the iterator ``make()`` builds on its first call: a statistics
    sample drawn from an iterator of its own, made only if it is used, leaves the training stream as it is."""
    made: list[Iterator[dict]] = []

    def draw() -> dict:
        if not made:
            made.append(make())
        return next(made[0])

    return draw
