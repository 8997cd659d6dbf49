"""Building blocks of the DrQA and QANet readers: token embeddings with a character CNN, a bidirectional LSTM over
padded sequences, and the split of the reader's joint sequence into its question and passage.

**The joint sequence.** Every reader reads the windows of :mod:`.features`: ``[BOS] question [SEP] passage
[EOS]`` padded to ``L`` = ``model.max_seq_len`` (``SEP`` is ``num_separators`` tokens). DrQA and QANet encode the
question and the passage apart, so :func:`gather_question` and :func:`gather_passage` copy each into its own
padded array (question from position 1, passage from its first ``passage_mask`` position) and
:func:`scatter_passage` puts a passage encoding back at the passage's positions of the joint sequence, where the
shared span head reads it.

Shapes: ``B`` batch, ``L`` joint length, ``Q`` = ``model.max_question_len``, ``P`` = ``L - 3`` passage slots,
``W`` = :data:`~openvivqa_jax.reading.vocab.MAX_WORD_CHARS` characters per token.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.layers import NEG_INF, Dropout

UNROLL = 1

__all__ = ["CharCNN", "TokenEmbedder", "BiLSTM", "reverse_padded", "gather_question", "gather_passage",
           "scatter_passage", "masked_softmax"]


def masked_softmax(logits: jax.Array, mask: jax.Array, axis: int = -1) -> jax.Array:
    """Softmax over ``axis`` where ``mask`` (broadcastable bool) is True; 0 elsewhere (all 0 for an empty row)."""
    x = jnp.where(mask, logits.astype(jnp.float32), NEG_INF)
    p = jax.nn.softmax(x, axis=axis)
    return jnp.where(mask, p, 0.0)


class CharCNN(nnx.Module):
    """A token's characters embedded, one convolution over them, ReLU and max over the characters (Kim 2014; the
    character embedding of BiDAF/QANet).

    Args:
      num_chars: character ids ``C`` (0 padding); char_dim: their embedding width; channels: output width;
      kernel: the convolution's width in characters.
    """

    def __init__(self, num_chars: int, char_dim: int, channels: int, kernel: int, *, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.embed = nnx.Embed(num_chars, char_dim, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.conv = nnx.Conv(char_dim, channels, (kernel,), padding="SAME", dtype=dtype, param_dtype=jnp.float32,
                             rngs=rngs)
        self.channels = channels

    def __call__(self, char_ids: jax.Array) -> jax.Array:
        """``char_ids`` ``(B, L, W)`` int -> ``(B, L, channels)`` (zero for a token without characters)."""
        b, n, w = char_ids.shape
        h = jax.nn.relu(self.conv(self.embed(char_ids.reshape(b * n, w))))
        has = (char_ids.reshape(b * n, w) > 0)[..., None]
        h = jnp.max(jnp.where(has, h, 0.0), axis=1)
        return h.reshape(b, n, self.channels)


class TokenEmbedder(nnx.Module):
    """Word embedding, concatenated with the :class:`CharCNN` of the token's characters when ``num_chars`` > 0.

    Args:
      vocab_size: word ids ``V``; word_dim: their width; num_chars: character ids (0: no character CNN);
      char_dim, char_channels, char_kernel: the CNN's sizes; dropout: on the word embedding.

    Attributes:
      out_dim: ``word_dim + char_channels`` (``word_dim`` without characters).
    """

    def __init__(self, vocab_size: int, word_dim: int, num_chars: int, char_dim: int, char_channels: int,
                 char_kernel: int, dropout: float, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.embedding = nnx.Embed(vocab_size, word_dim, dtype=dtype, param_dtype=jnp.float32,
                                   embedding_init=nnx.initializers.normal(0.1), rngs=rngs)
        self.chars = CharCNN(num_chars, char_dim, char_channels, char_kernel, rngs=rngs, dtype=dtype) \
            if num_chars > 0 else None
        self.dropout = Dropout(dropout)
        self.out_dim = word_dim + (char_channels if num_chars > 0 else 0)

    def __call__(self, input_ids: jax.Array, char_ids: jax.Array | None, *, deterministic: bool = True,
                 rngs: nnx.Rngs | None = None) -> jax.Array:
        """``input_ids`` ``(B, L)``, ``char_ids`` ``(B, L, W)`` or None -> ``(B, L, out_dim)``."""
        x = self.dropout(self.embedding(input_ids), deterministic=deterministic, rngs=rngs)
        if self.chars is not None:
            if char_ids is None:
                raise ValueError("this reader embeds characters but the batch has no char_ids: the run's "
                                 "tokenizer must be tokenizer.model_type='words'")
            x = jnp.concatenate([x, self.chars(char_ids).astype(x.dtype)], -1)
        return x


def reverse_padded(x: jax.Array, lengths: jax.Array) -> jax.Array:
    """Reverses the first ``lengths[b]`` steps of each row of ``x`` ``(B, T, ...)``, padding left in place."""
    t = jnp.arange(x.shape[1])[None, :]
    idx = jnp.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)
    idx = idx.reshape(idx.shape + (1,) * (x.ndim - 2))
    return jnp.take_along_axis(x, idx, axis=1)


class BiLSTM(nnx.Module):
    """One bidirectional LSTM layer over right-padded sequences (Hochreiter & Schmidhuber 1997; the gates of
    PyTorch's ``nn.LSTM``: ``i, f, g, o``).

    Both directions run in one ``lax.scan``: the backward direction reads each row's reversed real steps
    (:func:`reverse_padded`), so padding never reaches a real step. The input projection of every step is one
    matrix product before the scan; the scan does only the recurrent product (the CPU-friendly layout).

    Args:
      in_dim: input width; hidden: ``H`` per direction. Forget-gate biases start at 1 (Jozefowicz et al. 2015).
    """

    def __init__(self, in_dim: int, hidden: int, *, rngs: nnx.Rngs):
        glorot = nnx.initializers.glorot_uniform()
        orth = nnx.initializers.orthogonal()
        k1, k2 = rngs.params(), rngs.params()
        self.hidden = hidden
        self.w_in = nnx.Param(jnp.stack([glorot(jax.random.fold_in(k1, d), (in_dim, 4 * hidden)) for d in range(2)]))
        self.w_rec = nnx.Param(jnp.stack([jnp.concatenate(
            [orth(jax.random.fold_in(k2, 4 * d + g), (hidden, hidden)) for g in range(4)], 1) for d in range(2)]))
        self.bias = nnx.Param(jnp.zeros((2, 4 * hidden)).at[:, hidden:2 * hidden].set(1.0))

    def __call__(self, x: jax.Array, lengths: jax.Array) -> jax.Array:
        """``x`` ``(B, T, in_dim)``, ``lengths`` ``(B,)`` int -> ``(B, T, 2H)`` (forward then backward states;
        zero at padding)."""
        h_dim = self.hidden
        xs = jnp.stack([x, reverse_padded(x, lengths)]).astype(jnp.float32)
        gates_in = jnp.einsum("dbti,dig->tdbg", xs, self.w_in[...]) + self.bias[...][None, :, None, :]
        w_rec = self.w_rec[...]

        def step(carry, g_t):
            h, c = carry
            g = g_t + jnp.einsum("dbh,dhg->dbg", h, w_rec)
            i, f, u, o = (g[..., k * h_dim:(k + 1) * h_dim] for k in range(4))
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(u)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((2, x.shape[0], h_dim), jnp.float32)
        _, hs = jax.lax.scan(step, (zeros, zeros), gates_in, unroll=UNROLL)  # (T, 2, B, H)
        fwd = hs[:, 0].transpose(1, 0, 2)
        bwd = reverse_padded(hs[:, 1].transpose(1, 0, 2), lengths)
        mask = (jnp.arange(x.shape[1])[None, :] < lengths[:, None])[..., None]
        return jnp.where(mask, jnp.concatenate([fwd, bwd], -1), 0.0).astype(x.dtype)


def _passage_start(passage_mask: jax.Array) -> jax.Array:
    return jnp.argmax(passage_mask, axis=1)


def gather_question(x: jax.Array, passage_mask: jax.Array, q_len: int, num_separators: int = 1
                    ) -> tuple[jax.Array, jax.Array]:
    """The question tokens of the joint sequence (module doc).

    Args:
      x: ``(B, L, ...)`` per position; passage_mask: ``(B, L)`` bool; q_len: ``Q`` slots.
      num_separators: tokens between the question and the passage.

    Returns:
      ``(question (B, Q, ...), mask (B, Q) bool)``.
    """
    lq = _passage_start(passage_mask) - 1 - num_separators
    idx = jnp.clip(1 + jnp.arange(q_len), 0, x.shape[1] - 1)
    q = x[:, idx]
    return q, jnp.arange(q_len)[None, :] < lq[:, None]


def gather_passage(x: jax.Array, passage_mask: jax.Array, p_len: int) -> tuple[jax.Array, jax.Array]:
    """The passage tokens of the joint sequence: ``(passage (B, P, ...), mask (B, P) bool)``."""
    start = _passage_start(passage_mask)
    lp = jnp.sum(passage_mask, axis=1)
    idx = jnp.clip(start[:, None] + jnp.arange(p_len)[None, :], 0, x.shape[1] - 1)
    idx = idx.reshape(idx.shape + (1,) * (x.ndim - 2))
    return jnp.take_along_axis(x, idx, axis=1), jnp.arange(p_len)[None, :] < lp[:, None]


def scatter_passage(p: jax.Array, passage_mask: jax.Array) -> jax.Array:
    """A passage encoding ``(B, P, D)`` at its positions of the joint sequence: ``(B, L, D)``, zero off the
    passage (the inverse of :func:`gather_passage`)."""
    start = _passage_start(passage_mask)
    n = passage_mask.shape[1]
    idx = jnp.clip(jnp.arange(n)[None, :] - start[:, None], 0, p.shape[1] - 1)
    out = jnp.take_along_axis(p, idx[..., None], axis=1)
    return jnp.where(passage_mask[..., None], out, 0.0)
