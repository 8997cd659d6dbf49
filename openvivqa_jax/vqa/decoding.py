"""Jitted greedy and beam search over the extended output space (vocabulary + OCR slots), docs/design.md §7.

Both are one ``lax.while_loop`` with fixed shapes over a model implementing the generator interface
of :mod:`openvivqa_jax.models.base`:

* the decoder self-attention KV cache is updated in place each step; cross-attention keys/values
  (and M4C's prefix) are computed once by ``prepare_decode``;
* a copied OCR token feeds back through that token's features (the model's ``decode_step``);
* beam search scores finished hypotheses with the length penalty ``((5 + len) / 6) ** alpha``
  (Wu et al. 2016; ``len`` counts generated steps including EOS), handles EOS per beam, and stops
  early when no live beam can beat the worst kept finished one.

PAD, BOS and UNK are never generated.

Constrained decoding (ST-VQA tasks 1 and 2, Biten et al. 2019 §3): when the batch holds
``allowed_vocab`` ``(batch, V + N)`` bool (built by :class:`openvivqa_jax.data.pipeline.Preprocessor`
from the example's dictionary), every disallowed extended id gets ``NEG_INF`` before the
log-softmax at every step, so the decoded ids all lie in the allowed set (EOS must be allowed; the
pipeline always allows it). The constraint is on *pieces and OCR slots*, not on whole words: any
sequence of allowed pieces may be produced, including piece combinations that spell no dictionary
word. The key's presence is part of the batch structure, so a decode function compiled with it is
reused for every later batch with it (no recompilation).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from openvivqa_jax.models.base import AnswerGenerator
from openvivqa_jax.models.layers import NEG_INF

__all__ = ["length_penalty", "greedy_search", "beam_search", "make_decode_fn", "DecodeSettings", "METHODS",
           "BANNED_IDS", "BeamState",
           "flatten_beam_dim", "unflatten_beam_dim", "gather_beams"]

#: Piece ids never generated: pad 0, unk 1, bos 2.
BANNED_IDS = (0, 1, 2)


def length_penalty(length: jax.Array, alpha: float) -> jax.Array:
    """GNMT length penalty ``((5 + length) / 6) ** alpha`` (float32)."""
    return ((5.0 + length.astype(jnp.float32)) / 6.0) ** alpha


def _ban(logits: jax.Array, banned) -> jax.Array:
    if not banned:
        return logits
    return logits.at[..., jnp.asarray(banned)].set(NEG_INF)


def _constrain(logits: jax.Array, allowed: jax.Array | None) -> jax.Array:
    """``logits`` ``(rows, E)`` with ids where ``allowed`` ``(rows, >= E)`` bool is False set to ``NEG_INF``."""
    if allowed is None:
        return logits
    return jnp.where(allowed[..., : logits.shape[-1]], logits, NEG_INF)


def greedy_search(model: AnswerGenerator, batch: dict, *, max_len: int, bos_id: int = 2, eos_id: int = 3,
                  pad_id: int = 0, banned=BANNED_IDS):
    """Greedy decoding with a KV cache, stopped per example at EOS and for the batch when all are done.

    Args:
      model: a generator model (:class:`~openvivqa_jax.models.base.AnswerGenerator`).
      batch: model inputs with leading axis ``batch``; an optional ``allowed_vocab`` ``(batch, V + N)``
        bool restricts every step to the allowed extended ids (module doc).
      max_len: maximum number of steps ``T``.

    Returns:
      ``(ids (batch, T) int32, logprob (batch,) float32)``; positions after EOS hold ``pad_id``.
    """
    enc = model.encode(batch)
    dec = model.prepare_decode(enc)
    b = enc["ocr_mask"].shape[0]
    cache = model.init_cache(b, max_len)
    allowed = batch.get("allowed_vocab")

    def cond(state):
        t, _, _, done, _, _ = state
        return (t < max_len) & ~jnp.all(done)

    def body(state):
        t, ids, tok, done, cache, score = state
        logits, cache = model.decode_step(dec, tok, t, cache)
        logp = jax.nn.log_softmax(_constrain(_ban(logits, banned), allowed), axis=-1)
        nxt = jnp.argmax(logp, -1).astype(jnp.int32)
        score = score + jnp.where(done, 0.0, jnp.take_along_axis(logp, nxt[:, None], -1)[:, 0])
        nxt = jnp.where(done, pad_id, nxt)
        ids = ids.at[:, t].set(nxt)
        done = done | (nxt == eos_id)
        return t + 1, ids, nxt, done, cache, score

    init = (jnp.int32(0), jnp.full((b, max_len), pad_id, jnp.int32), jnp.full((b,), bos_id, jnp.int32),
            jnp.zeros((b,), bool), cache, jnp.zeros((b,), jnp.float32))
    _, ids, _, _, _, score = jax.lax.while_loop(cond, body, init)
    return ids, score


def _tile(tree, k: int):
    return jax.tree.map(lambda x: jnp.repeat(x, k, axis=0), tree)


def flatten_beam_dim(x: jax.Array) -> jax.Array:
    """``(batch, K, ...)`` -> ``(batch * K, ...)``, the rows of one example adjacent (the layout in which
    beam search runs the model: example ``i``'s beam ``k`` is row ``i * K + k``)."""
    return x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])


def unflatten_beam_dim(x: jax.Array, beam_size: int) -> jax.Array:
    """``(batch * K, ...)`` -> ``(batch, K, ...)`` with ``K = beam_size``, the inverse of
    :func:`flatten_beam_dim`."""
    return x.reshape((x.shape[0] // beam_size, beam_size) + x.shape[1:])


def gather_beams(tree, beam_idx: jax.Array):
    """Selects beams per example: ``out[i, j] = x[i, beam_idx[i, j]]`` for every leaf ``x`` of ``tree``.

    Args:
      tree: a pytree of arrays ``(batch, K_old, ...)`` (``K_old`` may differ between leaves).
      beam_idx: ``(batch, K_new)`` int, each in ``[0, K_old)``.

    Returns:
      The same pytree with leaves ``(batch, K_new, ...)``. A pure gather, so values are copied exactly.
    """
    batch, k_new = beam_idx.shape

    def one(x):
        rows = (jnp.arange(batch)[:, None] * x.shape[1] + beam_idx).reshape(batch * k_new)
        return unflatten_beam_dim(flatten_beam_dim(x)[rows], k_new)

    return jax.tree.map(one, tree)


@struct.dataclass
class BeamState:
    """The ``lax.while_loop`` state of :func:`beam_search` (``batch`` examples, ``K`` beams, ``T`` steps).

    Attributes:
      step: ``()`` int32, the number of steps taken (the next position written).
      live_logp: ``(batch, K)`` float32, total log-probability of each live (unfinished) beam;
        ``NEG_INF`` for empty slots.
      live_seq: ``(batch, K, T)`` int32, the live beams' ids (``pad_id`` after ``step``).
      fin_seq: ``(batch, K, T)`` int32, the best finished hypotheses (ending in EOS).
      fin_score: ``(batch, K)`` float32, their length-penalized scores, ``NEG_INF`` for empty slots.
      tokens: ``(batch * K,)`` int32, each live beam's last id, the next decoder input.
      cache: the model's decoder cache, every leaf ``(batch * K, ...)`` (rows as :func:`flatten_beam_dim`).
    """

    step: jax.Array
    live_logp: jax.Array
    live_seq: jax.Array
    fin_seq: jax.Array
    fin_score: jax.Array
    tokens: jax.Array
    cache: Any


def beam_search(model: AnswerGenerator, batch: dict, *, max_len: int, beam_size: int, alpha: float = 0.0,
                bos_id: int = 2, eos_id: int = 3, pad_id: int = 0, banned=BANNED_IDS, share_memory: bool = False):
    """Beam search with a KV cache, per-beam EOS, length penalty and early stopping.

    Each step expands every live beam over the extended ids, keeps the ``2 K`` best candidates (so at
    least ``K`` of them do not end in EOS), merges those ending in EOS into the finished set (scored with
    :func:`length_penalty`) and keeps the ``K`` best others as the live beams. The loop state is a
    :class:`BeamState`.

    Args:
      model: a generator model (:class:`~openvivqa_jax.models.base.AnswerGenerator`).
      batch: inputs with leading axis ``batch``; an optional ``allowed_vocab`` ``(batch, V + N)`` bool
        restricts every step to the allowed extended ids (module doc).
      max_len: maximum steps ``T``.
      beam_size: ``K``.
      alpha: length-penalty exponent >= 0 (0 disables it; the paper's setting).
      share_memory: keep the per-example decoding constants named by the model's ``beam_shared_keys``
        (the memory's cross-attention keys/values and mask of MLPAG, QuMLAG, FST) once per example
        instead of repeating them ``K`` times; the ``K`` beams then attend as ``K`` query rows over one
        copy. The same math; float results may differ in the last bits (order 1e-7), hence off by
        default. No effect on M4C.

    Raises:
      ValueError: if ``alpha < 0`` (the early-stop bound assumes a non-decreasing penalty).

    Returns:
      ``(ids (batch, T) int32, score (batch,) float32, all_ids (batch, K, T), all_scores (batch, K))``:
      the best hypothesis, its length-penalized log-probability, and all kept hypotheses sorted by
      score. Positions after EOS hold ``pad_id``.
    """
    if alpha < 0:
        raise ValueError(f"length-penalty alpha must be >= 0, got {alpha}")
    K, T = beam_size, max_len
    enc = model.encode(batch)
    dec = model.prepare_decode(enc)
    b = enc["ocr_mask"].shape[0]
    shared = set(getattr(model, "beam_shared_keys", ())) if share_memory else set()
    dec = {key: (v if key in shared else _tile(v, K)) for key, v in dec.items()}
    allowed = batch.get("allowed_vocab")
    allowed = None if allowed is None else jnp.repeat(allowed, K, axis=0)  # (b * K, V + N), as _tile
    max_lp = length_penalty(jnp.int32(T), alpha)

    def cond(s: BeamState):
        # Best score any live beam could still reach vs. the worst finished score kept.
        best_live = jnp.max(s.live_logp, -1) / max_lp
        worst_fin = jnp.min(s.fin_score, -1)
        return (s.step < T) & jnp.any(best_live > worst_fin)

    def body(s: BeamState) -> BeamState:
        t = s.step
        logits, cache = model.decode_step(dec, s.tokens, t, s.cache)
        E = logits.shape[-1]
        logp = unflatten_beam_dim(jax.nn.log_softmax(_constrain(_ban(logits, banned), allowed), axis=-1), K)
        cand = (s.live_logp[..., None] + logp).reshape(b, K * E)
        top_logp, top_idx = jax.lax.top_k(cand, 2 * K)
        parent = top_idx // E
        token = (top_idx % E).astype(jnp.int32)
        seqs = gather_beams(s.live_seq, parent)
        seqs = jax.lax.dynamic_update_slice_in_dim(seqs, token[..., None], t, axis=2)
        is_eos = token == eos_id
        # Finished candidates, merged with the finished set.
        new_fin = jnp.where(is_eos, top_logp / length_penalty(t + 1, alpha), NEG_INF)
        fin_score, fi = jax.lax.top_k(jnp.concatenate([s.fin_score, new_fin], 1), K)
        fin_seq = gather_beams(jnp.concatenate([s.fin_seq, seqs], 1), fi)
        # Live candidates: the best K non-EOS; the cache rows follow their parents.
        live_logp, li = jax.lax.top_k(jnp.where(is_eos, NEG_INF, top_logp), K)
        live_seq, live_parent, tokens = gather_beams((seqs, parent, token), li)
        cache = jax.tree.map(lambda x: flatten_beam_dim(gather_beams(unflatten_beam_dim(x, K), live_parent)),
                             cache)
        return BeamState(step=t + 1, live_logp=live_logp, live_seq=live_seq, fin_seq=fin_seq,
                         fin_score=fin_score, tokens=flatten_beam_dim(tokens), cache=cache)

    s = jax.lax.while_loop(cond, body, _initial_beams(model, b, K, T, bos_id, pad_id))
    return _best_hypotheses(s, K, alpha)


def _initial_beams(model: AnswerGenerator, b: int, K: int, T: int, bos_id: int, pad_id: int) -> BeamState:
    """The :class:`BeamState` before the first step: one live beam per example (the others empty), BOS inputs,
    the model's empty decoder cache for ``b * K`` rows."""
    return BeamState(
        step=jnp.int32(0),
        live_logp=jnp.tile(jnp.array([0.0] + [NEG_INF] * (K - 1), jnp.float32)[None], (b, 1)),
        live_seq=jnp.full((b, K, T), pad_id, jnp.int32),
        fin_seq=jnp.full((b, K, T), pad_id, jnp.int32),
        fin_score=jnp.full((b, K), NEG_INF, jnp.float32),
        tokens=jnp.full((b * K,), bos_id, jnp.int32),
        cache=model.init_cache(b * K, T),
    )


def _best_hypotheses(s: BeamState, K: int, alpha: float):
    """:func:`beam_search`'s result from its final state: the ``K`` best of the finished and live hypotheses."""
    # Examples without K finished hypotheses fall back on live beams (scored at their length t).
    live_score = s.live_logp / length_penalty(s.step, alpha)
    all_score = jnp.concatenate([s.fin_score, jnp.where(s.live_logp > NEG_INF / 2, live_score, NEG_INF)], 1)
    all_seq = jnp.concatenate([s.fin_seq, s.live_seq], 1)
    top_score, ti = jax.lax.top_k(all_score, K)
    top_seq = gather_beams(all_seq, ti)
    return top_seq[:, 0], top_score[:, 0], top_seq, top_score


#: Decoding methods: beam and greedy search for answer generators, arg-max over the answer list for classifiers.
METHODS = ("beam", "greedy", "argmax")


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """How answers are decoded: the key of :func:`make_decode_fn`'s cache and the ``decoding`` record of
    every metrics file.

    Attributes:
      method: ``"beam"``, ``"greedy"`` (generators) or ``"argmax"`` (classifiers).
      max_len: answer steps ``T`` of a generator.
      beam_size: ``K`` (1 unless ``method == "beam"``).
      alpha: the length-penalty exponent of :func:`length_penalty`.
      share_memory: :func:`beam_search` keeps the cross-attention keys/values once per example.
    """

    method: str = "beam"
    max_len: int = 1
    beam_size: int = 1
    alpha: float = 0.0
    share_memory: bool = False

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"decoding method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")

    @classmethod
    def from_config(cls, cfg, is_generator: bool, *, method: str | None = None, beam_size: int | None = None,
                    alpha: float | None = None) -> DecodeSettings:
        """A run's settings: ``cfg.eval``'s ``decoding``, ``beam_size``, ``alpha`` and ``beam_share_memory``
        (False when a run's saved config predates it) unless given; answers of at most
        ``cfg.model.max_answer_len`` steps; classifiers always ``argmax``.

        Raises:
          ValueError: an unknown method or a beam size below 1.
        """
        if not is_generator:
            return cls(method="argmax")
        e = cfg.eval
        method = method or e.decoding
        return cls(method=method, max_len=int(cfg.model.max_answer_len),
                   beam_size=int(beam_size or e.beam_size) if method == "beam" else 1,
                   alpha=float(e.alpha if alpha is None else alpha),
                   share_memory=bool(e.get("beam_share_memory", False)) and method == "beam")

    def describe(self) -> dict:
        """The ``decoding`` record of a metrics file: ``{"method", "beam_size", "alpha"}`` (``{"method":
        "argmax"}`` for classifiers)."""
        if self.method == "argmax":
            return {"method": "argmax"}
        return {"method": self.method, "beam_size": self.beam_size, "alpha": self.alpha}


def make_decode_fn(graphdef: Any, settings: DecodeSettings | None = None, **fields):
    """The jitted decoder ``fn(params, batch) -> (ids, scores)`` of a model: the one factory of every
    decoder (training's evaluations, ``evaluate``, ``predict``, the benchmarks), cached per
    ``(graphdef, settings)``.

    Generators (``beam`` / ``greedy``): ids ``(batch, max_len)`` over ``V + N``, scores ``(batch,)``
    (:func:`beam_search`'s best hypothesis or :func:`greedy_search`'s). Classifiers (``argmax``): the model's
    ``predict`` of its logits, ids ``(batch,)``, and the top logit ``(batch,)``.

    Args:
      graphdef: ``nnx.split(model, nnx.Param)[0]`` (hashable).
      settings: how to decode; None builds :class:`DecodeSettings` from ``fields`` (``max_len``,
        ``method``, ``beam_size``, ``alpha``, ``share_memory``).

    Raises:
      ValueError: an unknown method or ``beam_size < 1``.
    """
    return _compiled(graphdef, settings if settings is not None else DecodeSettings(**fields))


@functools.lru_cache(maxsize=32)
def _compiled(graphdef: Any, settings: DecodeSettings):
    """The jitted function of :func:`make_decode_fn` (compiled once per input shapes)."""
    s = settings

    @jax.jit
    def fn(params, batch):
        model = nnx.merge(graphdef, params)
        if s.method == "argmax":
            logits = model(batch)
            return model.predict(logits, batch), jnp.max(logits, -1)
        if s.method == "greedy":
            return greedy_search(model, batch, max_len=s.max_len)
        ids, score, _, _ = beam_search(model, batch, max_len=s.max_len, beam_size=s.beam_size, alpha=s.alpha,
                                       share_memory=s.share_memory)
        return ids, score

    return fn
