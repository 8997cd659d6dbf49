"""The span reader: an encoder over ``[question; passage]`` and start/end pointers over the passage tokens.

As the BERT baseline of ViQuAD (Nguyen et al. 2020, §5.2; Devlin et al. 2019, §4.2): one linear layer maps
every encoded token to a start and an end logit; positions outside the passage get
:data:`~openvivqa_jax.models.layers.NEG_INF`; the loss is the mean of the start and end cross-entropies. QANet
(Yu et al. 2018) points the same way over its own encoder.

**The encoder seam.** :class:`SpanReader` takes any encoder module called as
``encoder(input_ids, segment_ids, input_mask, deterministic=..., rngs=...) -> (batch, len, d_model)``.
:class:`TransformerEncoder` (token + position + segment embeddings, pre-LN :class:`EncoderBlock` s) is the
one trained from scratch here (``model.encoder = "transformer"``); a BERT/PhoBERT encoder with pretrained
weights plugs in through :data:`ENCODERS` (a name -> builder of ``(model_cfg, vocab_size, rngs, dtype)``)
without touching the reader, its loss or its decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from openvivqa_jax.models.layers import NEG_INF, Dropout, EncoderBlock, call_block, dense, layer_norm

__all__ = ["TransformerEncoder", "SpanReader", "ENCODERS", "build_reader", "span_loss"]


class TransformerEncoder(nnx.Module):
    """Token, position and segment embeddings summed, then ``num_layers`` pre-LN self-attention blocks and a
    final LayerNorm (the BERT encoder layout with pre-LN blocks, trained from scratch).

    Args:
      vocab_size: pieces ``V``; max_len: positions; d_model, num_heads, ffn_dim, num_layers, dropout: sizes.
    """

    def __init__(self, vocab_size: int, max_len: int, d_model: int, num_heads: int, ffn_dim: int,
                 num_layers: int, dropout: float, *, rngs: nnx.Rngs, dtype: Any = jnp.float32, remat: bool = False):
        emb = dict(dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.embedding = nnx.Embed(vocab_size, d_model, **emb)
        self.pos_embedding = nnx.Embed(max_len, d_model, **emb)
        self.segment_embedding = nnx.Embed(2, d_model, **emb)
        self.dropout = Dropout(dropout)
        self.blocks = nnx.List([EncoderBlock(d_model, num_heads, ffn_dim, dropout, rngs=rngs, dtype=dtype)
                                for _ in range(num_layers)])
        self.norm = layer_norm(d_model, rngs, dtype)
        self.remat = remat

    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array, input_mask: jax.Array, *,
                 deterministic: bool = True, rngs: nnx.Rngs | None = None) -> jax.Array:
        """``input_ids``/``segment_ids`` ``(batch, len)`` int, ``input_mask`` ``(batch, len)`` bool ->
        ``(batch, len, d_model)``."""
        pos = jnp.arange(input_ids.shape[1])[None, :]
        x = self.embedding(input_ids) + self.pos_embedding(pos) + self.segment_embedding(segment_ids)
        x = self.dropout(x, deterministic=deterministic, rngs=rngs)
        for block in self.blocks:
            x = call_block(block, x, input_mask, remat=self.remat, deterministic=deterministic, rngs=rngs)
        return self.norm(x)


class SpanReader(nnx.Module):
    """Start and end pointers over the passage tokens of an encoded ``[question; passage]`` (module doc).

    Args:
      encoder: the encoder module (module doc, the seam).
      d_model: the encoder's output width.
    """

    def __init__(self, encoder: nnx.Module, d_model: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.encoder = encoder
        self.span_head = dense(d_model, 2, rngs, dtype)

    def __call__(self, batch: dict, *, deterministic: bool = True,
                 rngs: nnx.Rngs | None = None) -> tuple[jax.Array, jax.Array]:
        """``batch``: ``input_ids``, ``segment_ids`` ``(batch, len)`` int32, ``input_mask``, ``passage_mask``
        ``(batch, len)`` bool. Returns ``(start_logits, end_logits)``, each ``(batch, len)`` float32, NEG_INF
        off the passage."""
        h = self.encoder(batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                         deterministic=deterministic, rngs=rngs)
        logits = self.span_head(h).astype(jnp.float32)
        pm = batch["passage_mask"]
        return jnp.where(pm, logits[..., 0], NEG_INF), jnp.where(pm, logits[..., 1], NEG_INF)


def span_loss(start_logits: jax.Array, end_logits: jax.Array, start_positions: jax.Array,
              end_positions: jax.Array) -> tuple[jax.Array, dict]:
    """Mean of the start and end cross-entropies (BERT's SQuAD loss) over ``(batch,)`` labels.

    Returns:
      ``(loss, metrics)``: the scalar loss and ``start_accuracy``/``end_accuracy`` (argmax equals the label).
    """
    ls = optax.softmax_cross_entropy_with_integer_labels(start_logits, start_positions)
    le = optax.softmax_cross_entropy_with_integer_labels(end_logits, end_positions)
    loss = jnp.mean((ls + le) / 2)
    acc_s = jnp.mean(jnp.argmax(start_logits, -1) == start_positions)
    acc_e = jnp.mean(jnp.argmax(end_logits, -1) == end_positions)
    return loss, {"loss": loss, "start_accuracy": acc_s, "end_accuracy": acc_e}


def _transformer(m, vocab_size: int, rngs: nnx.Rngs, dtype: Any) -> TransformerEncoder:
    return TransformerEncoder(vocab_size, m.max_seq_len, m.d_model, m.num_heads, m.ffn_dim, m.num_layers,
                              m.dropout, rngs=rngs, dtype=dtype, remat=bool(m.get("remat", False)))


#: ``model.encoder`` name -> ``builder(model_cfg, vocab_size, rngs, dtype) -> encoder`` (module doc).
ENCODERS: dict[str, Callable[..., nnx.Module]] = {"transformer": _transformer}


def build_reader(model_cfg, vocab_size: int, seed: int = 0, encoder: nnx.Module | None = None) -> SpanReader:
    """The span reader of ``model_cfg`` (``encoder``, ``d_model``, ``num_heads``, ``ffn_dim``, ``num_layers``,
    ``dropout``, ``max_seq_len``, ``dtype``) with parameters from ``seed``; ``encoder`` replaces the one
    :data:`ENCODERS` would build (e.g. a pretrained BERT).

    Raises:
      ValueError: ``model.encoder`` names no entry of :data:`ENCODERS`.
    """
    dtype = jnp.dtype(model_cfg.get("dtype", "float32"))
    rngs = nnx.Rngs(params=seed)
    if encoder is None:
        name = model_cfg.get("encoder", "transformer")
        if name not in ENCODERS:
            raise ValueError(f"config value model.encoder={name!r} names no encoder: one of {sorted(ENCODERS)}")
        encoder = ENCODERS[name](model_cfg, vocab_size, rngs, dtype)
    return SpanReader(encoder, model_cfg.d_model, rngs=rngs, dtype=dtype)
