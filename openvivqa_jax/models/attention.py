"""Scaled dot-product multi-head attention with an explicit KV cache (Vaswani et al. 2017), the
``jax.nn.dot_product_attention`` implementation switch (``config.model.attention_impl``) and the dense layer
every projection uses. Masks are boolean with ``True`` = attend; they broadcast to
``(batch, num_heads, q_len, kv_len)``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.dropout import Dropout

__all__ = ["NEG_INF", "ATTENTION_IMPLS", "set_attention_impl", "MultiHeadAttention", "dense",
           "relative_position_bucket", "RelativePositionBias"]

#: Large negative logit used for masked positions (finite so that fully masked rows stay NaN-free).
NEG_INF = -1e9


#: Values of ``model.attention_impl``: ``jax.nn.dot_product_attention``'s ``implementation``.
ATTENTION_IMPLS = ("xla", "cudnn")


def set_attention_impl(model: nnx.Module, impl: str, dtype: Any = jnp.float32) -> nnx.Module:
    """Sets the ``jax.nn.dot_product_attention`` implementation of every :class:`MultiHeadAttention` in
    ``model`` (``config.model.attention_impl``) and returns ``model``.

    Args:
      model: any module of the zoo.
      impl: ``"xla"`` (XLA's own attention, any backend and dtype) or ``"cudnn"`` (cuDNN's fused kernel:
        a CUDA GPU and bfloat16/float16 compute only).
      dtype: the model's compute dtype (checked against ``impl``).

    Raises:
      ValueError: for an unknown ``impl``, or ``"cudnn"`` without a GPU backend or with float32 compute.
    """
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"model.attention_impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
    if impl == "cudnn":
        if jax.default_backend() != "gpu":
            raise ValueError(f"model.attention_impl='cudnn' needs a CUDA GPU; the JAX backend is "
                             f"{jax.default_backend()!r} (use 'xla')")
        if jnp.dtype(dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
            raise ValueError(f"model.attention_impl='cudnn' takes bfloat16/float16 compute; model.dtype is "
                             f"{jnp.dtype(dtype).name} (use 'xla')")
    for _, node in nnx.iter_graph(model):
        if isinstance(node, MultiHeadAttention):
            node.implementation = impl
    return model


def dense(din: int, dout: int, rngs: nnx.Rngs, dtype: Any = jnp.float32, use_bias: bool = True) -> nnx.Linear:
    """A Linear layer with Xavier-uniform kernel and float32 master weights."""
    return nnx.Linear(
        din, dout, use_bias=use_bias, dtype=dtype, param_dtype=jnp.float32,
        kernel_init=nnx.initializers.xavier_uniform(), rngs=rngs,
    )


class MultiHeadAttention(nnx.Module):
    """Scaled dot-product multi-head attention (Vaswani et al. 2017) with an explicit KV cache.

    ``softmax(q k^T / sqrt(head_dim)) v`` runs through :func:`jax.nn.dot_product_attention` with
    ``implementation = self.implementation`` (``config.model.attention_impl``, set by
    :func:`set_attention_impl`; ``"xla"`` by default), masks passed as its boolean ``mask``. Two cases keep
    the explicit einsum-softmax (same math): attention-probability dropout in training (it acts on the
    softmax output, which ``dot_product_attention`` does not expose) and ``return_weights``.

    Args:
      d_model: model width ``d``.
      num_heads: ``H``; ``d`` must be divisible by ``H``.
      dropout: attention-probability dropout rate.
      rngs: parameter RNGs.
      dtype: compute dtype.

    Raises:
      ValueError: if ``d_model % num_heads != 0``.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.query = dense(d_model, d_model, rngs, dtype)
        self.key = dense(d_model, d_model, rngs, dtype)
        self.value = dense(d_model, d_model, rngs, dtype)
        self.out = dense(d_model, d_model, rngs, dtype)
        self.dropout = Dropout(dropout)
        self.implementation = "xla"

    def _split(self, x: jax.Array) -> jax.Array:
        return x.reshape(x.shape[:-1] + (self.num_heads, self.head_dim))

    def project_q(self, x: jax.Array) -> jax.Array:
        """Queries of ``x`` ``(batch, len, d)`` as ``(batch, len, H, head_dim)``."""
        return self._split(self.query(x))

    def project_k(self, x: jax.Array) -> jax.Array:
        """Keys of ``x`` ``(batch, len, d)`` as ``(batch, len, H, head_dim)`` (without the values)."""
        return self._split(self.key(x))

    def project_kv(self, kv: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Keys and values of ``kv`` ``(batch, kv_len, d)`` as ``(batch, kv_len, H, head_dim)`` each."""
        return self._split(self.key(kv)), self._split(self.value(kv))

    def attend(
        self, q_in: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None,
        *, deterministic: bool = True, rngs: nnx.Rngs | None = None, return_weights: bool = False,
        bias: jax.Array | None = None,
    ) -> jax.Array:
        """Attention of ``q_in`` ``(batch, q_len, d)`` over projected ``k``/``v``.

        Args:
          q_in: queries before projection.
          k, v: ``(batch, kv_len, H, head_dim)``.
          mask: bool, broadcastable to ``(batch, H, q_len, kv_len)``; ``None`` attends everywhere.
          bias: float logits added after the scaling, broadcastable to ``(batch, H, q_len, kv_len)`` (a
            relative-position bias, T5's; Raffel et al. 2020, §2.1); ``None``: none.
          return_weights: also return the attention probabilities (before dropout), for inspection
            (predict's heat map); the default path is unchanged.

        Returns:
          ``(batch, q_len, d)``, or ``(out, probs (batch, H, q_len, kv_len) float32)`` with ``return_weights``.
        """
        q = self._split(self.query(q_in))
        if return_weights or not (deterministic or self.dropout.rate == 0.0):
            # The probabilities themselves are needed (returned, or dropped out: attention dropout acts on
            # the softmax output, which dot_product_attention does not expose): the unfused computation.
            logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
            logits = logits * (1.0 / float(self.head_dim) ** 0.5)
            if bias is not None:
                logits = logits + bias.astype(jnp.float32)
            if mask is not None:
                logits = jnp.where(mask, logits, NEG_INF)
            weights = jax.nn.softmax(logits, axis=-1)
            probs = self.dropout(weights.astype(v.dtype), deterministic=deterministic, rngs=rngs)
            ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
        else:
            ctx = self._fused(q, k, v, mask, bias)
        out = self.out(ctx.reshape(ctx.shape[:-2] + (-1,)))
        return (out, weights) if return_weights else out

    def _fused(self, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None,
               bias: jax.Array | None = None) -> jax.Array:
        """``softmax(q k^T / sqrt(head_dim) + bias, masked) v`` through :func:`jax.nn.dot_product_attention`
        with :attr:`implementation`. ``q`` ``(batch, q_len, H, head_dim)``, ``k``/``v`` ``(batch, kv_len, H,
        head_dim)``, ``mask`` bool and ``bias`` float broadcastable to ``(batch, H, q_len, kv_len)`` or ``None``;
        returns ``(batch, q_len, H, head_dim)``. Masked logits get ``dot_product_attention``'s large negative
        value, so a fully masked row is a uniform average, as with :data:`NEG_INF`."""
        if mask is not None:
            mask = jnp.asarray(mask, bool)
            mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
        if bias is not None:
            bias = bias.astype(q.dtype)
            bias = bias.reshape((1,) * (4 - bias.ndim) + bias.shape)
        return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=1.0 / float(self.head_dim) ** 0.5,
                                            implementation=self.implementation)

    def __call__(self, q_in, kv_in, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None,
                 bias: jax.Array | None = None):
        """Attention of ``q_in`` ``(batch, q_len, d)`` over ``kv_in`` ``(batch, kv_len, d)`` (``bias``: as
        :meth:`attend`'s)."""
        k, v = self.project_kv(kv_in)
        return self.attend(q_in, k, v, mask, deterministic=deterministic, rngs=rngs, bias=bias)

    def project_kv_heads(self, kv: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Keys and values of ``kv`` ``(batch, kv_len, d)`` head-major: ``(batch, H, head_dim, kv_len)`` each.

        The layout of the decoding caches (:meth:`attend_heads`): XLA's CPU dot reads it as is, whereas
        ``(batch, kv_len, H, head_dim)`` keys/values were transposed inside the decoding loop at every
        step (a quarter of paper-size MLPAG beam-search time; benchmarks/decode.py).
        """
        k, v = self.project_kv(kv)
        return jnp.transpose(k, (0, 2, 3, 1)), jnp.transpose(v, (0, 2, 3, 1))

    def attend_heads(self, q_in: jax.Array, segments, mask: jax.Array | None) -> jax.Array:
        """Attention (no dropout: decoding) of ``q_in`` ``(batch, q_len, d)`` over head-major keys/values.

        Args:
          q_in: queries before projection.
          segments: ``[(k, v), ...]``, each ``(batch, H, head_dim, n_i)`` (:meth:`project_kv_heads`), taken
            as one key axis of length ``sum n_i`` in order (M4C: the prefix, then the decoder cache).
            One segment goes through :func:`jax.nn.dot_product_attention`; several segments with
            ``implementation == "xla"`` take one dot per segment (the same computation, without
            concatenating the keys/values at every step), with ``"cudnn"`` they are concatenated for
            one fused call.
          mask: bool, broadcastable to ``(batch, H, q_len, sum n_i)``; ``None`` attends everywhere.

        One segment may have fewer rows than ``q_in``: keys/values ``(b, H, head_dim, n)`` shared by
        ``batch / b`` consecutive query rows (beam search's beams of one example,
        :func:`openvivqa_jax.vqa.decoding.beam_search` with ``share_memory``); those rows then attend as
        ``batch / b`` query positions of one example (``mask`` of batch ``b`` or 1, one query row). The
        result equals attending over ``batch / b`` repeated copies up to float rounding (the dot runs over
        ``batch / b`` query rows at once; differences of order 1e-7).

        Returns:
          ``(batch, q_len, d)``, equal to :meth:`attend` over the concatenated keys/values.

        Raises:
          ValueError: shared keys/values whose batch does not divide ``batch``, or a mask that is not of
            batch ``b`` (or 1) with one query row.
        """
        q = self._split(self.query(q_in))
        if len(segments) > 1 and self.implementation == "xla":
            # Several segments (M4C: prefix, then cache) with XLA: the same computation as
            # dot_product_attention's XLA path, one dot per segment. Concatenating the segments for one
            # call would copy and transpose the prefix keys/values at every step and layer of the
            # compiled beam-search loop.
            scale = 1.0 / float(self.head_dim) ** 0.5
            logits = jnp.concatenate([jnp.einsum("bqhd,bhdk->bhqk", q, k.astype(q.dtype),
                                                 preferred_element_type=jnp.float32) for k, _ in segments], -1)
            logits = logits * scale
            if mask is not None:
                logits = jnp.where(mask, logits, NEG_INF)
            probs = jax.nn.softmax(logits, axis=-1).astype(q.dtype)
            ctx, start = None, 0
            for k, v in segments:
                n = k.shape[-1]
                part = jnp.einsum("bhqk,bhdk->bqhd", probs[..., start:start + n], v.astype(q.dtype))
                ctx = part if ctx is None else ctx + part
                start += n
        else:
            # Head-major (batch, H, head_dim, n) -> (batch, n, H, head_dim): with one segment XLA folds
            # this transpose into the dots (the head-major cache is the dot's canonical right-hand side;
            # the compiled loop has the same ops as with explicit head-major einsums).
            ks = [jnp.transpose(k, (0, 3, 1, 2)) for k, _ in segments]
            vs = [jnp.transpose(v, (0, 3, 1, 2)) for _, v in segments]
            k = ks[0] if len(ks) == 1 else jnp.concatenate(ks, 1)
            v = vs[0] if len(vs) == 1 else jnp.concatenate(vs, 1)
            rows, group = q.shape[0], q.shape[0] // k.shape[0]
            if group > 1:  # one key/value row shared by `group` consecutive query rows (beam search's beams)
                if rows % k.shape[0] or (mask is not None and (jnp.shape(mask)[-2] != 1
                                                               or jnp.shape(mask)[0] not in (1, k.shape[0]))):
                    raise ValueError(f"attend_heads: {rows} query rows over keys/values of batch {k.shape[0]} need "
                                     f"a multiple and a mask of batch 1 or {k.shape[0]} with one query row, got "
                                     f"mask shape {jnp.shape(mask)}")
                q = q.reshape((k.shape[0], group * q.shape[1]) + q.shape[2:])
            ctx = self._fused(q, k.astype(q.dtype), v.astype(q.dtype), mask)
            if group > 1:
                ctx = ctx.reshape((rows, -1) + ctx.shape[2:])
        return self.out(ctx.reshape(ctx.shape[:-2] + (-1,)))


def relative_position_bucket(relative_position: jax.Array, num_buckets: int = 32,
                             max_distance: int = 128) -> jax.Array:
    """T5's bidirectional bucket of each key-minus-query offset (Raffel et al. 2020, §2.1; the rule of the
    Mesh TensorFlow T5 code): half the buckets for keys before the query, half for keys after; in each half
    the first ``num_buckets // 4`` offsets have a bucket each, the rest share log-spaced buckets up to
    ``max_distance``, and farther offsets share the last.

    Args:
      relative_position: int ``(...)``, key position minus query position.
      num_buckets: buckets in all (even).
      max_distance: the offset from which every farther one shares one bucket.

    Returns:
      int32 ``(...)`` buckets in ``[0, num_buckets)``.
    """
    half = num_buckets // 2
    n = -relative_position.astype(jnp.int32)
    ret = (n < 0).astype(jnp.int32) * half
    n = jnp.abs(n)
    max_exact = half // 2
    large = max_exact + (jnp.log(jnp.maximum(n, 1).astype(jnp.float32) / max_exact)
                         / jnp.log(max_distance / max_exact) * (half - max_exact)).astype(jnp.int32)
    large = jnp.minimum(large, half - 1)
    return ret + jnp.where(n < max_exact, n, large)


class RelativePositionBias(nnx.Module):
    """A learned scalar per head and bucket of key-minus-query offset (:func:`relative_position_bucket`),
    added to the attention logits of every layer (T5: one table shared by the layers of an encoder), so that
    attention can prefer near tokens at any absolute position without position embeddings.

    Args:
      num_heads: ``H``; num_buckets, max_distance: as :func:`relative_position_bucket`.
    """

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128, *, rngs: nnx.Rngs):
        if num_buckets < 4 or num_buckets % 2:
            raise ValueError(f"relative-position buckets must be an even number >= 4, got {num_buckets}")
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.embedding = nnx.Embed(num_buckets, num_heads, param_dtype=jnp.float32, rngs=rngs)

    def __call__(self, length: int) -> jax.Array:
        """The bias of a sequence of ``length`` tokens: float32 ``(1, H, length, length)``, entry ``[0, h, i,
        j]`` the table's value for head ``h`` and the bucket of ``j - i``."""
        pos = jnp.arange(length)
        buckets = relative_position_bucket(pos[None, :] - pos[:, None], self.num_buckets, self.max_distance)
        return jnp.transpose(self.embedding(buckets), (2, 0, 1))[None]
