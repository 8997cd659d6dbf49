"""Batches of the span reader's windows (:class:`.features.Windows`): the training stream and the evaluation order,
each padded either to ``model.max_seq_len`` or, with ``train.bucket_width`` > 0, only to its longest window
rounded up to a multiple of the width (length bucketing).

**Why buckets.** Every window is padded to ``model.max_seq_len`` (320 syllables for the real-data readers) while
the real ones hold 150-320 tokens (median about 200 on the ViQuAD train split). DrQA's BiLSTMs and QANet's
convolutions and self-attention cost in proportion to the padded length (self-attention in its square), so a
batch of short windows padded to 320 spends about a third of its time on padding. Each bucket length is one more
compiled shape (at most ``max_seq_len / bucket_width`` of them).

**The training stream.** Windows come in a fresh random order every epoch (permutation ``seed + epoch``), the
epochs joined end to end; batch ``k`` reads stream positions ``[k B, (k + 1) B)`` (``B`` the batch size), so every
window is read once per epoch. With buckets, the stream is cut into pools of ``pool_batches`` batches; a pool's
windows are sorted by length and cut into batches of neighbours, and the pool's batches are read in a random
order (``seed``, pool index): each batch holds windows of similar length, each window is still read once per
epoch (a pool may straddle two epochs), and batch ``k`` depends on ``k`` and the seed only, so a resumed run reads
what the uninterrupted one would have (the state is the number of batches read).
"""

from __future__ import annotations

import numpy as np

__all__ = ["WindowStream", "bucket_length", "eval_batches", "POOL_BATCHES"]

#: Batches per pool of the bucketed stream (module doc): enough neighbours that a batch's windows differ by a few
#: tokens, few enough that the batch order is still shuffled within a fraction of an epoch.
POOL_BATCHES = 50


def bucket_length(lengths: np.ndarray, width: int, max_len: int) -> int:
    """The padded length of a batch of windows of ``lengths`` ``(batch,)`` (real tokens): ``max_len`` when
    ``width`` is 0, else the longest rounded up to a multiple of ``width``, at most ``max_len``."""
    if width <= 0:
        return int(max_len)
    longest = int(np.max(lengths)) if len(lengths) else 1
    return int(min(max_len, -(-max(longest, 1) // width) * width))


class WindowStream:
    """The training batches of ``len(lengths)`` windows (module doc).

    Args:
      lengths: ``(windows,)`` int, each window's real tokens (specials included).
      batch_size: ``B``; seed: the shuffles' seed; bucket_width: 0 (every batch padded to ``max_len``) or the
      bucket width in tokens; max_len: ``model.max_seq_len``; pool_batches: batches per pool.
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, *, bucket_width: int = 0,
                 max_len: int | None = None, pool_batches: int = POOL_BATCHES):
        self.lengths = np.asarray(lengths, np.int64)
        self.n, self.bs, self.seed = len(self.lengths), int(batch_size), int(seed)
        self.width = int(bucket_width)
        self.max_len = int(max_len if max_len is not None else (self.lengths.max() if self.n else 1))
        self.pool_batches = int(pool_batches)
        self.batches = 0
        self._perm_cache: dict[int, np.ndarray] = {}
        self._pool: tuple[int, np.ndarray] | None = None

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perm_cache:
            if len(self._perm_cache) > 2:
                self._perm_cache.clear()
            self._perm_cache[epoch] = np.random.default_rng(self.seed + epoch).permutation(self.n)
        return self._perm_cache[epoch]

    def _positions(self, start: int, count: int) -> np.ndarray:
        """Window ids at stream positions ``[start, start + count)``."""
        out = np.empty(count, np.int64)
        k = 0
        while k < count:
            epoch, pos = divmod(start + k, self.n)
            take = self._perm(epoch)[pos:pos + count - k]
            out[k:k + len(take)] = take
            k += len(take)
        return out

    def _pool_batches(self, pool: int) -> np.ndarray:
        """``(pool_batches, B)`` window ids of pool ``pool``, sorted by length into batches, batches shuffled."""
        if self._pool is None or self._pool[0] != pool:
            size = self.pool_batches * self.bs
            ids = self._positions(pool * size, size)
            ids = ids[np.argsort(self.lengths[ids], kind="stable")].reshape(self.pool_batches, self.bs)
            order = np.random.default_rng([self.seed, pool]).permutation(self.pool_batches)
            self._pool = (pool, ids[order])
        return self._pool[1]

    def next(self) -> tuple[np.ndarray, int]:
        """The next batch: ``(window ids (B,), padded length)``."""
        k = self.batches
        if self.width > 0:
            idx = self._pool_batches(k // self.pool_batches)[k % self.pool_batches]
        else:
            idx = self._positions(k * self.bs, self.bs)
        self.batches += 1
        return idx, bucket_length(self.lengths[idx], self.width, self.max_len)

    def get_state(self) -> dict:
        """``{"batches", "epoch", "position"}``: batches read, and the stream position they reached."""
        epoch, position = divmod(self.batches * self.bs, max(self.n, 1))
        return {"batches": int(self.batches), "epoch": int(epoch), "position": int(position)}

    def set_state(self, state: dict) -> None:
        """Moves to ``state`` (:meth:`get_state`'s, or ``{"epoch", "position"}`` of a checkpoint written before
        the batch count was kept, whose stream read ``B`` consecutive positions per batch)."""
        if "batches" in state:
            self.batches = int(state["batches"])
        else:
            self.batches = (int(state["epoch"]) * self.n + int(state["position"])) // self.bs
        self._pool = None


def eval_batches(lengths: np.ndarray, batch_size: int, bucket_width: int, max_len: int
                 ) -> list[tuple[np.ndarray, int, int]]:
    """The evaluation batches of windows of ``lengths`` ``(windows,)``: ``[(ids (batch_size,), padded length,
    real count)]`` covering every window once. With ``bucket_width`` the windows are taken shortest first (module
    doc); every batch is full, the last one topped up with repeats of its first window so that each length
    compiles one shape; only its first ``real count`` rows are predictions."""
    lengths = np.asarray(lengths, np.int64)
    n = len(lengths)
    order = np.argsort(lengths, kind="stable") if bucket_width > 0 else np.arange(n)
    out = []
    for b0 in range(0, n, batch_size):
        ids = order[b0:b0 + batch_size]
        real = len(ids)
        if real < batch_size:
            ids = np.concatenate([ids, np.full(batch_size - real, ids[0])])
        out.append((ids, bucket_length(lengths[ids[:real]], bucket_width, max_len), real))
    return out
