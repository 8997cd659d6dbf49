"""The DrQA document reader (Chen et al., "Reading Wikipedia to Answer Open-Domain Questions", ACL 2017, §3.2),
ViQuAD's first baseline (§5.2), as an encoder of the span reader (``model.encoder = "drqa"``).

Passage token ``p_i`` is represented by (§3.2 "Paragraph encoding"):

- its word embedding (and the character CNN of its syllable, :class:`.embed.TokenEmbedder`, when
  ``model.char_channels`` > 0: the paper's words without pretrained vectors need it for unknown syllables);
- the exact-match features ``f_exact_match`` (:mod:`.features`: normalized, tone-stripped and diacritic-free
  syllable in the question; original word capitalized) when ``model.match_features``;
- the aligned question embedding ``f_align(p_i) = sum_j a_ij E(q_j)``, ``a_ij = softmax_j(relu(W E(p_i)) .
  relu(W E(q_j)))`` (eq. 2, one ``W`` for both).

A stack of ``model.num_layers`` BiLSTMs of ``model.hidden`` units per direction reads the passage, another the
question; as the authors' code (``concat_rnn_layers``), every layer's outputs are concatenated, and the input of
every layer gets dropout ``model.dropout``. The question becomes one vector by self-attention,
``q = sum_j b_j q_j``, ``b_j = softmax_j(w . q_j)``.

**Start and end through the shared head.** DrQA scores ``start_i = p_i W_s q`` and ``end_i = p_i W_e q``
(eq. 3). The encoder returns ``[p_i * (W_s q); p_i * (W_e q)]`` (element-wise products) at each passage position;
the span reader's linear head (weights ``a``, bias ``c``) then computes ``sum_k a_k p_ik (W q)_k + c``, which is
the bilinear form ``p_i (diag(a_s) W_s + diag(a'_s) W_e) q + c``: the same family of scores, with the span head,
loss and decoding every reader shares.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.layers import Dropout, dense
from openvivqa_jax.reading.embed import (BiLSTM, TokenEmbedder, gather_passage, gather_question, masked_softmax,
                                         scatter_passage)
from openvivqa_jax.reading.features import NUM_TOKEN_FEATURES

__all__ = ["DrQAEncoder", "aligned_question_embedding"]


def aligned_question_embedding(proj_p: jax.Array, proj_q: jax.Array, emb_q: jax.Array,
                               q_mask: jax.Array) -> jax.Array:
    """DrQA's eq. 2 after the projection: ``sum_j softmax_j(proj_p_i . proj_q_j) emb_q_j``.

    Args:
      proj_p: ``(B, P, A)`` ``relu(W E(p_i))``; proj_q: ``(B, Q, A)`` ``relu(W E(q_j))``;
      emb_q: ``(B, Q, E)`` the question embeddings; q_mask: ``(B, Q)`` bool.

    Returns:
      ``(B, P, E)``.
    """
    scores = jnp.einsum("bpa,bqa->bpq", proj_p.astype(jnp.float32), proj_q.astype(jnp.float32))
    alpha = masked_softmax(scores, q_mask[:, None, :])
    return jnp.einsum("bpq,bqe->bpe", alpha, emb_q.astype(jnp.float32)).astype(emb_q.dtype)


class _Stack(nnx.Module):
    """``num_layers`` :class:`BiLSTM` s, dropout on every layer's input, outputs of all layers concatenated."""

    def __init__(self, in_dim: int, hidden: int, num_layers: int, dropout: float, *, rngs: nnx.Rngs):
        dims = [in_dim] + [2 * hidden] * (num_layers - 1)
        self.layers = nnx.List([BiLSTM(d, hidden, rngs=rngs) for d in dims])
        self.dropout = Dropout(dropout)
        self.out_dim = 2 * hidden * num_layers

    def __call__(self, x, lengths, *, deterministic, rngs):
        outs = []
        for layer in self.layers:
            x = layer(self.dropout(x, deterministic=deterministic, rngs=rngs), lengths)
            outs.append(x)
        return jnp.concatenate(outs, -1)


class DrQAEncoder(nnx.Module):
    """DrQA's reader (module doc) as a span-reader encoder.

    Args:
      vocab_size: word ids; num_chars: character ids (0: no character CNN); word_dim, char_dim, char_channels,
      char_kernel: embedding sizes; hidden: LSTM units per direction; num_layers: BiLSTM layers (each side);
      dropout: on embeddings and LSTM inputs; match_features: use the exact-match features; max_seq_len,
      max_question_len: the joint sequence's ``L`` and ``Q``.

    Attributes:
      out_dim: ``2 * num_layers * 2 * hidden`` (the two products of the module doc).
      extra_inputs: the batch arrays the span reader passes besides ids, segments and mask.
    """

    extra_inputs = ("passage_mask", "token_features", "char_ids")

    def __init__(self, vocab_size: int, num_chars: int, *, word_dim: int, char_dim: int, char_channels: int,
                 char_kernel: int, hidden: int, num_layers: int, dropout: float, match_features: bool,
                 max_seq_len: int, max_question_len: int, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.embed = TokenEmbedder(vocab_size, word_dim, num_chars, char_dim, char_channels, char_kernel, 0.0,
                                   rngs=rngs, dtype=dtype)
        e = self.embed.out_dim
        self.align = dense(e, e, rngs, dtype)
        self.match_features = bool(match_features)
        p_in = 2 * e + (NUM_TOKEN_FEATURES if match_features else 0)
        self.passage_rnn = _Stack(p_in, hidden, num_layers, dropout, rngs=rngs)
        self.question_rnn = _Stack(e, hidden, num_layers, dropout, rngs=rngs)
        d = self.passage_rnn.out_dim
        self.self_attn = dense(d, 1, rngs, dtype)
        self.start_proj = dense(d, d, rngs, dtype)
        self.end_proj = dense(d, d, rngs, dtype)
        self.emb_dropout = Dropout(dropout)
        self.q_len, self.p_len = int(max_question_len), int(max_seq_len) - 3
        self.out_dim = 2 * d

    def __call__(self, input_ids, segment_ids, input_mask, *, passage_mask, token_features=None, char_ids=None,
                 deterministic: bool = True, rngs: nnx.Rngs | None = None) -> jax.Array:
        """Ids, segments, mask, ``passage_mask`` ``(B, L)``, ``token_features`` ``(B, L, F)`` float, ``char_ids``
        ``(B, L, W)`` -> ``(B, L, out_dim)``, zero off the passage."""
        del segment_ids, input_mask
        emb = self.embed(input_ids, char_ids, deterministic=deterministic, rngs=rngs)
        emb = self.emb_dropout(emb, deterministic=deterministic, rngs=rngs)
        e_q, q_mask = gather_question(emb, passage_mask, self.q_len)
        e_p, p_mask = gather_passage(emb, passage_mask, self.p_len)
        aligned = aligned_question_embedding(jax.nn.relu(self.align(e_p)), jax.nn.relu(self.align(e_q)), e_q,
                                             q_mask)
        parts = [e_p, aligned]
        if self.match_features:
            if token_features is None:
                raise ValueError("model.match_features is on but the batch has no token_features")
            parts.append(gather_passage(token_features, passage_mask, self.p_len)[0].astype(e_p.dtype))
        p = self.passage_rnn(jnp.concatenate(parts, -1), jnp.sum(p_mask, 1), deterministic=deterministic,
                             rngs=rngs)
        q = self.question_rnn(e_q, jnp.sum(q_mask, 1), deterministic=deterministic, rngs=rngs)
        b = masked_softmax(self.self_attn(q)[..., 0], q_mask)
        q_vec = jnp.einsum("bq,bqd->bd", b, q.astype(jnp.float32)).astype(q.dtype)
        out = jnp.concatenate([p * self.start_proj(q_vec)[:, None], p * self.end_proj(q_vec)[:, None]], -1)
        return scatter_passage(out, passage_mask)
