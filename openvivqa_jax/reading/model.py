"""The span reader: an encoder over ``[question; passage]`` and start/end pointers over the passage tokens.

As the BERT baseline of ViQuAD (Nguyen et al. 2020, §5.2; Devlin et al. 2019, §4.2): one linear layer maps
every encoded token to a start and an end logit; positions outside the passage get
:data:`~openvivqa_jax.models.layers.NEG_INF`; the loss is the mean of the start and end cross-entropies. QANet
(Yu et al. 2018) points the same way over its own encoder.

**The encoder seam.** :class:`SpanReader` takes any encoder module called as
``encoder(input_ids, segment_ids, input_mask, deterministic=..., rngs=..., **extra) -> (batch, len, out_dim)``,
where ``extra`` are the batch arrays named by the encoder's ``extra_inputs`` (``passage_mask``,
``token_features``, ``char_ids``; none by default) and ``out_dim`` its output width (``model.d_model`` when it
has none). :data:`ENCODERS` maps ``model.encoder`` to a builder of ``(model_cfg, vocab_size, rngs, dtype,
num_chars)``:

- ``transformer`` (:class:`TransformerEncoder`): token + position + segment embeddings, pre-LN
  :class:`EncoderBlock` s, trained from scratch; with ``model.match_features`` the exact-match features and with
  ``model.char_channels`` the character CNN are added to the token embedding; with ``model.relative_buckets``
  T5's relative-position bias takes the place of the position embedding; with ``model.aligned_question``
  DrQA's aligned question embedding is added to each passage token's input;
- ``drqa`` (:mod:`.drqa`) and ``qanet`` (:mod:`.qanet`): the paper's two baselines (ViQuAD §5.2);
- ``pretrained`` (:mod:`.pretrained`): mBERT / XLM-R / PhoBERT from a Hugging Face folder.

All share the span head, the loss and the decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from openvivqa_jax.models.layers import (NEG_INF, Dropout, EncoderBlock, RelativePositionBias, call_block, dense,
                                         layer_norm)
from openvivqa_jax.reading.drqa import aligned_question_embedding
from openvivqa_jax.reading.embed import CharCNN
from openvivqa_jax.reading.features import NUM_TOKEN_FEATURES

__all__ = ["TransformerEncoder", "SpanReader", "ENCODERS", "build_reader", "span_loss", "question_alignment"]


def question_alignment(emb: jax.Array, passage_mask: jax.Array, proj: Callable[[jax.Array], jax.Array]
                       ) -> jax.Array:
    """DrQA's aligned question embedding (Chen et al. 2017, eq. 2) over the joint ``[BOS] q [EOS] p [EOS]``
    sequence: ``f_align(p_i) = sum_j softmax_j(relu(W E(p_i)) . relu(W E(q_j))) E(q_j)`` over the question
    tokens ``q_j`` (the positions between BOS and the first EOS), at every passage position; zero elsewhere.

    Args:
      emb: ``(batch, len, E)`` the word embeddings ``E(.)``; passage_mask: ``(batch, len)`` bool;
      proj: ``W``, mapping ``(..., E)`` to ``(..., A)``.

    Returns:
      ``(batch, len, E)``.
    """
    pos = jnp.arange(emb.shape[1])[None, :]
    start = jnp.argmax(passage_mask, axis=1)[:, None]  # the passage's first position
    q_mask = (pos >= 1) & (pos < start - 1)
    h = jax.nn.relu(proj(emb))
    aligned = aligned_question_embedding(h, h, emb, q_mask)
    return jnp.where(passage_mask[..., None], aligned, jnp.zeros_like(aligned))


class TransformerEncoder(nnx.Module):
    """Token, position and segment embeddings summed, then ``num_layers`` pre-LN self-attention blocks and a
    final LayerNorm (the BERT encoder layout with pre-LN blocks, trained from scratch).

    With ``relative_buckets`` > 0 the learned absolute position embedding is replaced by T5's relative-position
    bias (:class:`~openvivqa_jax.models.layers.RelativePositionBias`, one table shared by the blocks): from
    scratch, an absolute embedding must learn "near the question's words" once per pair of positions, a
    relative bias once per offset bucket.

    Args:
      vocab_size: pieces ``V``; max_len: positions; d_model, num_heads, ffn_dim, num_layers, dropout: sizes;
      relative_buckets, relative_max_distance: the relative-position bias's buckets (0: absolute positions)
        and the offset from which they share one bucket;
      match_features: add a projection of the exact-match features (:mod:`.features`) to the embedding;
      num_chars, char_dim, char_channels, char_kernel: add a projection of the character CNN
      (:class:`.embed.CharCNN`; ``num_chars`` 0: none);
      aligned_question: add a projection of DrQA's aligned question embedding (:func:`question_alignment`) to
        each passage token's input: which question word each passage word resembles, before any attention
        block has learned to look for it (the batch then carries ``passage_mask``).
    """

    def __init__(self, vocab_size: int, max_len: int, d_model: int, num_heads: int, ffn_dim: int,
                 num_layers: int, dropout: float, *, rngs: nnx.Rngs, dtype: Any = jnp.float32, remat: bool = False,
                 match_features: bool = False, num_chars: int = 0, char_dim: int = 32, char_channels: int = 0,
                 char_kernel: int = 5, relative_buckets: int = 0, relative_max_distance: int = 128,
                 aligned_question: bool = False):
        emb = dict(dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.embedding = nnx.Embed(vocab_size, d_model, **emb)
        self.relative = RelativePositionBias(num_heads, relative_buckets, relative_max_distance, rngs=rngs) \
            if relative_buckets else None
        self.pos_embedding = None if relative_buckets else nnx.Embed(max_len, d_model, **emb)
        self.segment_embedding = nnx.Embed(2, d_model, **emb)
        self.feature_proj = dense(NUM_TOKEN_FEATURES, d_model, rngs, dtype) if match_features else None
        use_chars = num_chars > 0 and char_channels > 0
        self.chars = CharCNN(num_chars, char_dim, char_channels, char_kernel, rngs=rngs, dtype=dtype) \
            if use_chars else None
        self.char_proj = dense(char_channels, d_model, rngs, dtype) if use_chars else None
        self.align = dense(d_model, d_model, rngs, dtype) if aligned_question else None
        self.align_proj = dense(d_model, d_model, rngs, dtype) if aligned_question else None
        self.extra_inputs = tuple(k for k, on in (("token_features", match_features), ("char_ids", use_chars),
                                                  ("passage_mask", aligned_question)) if on)
        self.dropout = Dropout(dropout)
        self.blocks = nnx.List([EncoderBlock(d_model, num_heads, ffn_dim, dropout, rngs=rngs, dtype=dtype)
                                for _ in range(num_layers)])
        self.norm = layer_norm(d_model, rngs, dtype)
        self.remat = remat

    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array, input_mask: jax.Array, *,
                 token_features: jax.Array | None = None, char_ids: jax.Array | None = None,
                 passage_mask: jax.Array | None = None, deterministic: bool = True,
                 rngs: nnx.Rngs | None = None) -> jax.Array:
        """``input_ids``/``segment_ids`` ``(batch, len)`` int, ``input_mask`` ``(batch, len)`` bool (and
        ``token_features`` ``(batch, len, F)``, ``char_ids`` ``(batch, len, W)``, ``passage_mask`` ``(batch, len)``
        bool when used) -> ``(batch, len, d_model)``."""
        words = self.embedding(input_ids)
        x = words + self.segment_embedding(segment_ids)
        if self.align is not None:
            x = x + self.align_proj(question_alignment(words, passage_mask, self.align))
        bias = None
        if self.relative is not None:
            bias = self.relative(input_ids.shape[1])
        else:
            x = x + self.pos_embedding(jnp.arange(input_ids.shape[1])[None, :])
        if self.feature_proj is not None:
            x = x + self.feature_proj(token_features.astype(x.dtype))
        if self.chars is not None:
            x = x + self.char_proj(self.chars(char_ids))
        x = self.dropout(x, deterministic=deterministic, rngs=rngs)
        for block in self.blocks:
            x = call_block(block, x, input_mask, remat=self.remat, deterministic=deterministic, rngs=rngs,
                           attn_bias=bias)
        return self.norm(x)


class SpanReader(nnx.Module):
    """Start and end pointers over the passage tokens of an encoded ``[question; passage]`` (module doc).

    Args:
      encoder: the encoder module (module doc, the seam).
      d_model: the encoder's output width when it has no ``out_dim``.
    """

    def __init__(self, encoder: nnx.Module, d_model: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.encoder = encoder
        self.span_head = dense(int(getattr(encoder, "out_dim", d_model)), 2, rngs, dtype)

    def __call__(self, batch: dict, *, deterministic: bool = True,
                 rngs: nnx.Rngs | None = None) -> tuple[jax.Array, jax.Array]:
        """``batch``: ``input_ids``, ``segment_ids`` ``(batch, len)`` int32, ``input_mask``, ``passage_mask``
        ``(batch, len)`` bool, and the encoder's ``extra_inputs``. Returns ``(start_logits, end_logits)``, each
        ``(batch, len)`` float32, NEG_INF off the passage."""
        extra = {k: batch.get(k) for k in getattr(self.encoder, "extra_inputs", ())}
        h = self.encoder(batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                         deterministic=deterministic, rngs=rngs, **extra)
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


def _chars(m) -> dict:
    return dict(char_dim=int(m.get("char_dim", 32)), char_channels=int(m.get("char_channels", 0)),
                char_kernel=int(m.get("char_kernel", 5)))


def _transformer(m, vocab_size: int, rngs: nnx.Rngs, dtype: Any, num_chars: int = 0) -> TransformerEncoder:
    return TransformerEncoder(vocab_size, m.max_seq_len, m.d_model, m.num_heads, m.ffn_dim, m.num_layers,
                              m.dropout, rngs=rngs, dtype=dtype, remat=bool(m.get("remat", False)),
                              match_features=bool(m.get("match_features", False)), num_chars=num_chars,
                              relative_buckets=int(m.get("relative_buckets", 0)),
                              relative_max_distance=int(m.get("relative_max_distance", 128)),
                              aligned_question=bool(m.get("aligned_question", False)), **_chars(m))


def _drqa(m, vocab_size: int, rngs: nnx.Rngs, dtype: Any, num_chars: int = 0):
    from openvivqa_jax.reading.drqa import DrQAEncoder

    c = _chars(m)
    return DrQAEncoder(vocab_size, num_chars if c["char_channels"] else 0, word_dim=int(m.word_dim),
                       hidden=int(m.hidden), num_layers=int(m.num_layers), dropout=float(m.dropout),
                       match_features=bool(m.get("match_features", True)), max_seq_len=int(m.max_seq_len),
                       max_question_len=int(m.max_question_len), rngs=rngs, dtype=dtype, **c)


def _qanet(m, vocab_size: int, rngs: nnx.Rngs, dtype: Any, num_chars: int = 0):
    from openvivqa_jax.reading.qanet import QANetEncoder

    c = _chars(m)
    return QANetEncoder(vocab_size, num_chars if c["char_channels"] else 0, word_dim=int(m.word_dim),
                        d_model=int(m.d_model), num_heads=int(m.num_heads), embed_convs=int(m.embed_convs),
                        embed_kernel=int(m.embed_kernel), model_convs=int(m.model_convs),
                        model_kernel=int(m.model_kernel), num_layers=int(m.num_layers), dropout=float(m.dropout),
                        match_features=bool(m.get("match_features", False)), max_seq_len=int(m.max_seq_len),
                        max_question_len=int(m.max_question_len), rngs=rngs, dtype=dtype, **c)


def _pretrained(m, vocab_size: int, rngs: nnx.Rngs, dtype: Any, num_chars: int = 0):
    from openvivqa_jax.models.bert import read_bert_settings
    from openvivqa_jax.reading.pretrained import PretrainedEncoder, pretrained_folder

    del vocab_size, num_chars  # the checkpoint's own
    folder = pretrained_folder(m)
    return PretrainedEncoder(read_bert_settings(folder), folder, rngs=rngs, dtype=dtype)


#: ``model.encoder`` name -> ``builder(model_cfg, vocab_size, rngs, dtype, num_chars) -> encoder`` (module doc).
ENCODERS: dict[str, Callable[..., nnx.Module]] = {"transformer": _transformer, "drqa": _drqa, "qanet": _qanet,
                                                   "pretrained": _pretrained}


def build_reader(model_cfg, vocab_size: int, seed: int = 0, encoder: nnx.Module | None = None,
                 num_chars: int = 0) -> SpanReader:
    """The span reader of ``model_cfg`` (``encoder`` and its sizes, ``dtype``) with parameters from ``seed``;
    ``encoder`` replaces the one :data:`ENCODERS` would build; ``num_chars``: the tokenizer's character ids (0:
    no character CNN).

    Raises:
      ValueError: ``model.encoder`` names no entry of :data:`ENCODERS`.
    """
    dtype = jnp.dtype(model_cfg.get("dtype", "float32"))
    rngs = nnx.Rngs(params=seed)
    if encoder is None:
        name = model_cfg.get("encoder", "transformer")
        if name not in ENCODERS:
            raise ValueError(f"config value model.encoder={name!r} names no encoder: one of {sorted(ENCODERS)}")
        encoder = ENCODERS[name](model_cfg, vocab_size, rngs, dtype, num_chars)
    return SpanReader(encoder, model_cfg.d_model, rngs=rngs, dtype=dtype)
