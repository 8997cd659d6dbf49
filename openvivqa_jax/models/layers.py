"""Shared Flax NNX layers: attention with an explicit KV cache, transformer blocks, vision backbones.

Every model of the zoo is composed from these. Layers never mention meshes or devices; sharding
comes from regex rules over parameter paths (``query``/``key``/``value``/``out``/``wi``/``wo``/
``embedding`` names are what the rules match).

Masks are boolean with ``True`` = attend / valid. Attention masks broadcast to
``(batch, num_heads, q_len, kv_len)``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.extend.random import threefry_2x32

__all__ = [
    "NEG_INF",
    "ATTENTION_IMPLS",
    "Dropout",
    "dropout_bit_width",
    "set_attention_impl",
    "MultiHeadAttention",
    "FeedForward",
    "EncoderBlock",
    "CrossBlock",
    "DecoderLayer",
    "SmallCNN",
    "grid_boxes",
    "box_overlap_weights",
    "masked_mean",
    "dense",
    "layer_norm",
    "call_block",
]

#: Large negative logit used for masked positions (finite so that fully masked rows stay NaN-free).
NEG_INF = -1e9


def call_block(block, *args, remat: bool = False, deterministic: bool = True, rngs=None, **kwargs):
    """``block(*args, deterministic=..., rngs=..., **kwargs)``; with ``remat`` under ``nnx.remat``
    (``jax.checkpoint``): the block's activations are not kept for the backward pass but recomputed
    there, trading one more forward pass of the block for its activation memory. Outputs and gradients
    are the same either way (dropout draws the same masks in the recomputation)."""
    if not remat:
        return block(*args, deterministic=deterministic, rngs=rngs, **kwargs)

    def run(block, args, kwargs, rngs):
        return block(*args, deterministic=deterministic, rngs=rngs, **kwargs)

    return nnx.remat(run)(block, args, kwargs, rngs)


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


def dropout_bit_width(rate: float) -> int:
    """Random bits per element that dropout at ``rate`` draws: the narrowest of 8, 16 and 32 whose
    threshold ``round(keep * 2**w)`` (``keep = 1 - rate``) puts the realized drop rate within 0.1% of
    ``rate`` (relative), e.g. 8 for 0.5 or 0.25 (exact), 16 for 0.1 (drop rate 0.1000061)."""
    keep = 1.0 - rate
    for w in (8, 16):
        if abs(_threshold(keep, w) / 2 ** w - keep) <= 1e-3 * min(rate, keep):
            return w
    return 32


def _threshold(keep: float, width: int) -> int:
    """``round(keep * 2**width)``, at most ``2**width - 1`` (the largest ``width``-bit integer + 1 is not
    representable; keeping everything is ``rate == 0``, handled before)."""
    return min(round(keep * 2 ** width), 2 ** width - 1)


class Dropout(nnx.Dropout):
    """Inverted dropout (Srivastava et al. 2014): keep each element with probability ``keep = 1 - rate``
    and scale kept elements by ``1 / keep``; the identity when ``deterministic`` or ``rate == 0``.

    Same arguments, key stream and semantics as :class:`flax.nnx.Dropout` (one fresh key per call from
    ``rngs.dropout``, so masks are independent per element, per call, i.e. per layer, and per step, and
    fixed by the seed), with cheaper random bits. ``nnx.Dropout`` draws a 32-bit
    ``jax.random.bernoulli`` per element, and JAX's default partitionable threefry spends one
    threefry-2x32 block (64 bits) on each 32-bit word. Here each element takes only
    :func:`dropout_bit_width` bits (16 at rate 0.1, 8 at 0.5), and with a threefry key the words come
    from counter-mode threefry-2x32 (Salmon et al. 2011: block ``i`` encrypts counters ``(i, i + n/2)``),
    two words per block: 4x fewer blocks at rate 0.1, 8x at 0.5. An element is kept when its ``w``-bit
    integer is below ``round(keep * 2**w)``. Other key implementations (``train.dropout_prng`` ``rbg``,
    ``unsafe_rbg``) draw the words with ``jax.random.bits``.
    """

    def __call__(self, inputs, *, deterministic: bool | None = None, rngs=None):
        """``inputs`` of any shape -> same shape and dtype, masked and rescaled (or unchanged).

        Raises:
          ValueError: when dropout is active and no ``rngs`` is given (as ``nnx.Dropout``).
        """
        deterministic = self.deterministic if deterministic is None else deterministic
        if deterministic is None:
            raise ValueError("Dropout: pass deterministic=True/False")
        if self.rate == 0.0 or deterministic:
            return inputs
        if self.rate == 1.0:
            return jnp.zeros_like(inputs)
        rngs = self.rngs if rngs is None else rngs
        if rngs is None:
            raise ValueError("Dropout: deterministic is False but no rngs were given")
        if isinstance(rngs, nnx.Rngs):
            key = rngs[self.rng_collection]()
        elif isinstance(rngs, nnx.RngStream):
            key = rngs()
        else:
            key = rngs
        shape = list(inputs.shape)
        for dim in self.broadcast_dims:
            shape[dim] = 1
        keep = 1.0 - self.rate
        mask = _keep_mask(key, tuple(shape), keep, dropout_bit_width(self.rate))
        mask = jnp.broadcast_to(mask, inputs.shape)
        return jax.lax.select(mask, inputs / keep, jnp.zeros_like(inputs))


def _keep_mask(key: jax.Array, shape: tuple[int, ...], keep: float, width: int) -> jax.Array:
    """Bool ``shape`` mask, ``True`` with probability ``round(keep * 2**width) / 2**width`` per element,
    from ``width``-bit integers packed ``32 / width`` to a 32-bit word (see :class:`Dropout`)."""
    n = 1
    for s in shape:
        n *= s
    per_word = 32 // width
    words = -(-n // per_word)
    words += words % 2  # threefry-2x32 takes counters in pairs
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(key))
        data = jax.random.key_data(key)
    else:  # a raw uint32[2] key is threefry's
        impl, data = "threefry2x32", key
    if impl == "threefry2x32":
        bits = threefry_2x32(data, jax.lax.iota(jnp.uint32, words))
    else:
        bits = jax.random.bits(key, (words,), jnp.uint32)
    udtype = {8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32}[width]
    if width < 32:
        bits = jax.lax.bitcast_convert_type(bits, udtype).reshape(-1)
    return (bits[:n] < jnp.asarray(_threshold(keep, width), udtype)).reshape(shape)


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

    def project_kv(self, kv: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Keys and values of ``kv`` ``(batch, kv_len, d)`` as ``(batch, kv_len, H, head_dim)`` each."""
        return self._split(self.key(kv)), self._split(self.value(kv))

    def attend(
        self, q_in: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None,
        *, deterministic: bool = True, rngs: nnx.Rngs | None = None, return_weights: bool = False,
    ) -> jax.Array:
        """Attention of ``q_in`` ``(batch, q_len, d)`` over projected ``k``/``v``.

        Args:
          q_in: queries before projection.
          k, v: ``(batch, kv_len, H, head_dim)``.
          mask: bool, broadcastable to ``(batch, H, q_len, kv_len)``; ``None`` attends everywhere.
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
            if mask is not None:
                logits = jnp.where(mask, logits, NEG_INF)
            weights = jax.nn.softmax(logits, axis=-1)
            probs = self.dropout(weights.astype(v.dtype), deterministic=deterministic, rngs=rngs)
            ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
        else:
            ctx = self._fused(q, k, v, mask)
        out = self.out(ctx.reshape(ctx.shape[:-2] + (-1,)))
        return (out, weights) if return_weights else out

    def _fused(self, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None) -> jax.Array:
        """``softmax(q k^T / sqrt(head_dim), masked) v`` through :func:`jax.nn.dot_product_attention` with
        :attr:`implementation`. ``q`` ``(batch, q_len, H, head_dim)``, ``k``/``v`` ``(batch, kv_len, H,
        head_dim)``, ``mask`` bool broadcastable to ``(batch, H, q_len, kv_len)`` or ``None``; returns
        ``(batch, q_len, H, head_dim)``. Masked logits get ``dot_product_attention``'s large negative
        value, so a fully masked row is a uniform average, as with :data:`NEG_INF`."""
        if mask is not None:
            mask = jnp.asarray(mask, bool)
            mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
        return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=1.0 / float(self.head_dim) ** 0.5,
                                            implementation=self.implementation)

    def __call__(self, q_in, kv_in, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
        """Attention of ``q_in`` ``(batch, q_len, d)`` over ``kv_in`` ``(batch, kv_len, d)``."""
        k, v = self.project_kv(kv_in)
        return self.attend(q_in, k, v, mask, deterministic=deterministic, rngs=rngs)

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
        :func:`openvivqa_jax.decoding.beam_search` with ``share_memory``); those rows then attend as
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
            # call copied and transposed the prefix keys/values at every step and layer (the compiled
            # beam-search loop of M4C held 12 more transposes and 16 more copies; notes of issue 19).
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


class FeedForward(nnx.Module):
    """Position-wise FFN: ``wo(dropout(relu(wi(x))))``, ``d -> ffn_dim -> d``."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.wi = dense(d_model, ffn_dim, rngs, dtype)
        self.wo = dense(ffn_dim, d_model, rngs, dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
        """``x``: ``(..., d)`` -> ``(..., d)``."""
        h = jax.nn.relu(self.wi(x))
        return self.wo(self.dropout(h, deterministic=deterministic, rngs=rngs))


def layer_norm(d: int, rngs: nnx.Rngs, dtype: Any) -> nnx.LayerNorm:
    """The LayerNorm every model of the zoo uses (Ba et al. 2016): over the last axis of width ``d``.

    ``y = (x - mean) / sqrt(var + 1e-6) * scale + bias``; ``epsilon = 1e-6`` is flax's default and big_vision's
    ViT's (whose checkpoints :mod:`~openvivqa_jax.models.vit` loads). Parameters
    (``scale``, ``bias``, ``(d,)``) are float32; ``dtype`` is the compute dtype.

    Args:
      d: feature width (the last axis of the inputs, ``(..., d)``).
      rngs: parameter RNGs (LayerNorm's initializers are constant; the argument keeps NNX's signature).
      dtype: compute dtype, e.g. ``jnp.float32`` or ``jnp.bfloat16``.

    Returns:
      An ``nnx.LayerNorm`` mapping ``(..., d) -> (..., d)``.
    """
    return nnx.LayerNorm(d, epsilon=1e-6, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)


class CrossBlock(nnx.Module):
    """Pre-LN transformer block: attention of ``x`` over ``context`` then FFN, both residual.

    With ``context is x`` this is a self-attention encoder block. Used for MLPAG's question
    self-attention, spatial attention (image over question) and context attention (OCR over
    question), QuMLAG's guided attention and MCAN's SA/GA units.
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float, *, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.norm_q = layer_norm(d_model, rngs, dtype)
        self.norm_kv = layer_norm(d_model, rngs, dtype)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout, rngs=rngs, dtype=dtype)
        self.norm_ffn = layer_norm(d_model, rngs, dtype)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, rngs=rngs, dtype=dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x, context, context_mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
        """Args: ``x`` ``(batch, q_len, d)``; ``context`` ``(batch, kv_len, d)``; ``context_mask``
        ``(batch, kv_len)`` bool. Returns ``(batch, q_len, d)``."""
        mask = context_mask[:, None, None, :]
        h = self.attn(self.norm_q(x), self.norm_kv(context), mask, deterministic=deterministic, rngs=rngs)
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        h = self.ffn(self.norm_ffn(x), deterministic=deterministic, rngs=rngs)
        return x + self.dropout(h, deterministic=deterministic, rngs=rngs)


class EncoderBlock(nnx.Module):
    """Pre-LN self-attention block over ``x`` ``(batch, len, d)`` with key mask ``(batch, len)``."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float, *, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.norm_q = layer_norm(d_model, rngs, dtype)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout, rngs=rngs, dtype=dtype)
        self.norm_ffn = layer_norm(d_model, rngs, dtype)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, rngs=rngs, dtype=dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x, mask, *, deterministic: bool = True, rngs: nnx.Rngs | None = None, attn_mask=None):
        """``attn_mask`` (optional) overrides the key mask with a full ``(batch, 1|H, len, len)`` mask."""
        m = mask[:, None, None, :] if attn_mask is None else attn_mask
        xn = self.norm_q(x)
        h = self.attn(xn, xn, m, deterministic=deterministic, rngs=rngs)
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        h = self.ffn(self.norm_ffn(x), deterministic=deterministic, rngs=rngs)
        return x + self.dropout(h, deterministic=deterministic, rngs=rngs)


class DecoderLayer(nnx.Module):
    """Pre-LN transformer decoder layer: causal self-attention, cross-attention, FFN.

    Supports teacher forcing over a whole sequence and single-step decoding with a KV cache whose
    result equals the full recompute (tested).
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float, *, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.norm_self = layer_norm(d_model, rngs, dtype)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout, rngs=rngs, dtype=dtype)
        self.norm_cross = layer_norm(d_model, rngs, dtype)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout, rngs=rngs, dtype=dtype)
        self.norm_ffn = layer_norm(d_model, rngs, dtype)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, rngs=rngs, dtype=dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x, self_mask, cross_kv, cross_mask, *, deterministic=True, rngs=None,
                 return_attention: bool = False):
        """Teacher-forced pass.

        Args:
          x: ``(batch, ans_len, d)``.
          self_mask: ``(batch|1, 1, ans_len, ans_len)`` causal & padding mask.
          cross_kv: ``(k, v)`` from :meth:`cross_attn.project_kv` of the memory.
          cross_mask: ``(batch, 1, 1, mem_len)``.
          return_attention: also return the cross-attention probabilities (predict's heat map).

        Returns:
          ``(batch, ans_len, d)``; with ``return_attention`` also ``(batch, H, ans_len, mem_len)`` float32.
        """
        xn = self.norm_self(x)
        h = self.self_attn(xn, xn, self_mask, deterministic=deterministic, rngs=rngs)
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        h = self.cross_attn.attend(self.norm_cross(x), *cross_kv, cross_mask, deterministic=deterministic, rngs=rngs,
                                   return_weights=return_attention)
        if return_attention:
            h, weights = h
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        h = self.ffn(self.norm_ffn(x), deterministic=deterministic, rngs=rngs)
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        return (x, weights) if return_attention else x

    def step(self, x, t, cache, cross_kv, cross_mask):
        """One decoding step at position ``t`` with the self-attention KV cache.

        Args:
          x: ``(batch, 1, d)`` input at step ``t``.
          t: int32 scalar step index.
          cache: ``{"k", "v"}`` each ``(batch, H, head_dim, max_len)`` (head-major,
            :meth:`MultiHeadAttention.project_kv_heads`).
          cross_kv: ``(k, v)`` from :meth:`cross_attn.project_kv_heads` of the memory, each
            ``(batch, H, head_dim, mem_len)``; cross_mask: as in :meth:`__call__`.

        Returns:
          ``(y, cache)`` with ``y`` ``(batch, 1, d)`` and the cache updated at position ``t``.

        Raises:
          ValueError: ``x`` is not ``(batch, 1, d)`` (the cache holds one position per call, so more new
            tokens would be attended as if they were one: wrong values, not an error, without this
            check), ``t`` is not a scalar, or the cache is not ``(batch, H, head_dim, max_len)``. Use
            :meth:`__call__` with a causal mask for several positions.
        """
        if getattr(x, "ndim", None) != 3 or x.shape[1] != 1:
            raise ValueError(f"DecoderLayer.step takes one new token, x of shape (batch, 1, d_model); got shape "
                             f"{getattr(x, 'shape', None)}. Use DecoderLayer.__call__ with a causal mask for "
                             "several positions")
        if jnp.ndim(t) != 0:
            raise ValueError(f"DecoderLayer.step: t must be a scalar step index, got shape {jnp.shape(t)}")
        for name in ("k", "v"):
            if cache[name].ndim != 4 or cache[name].shape[0] != x.shape[0]:
                raise ValueError(f"DecoderLayer.step: cache[{name!r}] must be (batch={x.shape[0]}, heads, head_dim, "
                                 f"max_len), got shape {cache[name].shape}")
        xn = self.norm_self(x)
        k_t, v_t = self.self_attn.project_kv_heads(xn)
        k = jax.lax.dynamic_update_slice_in_dim(cache["k"], k_t.astype(cache["k"].dtype), t, axis=3)
        v = jax.lax.dynamic_update_slice_in_dim(cache["v"], v_t.astype(cache["v"].dtype), t, axis=3)
        max_len = k.shape[3]
        mask = (jnp.arange(max_len) <= t)[None, None, None, :]
        h = self.self_attn.attend_heads(xn, [(k, v)], mask)
        x = x + h
        x = x + self.cross_attn.attend_heads(self.norm_cross(x), [cross_kv], cross_mask)
        x = x + self.ffn(self.norm_ffn(x))
        return x, {"k": k, "v": v}


def grid_boxes(grid_h: int, grid_w: int) -> jax.Array:
    """Boxes of a ``grid_h x grid_w`` grid, row-major: ``(grid_h * grid_w, 4)`` xyxy in [0, 1]."""
    ys, xs = jnp.meshgrid(jnp.arange(grid_h), jnp.arange(grid_w), indexing="ij")
    x0, y0 = xs / grid_w, ys / grid_h
    return jnp.stack([x0, y0, x0 + 1 / grid_w, y0 + 1 / grid_h], -1).reshape(-1, 4).astype(jnp.float32)


def box_overlap_weights(boxes: jax.Array, cells: jax.Array) -> jax.Array:
    """Area-overlap weights of each box over grid cells, rows normalized to sum 1.

    Used to pool appearance features "from the grid under the box" (docs/design.md §5).

    Args:
      boxes: ``(batch, num_boxes, 4)`` xyxy in [0, 1].
      cells: ``(num_cells, 4)`` or ``(batch, num_cells, 4)`` xyxy in [0, 1].

    Returns:
      ``(batch, num_boxes, num_cells)``; a box covering no cell (a padding box) gets uniform weights.
    """
    bx0, by0, bx1, by1 = [boxes[..., i : i + 1] for i in range(4)]
    if cells.ndim == 2:
        cells = cells[None]
    cx0, cy0, cx1, cy1 = [cells[:, None, :, i] for i in range(4)]
    w = jnp.clip(jnp.minimum(bx1, cx1) - jnp.maximum(bx0, cx0), 0)
    h = jnp.clip(jnp.minimum(by1, cy1) - jnp.maximum(by0, cy0), 0)
    inter = w * h
    total = inter.sum(-1, keepdims=True)
    uniform = jnp.full_like(inter, 1.0 / cells.shape[1])
    return jnp.where(total > 0, inter / jnp.maximum(total, 1e-12), uniform)


def masked_mean(x: jax.Array, mask: jax.Array, axis: int) -> jax.Array:
    """Mean of ``x`` over ``axis`` counting only ``mask`` positions (``mask`` broadcast over the
    trailing feature axis); all-masked rows give 0 (padding is masked, never zero-summed)."""
    m = mask[..., None].astype(x.dtype)
    return (x * m).sum(axis) / jnp.maximum(m.sum(axis), 1.0)


class SmallCNN(nnx.Module):
    """A small convolutional backbone over pixels giving grid features (for the synthetic data).

    ``num_stages`` stride-2 3x3 conv stages with GroupNorm and ReLU, then optionally a space-to-depth
    rearrangement (pixel unshuffle) that stacks each ``s x s`` block of the last feature map into one grid
    cell's channels: the grid gets ``s**2`` times fewer cells (fewer image tokens for the fusion and the
    decoder) while every finer position keeps its own channels, instead of being averaged away by one more
    strided convolution (small objects keep their colour; ``benchmarks/vision_probe.py``).

    ``pixel_features = p`` (0: none) also stacks the cell's own pixels into its channels: the image is
    average-pooled over ``p x p`` pixel blocks and each grid cell gets its ``(stride / p)**2`` pooled RGB
    values (in [-1, 1]), like a ViT patch embedding's input beside the CNN features. The convolutions
    average a small object (a 5x7-pixel stool at 128x96) with the pavement around it; the pooled pixels
    keep its colour. Measured on the synthetic set (dev, README): signboard colours and object counts are
    learned with it, not without.

    Args:
      channels: output channels per stage, e.g. ``(32, 64, 128, 128)``.
      space_to_depth: ``s`` (1: none). The grid is ``(H / (2**stages * s), W / (2**stages * s))`` with
        ``channels[-1] * s**2`` channels.
      pixel_features: ``p`` (0: none): adds ``3 * (stride / p)**2`` channels, ``stride = 2**stages * s``.
      rngs: parameter RNGs.

    Raises:
      ValueError: ``space_to_depth`` < 1, or ``pixel_features`` negative or not a divisor of the stride.
    """

    def __init__(self, channels: tuple[int, ...], *, rngs: nnx.Rngs, dtype: Any = jnp.float32,
                 space_to_depth: int = 1, pixel_features: int = 0):
        if int(space_to_depth) < 1:
            raise ValueError(f"space_to_depth must be >= 1, got {space_to_depth}")
        stride = 2 ** len(channels) * int(space_to_depth)
        if int(pixel_features) < 0 or (int(pixel_features) and stride % int(pixel_features)):
            raise ValueError(f"pixel_features must be 0 or a divisor of the grid stride {stride}, got {pixel_features}")
        convs, norms = [], []
        cin = 3
        for c in channels:
            convs.append(nnx.Conv(cin, c, kernel_size=(3, 3), strides=(2, 2), padding="SAME", dtype=dtype,
                                  param_dtype=jnp.float32, rngs=rngs))
            norms.append(nnx.GroupNorm(c, num_groups=min(8, c), dtype=dtype, param_dtype=jnp.float32, rngs=rngs))
            cin = c
        self.convs = nnx.List(convs)
        self.norms = nnx.List(norms)
        self.space_to_depth = int(space_to_depth)
        self.out_dim = cin * self.space_to_depth ** 2
        self.stride = stride
        self.pixel_features = int(pixel_features)
        if self.pixel_features:
            self.out_dim += 3 * (self.stride // self.pixel_features) ** 2

    def __call__(self, images: jax.Array) -> jax.Array:
        """``images``: ``(batch, H, W, 3)`` float in [0, 1] -> grid ``(batch, H/stride, W/stride, out_dim)``.

        Raises:
          ValueError: the last feature map's height or width is not a multiple of ``space_to_depth``.
        """
        x = images * 2.0 - 1.0
        for conv, norm in zip(self.convs, self.norms):
            x = jax.nn.relu(norm(conv(x)))
        s = self.space_to_depth
        if s > 1:
            b, h, w, c = x.shape
            if h % s or w % s:
                raise ValueError(f"SmallCNN: feature map {h}x{w} is not divisible by space_to_depth={s}; "
                                 f"choose an image size that is a multiple of {self.stride}")
            # (batch, h/s, s, w/s, s, c) -> (batch, h/s, w/s, s, s, c): channel index = (dy * s + dx) * c + k.
            x = x.reshape(b, h // s, s, w // s, s, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, h // s, w // s, s * s * c)
        if self.pixel_features:
            x = jnp.concatenate([x, self._cell_pixels(images, x.shape[1], x.shape[2]).astype(x.dtype)], -1)
        return x

    def _cell_pixels(self, images: jax.Array, grid_h: int, grid_w: int) -> jax.Array:
        """``(batch, H, W, 3)`` in [0, 1] -> ``(batch, grid_h, grid_w, 3 * k * k)`` pooled pixels in [-1, 1],
        ``k = stride / pixel_features``; channel index ``(dy * k + dx) * 3 + rgb``.

        Raises:
          ValueError: the image is not exactly ``grid * stride`` pixels high and wide.
        """
        p, b = self.pixel_features, images.shape[0]
        k = self.stride // p
        if images.shape[1:3] != (grid_h * self.stride, grid_w * self.stride):
            raise ValueError(f"SmallCNN: pixel_features needs an image of a multiple of {self.stride} pixels per "
                             f"side, got {images.shape[2]}x{images.shape[1]}")
        px = images.reshape(b, grid_h * k, p, grid_w * k, p, 3).mean((2, 4)) * 2.0 - 1.0
        return px.reshape(b, grid_h, k, grid_w, k, 3).transpose(0, 1, 3, 2, 4, 5).reshape(b, grid_h, grid_w, k * k * 3)
