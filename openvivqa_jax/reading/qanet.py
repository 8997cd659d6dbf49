"""QANet (Yu et al., "QANet: Combining Local Convolution with Global Self-Attention for Reading Comprehension",
ICLR 2018, §2), ViQuAD's second baseline (§5.2), as an encoder of the span reader (``model.encoder = "qanet"``).

1. **Input embedding** (§2.2.1): word embedding and the character CNN of the syllable (:class:`.embed.
   TokenEmbedder`), a two-layer highway network (Srivastava et al. 2015), then a projection to ``d`` =
   ``model.d_model``. With ``model.match_features`` the exact-match features (:mod:`.features`) join the
   embedding before the highway (not in the paper: DrQA's features, here for a reader trained from scratch).
2. **Embedding encoder** (§2.2.2): one :class:`EncoderBlock` (``model.embed_convs`` depthwise-separable
   convolutions of width ``model.embed_kernel``, self-attention, feed-forward; each a pre-LayerNorm residual
   unit, sinusoidal positions added first), shared by question and passage.
3. **Context-query attention** (§2.2.3): the trilinear similarity ``S_ij = w . [c_i; q_j; c_i * q_j]``,
   ``A = softmax_j(S) Q``, ``B = softmax_j(S) softmax_i(S)^T C`` (DCN's attention, as the paper), output
   ``[c; a; c * a; c * b]``.
4. **Model encoder** (§2.2.4): a projection of ``4d`` to ``d``, then ``model.num_layers`` blocks of
   ``model.model_convs`` convolutions of width ``model.model_kernel``, applied three times with shared weights:
   ``M0``, ``M1``, ``M2``.
5. **Output** (§2.2.5): QANet scores ``start = W_1 [M0; M1]``, ``end = W_2 [M0; M2]``. The encoder returns
   ``[M0; M1; M2]``, each through one shared LayerNorm, and the span reader's shared linear head maps it to the
   start and end logits, a superset of the paper's (the start may also read ``M2``, the end ``M1``). The
   LayerNorm is not the paper's: the pre-LN residual stream grows over the three passes, and without it the
   first losses were 17 (the uniform guess over 300 positions is 5.7).

The paper's sizes: ``d`` 128, 8 heads, 4 / 2 convolutions of width 7 / 5, 7 model-encoder blocks; word vectors 300
and character embeddings 200. Stochastic depth (layer dropout) is left out.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from openvivqa_jax.models.layers import Dropout, MultiHeadAttention, dense, layer_norm
from openvivqa_jax.reading.embed import TokenEmbedder, gather_passage, gather_question, masked_softmax, scatter_passage
from openvivqa_jax.reading.features import NUM_TOKEN_FEATURES

__all__ = ["QANetEncoder", "EncoderBlock", "context_query_attention", "depthwise_conv", "sinusoid_positions"]


def sinusoid_positions(length: int, d: int) -> np.ndarray:
    """``(length, d)`` float32 sinusoidal position signals (Vaswani et al. 2017 §3.5): ``sin`` then ``cos`` of
    ``pos / 10000^(2i/d)``."""
    pos = np.arange(length)[:, None]
    i = np.arange(d // 2)[None, :]
    ang = pos / np.power(10000.0, 2 * i / d)
    out = np.zeros((length, d), np.float32)
    out[:, : d // 2], out[:, d // 2: 2 * (d // 2)] = np.sin(ang), np.cos(ang)
    return out


def context_query_attention(c: jax.Array, q: jax.Array, c_mask: jax.Array, q_mask: jax.Array, w_c: jax.Array,
                            w_q: jax.Array, w_cq: jax.Array, bias: jax.Array | float = 0.0) -> jax.Array:
    """QANet's context-query attention (module doc, 3).

    Args:
      c: ``(B, P, d)`` passage; q: ``(B, Q, d)`` question; c_mask ``(B, P)``, q_mask ``(B, Q)`` bool;
      w_c, w_q, w_cq: ``(d,)`` the trilinear weights; bias: a scalar added to ``S``.

    Returns:
      ``(B, P, 4d)`` ``[c; a; c * a; c * b]``.
    """
    c32, q32 = c.astype(jnp.float32), q.astype(jnp.float32)
    s = (jnp.einsum("bpd,d->bp", c32, w_c)[:, :, None] + jnp.einsum("bqd,d->bq", q32, w_q)[:, None, :]
         + jnp.einsum("bpd,bqd->bpq", c32 * w_cq, q32) + bias)
    s_q = masked_softmax(s, q_mask[:, None, :], axis=2)  # over the question words
    s_c = masked_softmax(s, c_mask[:, :, None], axis=1)  # over the passage words
    a = jnp.einsum("bpq,bqd->bpd", s_q, q32)
    b = jnp.einsum("bpq,bkq,bkd->bpd", s_q, s_c, c32)
    return jnp.concatenate([c32, a, c32 * a, c32 * b], -1).astype(c.dtype)


def depthwise_conv(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """A depthwise convolution of ``x`` ``(B, T, d)`` with ``kernel`` ``(k, d)`` and zero padding as XLA's
    "SAME" (``(k - 1) // 2`` before): ``y_t = sum_j kernel_j * x_{t + j - (k - 1) // 2}``. Written as ``k``
    shifted products, which XLA's CPU code runs about 200 times faster than a grouped convolution (its gradient
    above all)."""
    k = kernel.shape[0]
    left = (k - 1) // 2
    xp = jnp.pad(x, ((0, 0), (left, k - 1 - left), (0, 0)))
    t = x.shape[1]
    return sum(xp[:, j:j + t] * kernel[j].astype(x.dtype) for j in range(k))


class _SeparableConv(nnx.Module):
    """Depthwise convolution of width ``kernel`` over the sequence, then a pointwise ``d -> d`` (Chollet 2017)."""

    def __init__(self, d: int, kernel: int, *, rngs: nnx.Rngs, dtype: Any):
        self.depthwise = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (kernel, 1, d))[:, 0])
        self.pointwise = dense(d, d, rngs, dtype)

    def __call__(self, x):
        return self.pointwise(depthwise_conv(x, self.depthwise[...]))


class EncoderBlock(nnx.Module):
    """QANet's encoder block (its Figure 1, right): positions, ``num_convs`` convolutions, self-attention,
    feed-forward, each ``x + f(LN(x))`` with dropout; padding zeroed before every convolution, so it never
    reaches a real token."""

    def __init__(self, d: int, num_convs: int, kernel: int, num_heads: int, dropout: float, *, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.conv_norms = nnx.List([layer_norm(d, rngs, dtype) for _ in range(num_convs)])
        self.convs = nnx.List([_SeparableConv(d, kernel, rngs=rngs, dtype=dtype) for _ in range(num_convs)])
        self.attn_norm = layer_norm(d, rngs, dtype)
        self.attn = MultiHeadAttention(d, num_heads, 0.0, rngs=rngs, dtype=dtype)
        self.ffn_norm = layer_norm(d, rngs, dtype)
        self.ffn_in = dense(d, d, rngs, dtype)
        self.ffn_out = dense(d, d, rngs, dtype)
        self.dropout = Dropout(dropout)
        self.d = d

    def __call__(self, x, mask, *, deterministic=True, rngs=None):
        """``x`` ``(B, T, d)``, ``mask`` ``(B, T)`` bool -> ``(B, T, d)``."""
        m = mask[..., None]
        x = x + jnp.asarray(sinusoid_positions(x.shape[1], self.d), x.dtype)[None]
        for norm, conv in zip(self.conv_norms, self.convs):
            h = conv(jnp.where(m, norm(x), 0.0))
            x = x + self.dropout(jax.nn.relu(h), deterministic=deterministic, rngs=rngs)
        xn = self.attn_norm(x)
        h = self.attn(xn, xn, mask[:, None, None, :], deterministic=deterministic, rngs=rngs)
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        h = self.ffn_out(jax.nn.relu(self.ffn_in(self.ffn_norm(x))))
        x = x + self.dropout(h, deterministic=deterministic, rngs=rngs)
        return jnp.where(m, x, 0.0)


class _Highway(nnx.Module):
    """Two highway layers: ``x = g * relu(W x) + (1 - g) * x``, ``g = sigmoid(W_g x)``."""

    def __init__(self, d: int, dropout: float, *, rngs: nnx.Rngs, dtype: Any):
        self.linear = nnx.List([dense(d, d, rngs, dtype) for _ in range(2)])
        self.gate = nnx.List([dense(d, d, rngs, dtype) for _ in range(2)])
        self.dropout = Dropout(dropout)

    def __call__(self, x, *, deterministic, rngs):
        for lin, gate in zip(self.linear, self.gate):
            g = jax.nn.sigmoid(gate(x))
            h = self.dropout(jax.nn.relu(lin(x)), deterministic=deterministic, rngs=rngs)
            x = g * h + (1 - g) * x
        return x


class QANetEncoder(nnx.Module):
    """QANet (module doc) as a span-reader encoder.

    Args:
      vocab_size, num_chars: word and character ids; word_dim, char_dim, char_channels, char_kernel: embedding
      sizes; d_model, num_heads: ``d`` and heads; embed_convs/embed_kernel, model_convs/model_kernel: the two
      encoders' convolutions; num_layers: model-encoder blocks; dropout; match_features; max_seq_len,
      max_question_len: ``L`` and ``Q``.

    Attributes:
      out_dim: ``3 * d_model``; extra_inputs: the batch arrays the span reader passes.
    """

    extra_inputs = ("passage_mask", "token_features", "char_ids")

    def __init__(self, vocab_size: int, num_chars: int, *, word_dim: int, char_dim: int, char_channels: int,
                 char_kernel: int, d_model: int, num_heads: int, embed_convs: int, embed_kernel: int,
                 model_convs: int, model_kernel: int, num_layers: int, dropout: float, match_features: bool,
                 max_seq_len: int, max_question_len: int, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.embed = TokenEmbedder(vocab_size, word_dim, num_chars, char_dim, char_channels, char_kernel, dropout,
                                   rngs=rngs, dtype=dtype)
        self.match_features = bool(match_features)
        e = self.embed.out_dim + (NUM_TOKEN_FEATURES if match_features else 0)
        self.highway = _Highway(e, dropout, rngs=rngs, dtype=dtype)
        self.input_proj = dense(e, d_model, rngs, dtype)
        self.embed_block = EncoderBlock(d_model, embed_convs, embed_kernel, num_heads, dropout, rngs=rngs, dtype=dtype)
        self.w_c = nnx.Param(jnp.zeros((d_model,)))
        self.w_q = nnx.Param(jnp.zeros((d_model,)))
        self.w_cq = nnx.Param(jax.random.uniform(rngs.params(), (d_model,), minval=-1.0, maxval=1.0)
                              / np.sqrt(d_model))
        self.cq_proj = dense(4 * d_model, d_model, rngs, dtype)
        self.model_blocks = nnx.List([EncoderBlock(d_model, model_convs, model_kernel, num_heads, dropout, rngs=rngs,
                                                   dtype=dtype) for _ in range(num_layers)])
        self.out_norm = layer_norm(d_model, rngs, dtype)
        self.dropout = Dropout(dropout)
        self.q_len, self.p_len = int(max_question_len), int(max_seq_len) - 3
        self.out_dim = 3 * d_model

    def _embed(self, input_ids, token_features, char_ids, *, deterministic, rngs):
        x = self.embed(input_ids, char_ids, deterministic=deterministic, rngs=rngs)
        if self.match_features:
            if token_features is None:
                raise ValueError("model.match_features is on but the batch has no token_features")
            x = jnp.concatenate([x, token_features.astype(x.dtype)], -1)
        return self.input_proj(self.highway(x, deterministic=deterministic, rngs=rngs))

    def __call__(self, input_ids, segment_ids, input_mask, *, passage_mask, token_features=None, char_ids=None,
                 deterministic: bool = True, rngs: nnx.Rngs | None = None) -> jax.Array:
        """Ids, segments, mask, ``passage_mask`` ``(B, L)``, ``token_features`` ``(B, L, F)``, ``char_ids``
        ``(B, L, W)`` -> ``(B, L, 3 d_model)``, zero off the passage."""
        del segment_ids, input_mask
        kw = dict(deterministic=deterministic, rngs=rngs)
        x = self._embed(input_ids, token_features, char_ids, **kw)
        q, q_mask = gather_question(x, passage_mask, self.q_len)
        c, c_mask = gather_passage(x, passage_mask, self.p_len)
        q, c = self.embed_block(q, q_mask, **kw), self.embed_block(c, c_mask, **kw)
        h = context_query_attention(c, q, c_mask, q_mask, self.w_c[...], self.w_q[...], self.w_cq[...])
        h = self.cq_proj(self.dropout(h, **kw))
        outs = []
        for _ in range(3):
            for block in self.model_blocks:
                h = block(h, c_mask, **kw)
            outs.append(self.out_norm(h))
        return scatter_passage(jnp.concatenate(outs, -1), passage_mask)
