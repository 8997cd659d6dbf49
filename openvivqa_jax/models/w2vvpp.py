"""W2VV++: a sentence encoder into a visual feature space (Dong et al. 2018, Word2VisualVec; Li et al. 2019,
W2VV++), as ``papers/cross_lingual_caption_eval.md`` uses it for CLinRel and CMedRel.

A sentence of word ids is encoded three ways in parallel, the outputs concatenated and mapped by an MLP into the
visual feature space:

* **bag-of-words**: the count of every vocabulary word, ``(batch, vocab)``;
* **mean of word vectors**: the mean of the sentence's word embeddings, ``(batch, word_dim)``;
* **GRU**: the final hidden state of a one-layer GRU over the word embeddings, read at the last real word,
  ``(batch, gru_dim)``.

Training uses the improved marginal ranking loss of VSE++ (Faghri et al. 2018) with the hardest negatives in the
batch (:func:`vse_hardest_negative_loss`), on cosine similarities, as W2VV++ does. :func:`recall_at_k` scores
text-to-image and image-to-text retrieval.

Arrays: ``ids`` ``(batch, max_words)`` int32, 0 = padding, right-padded; output ``(batch, visual_dim)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from openvivqa_jax.models.layers import Dropout, dense

__all__ = ["W2VVPP", "cosine_matrix", "vse_hardest_negative_loss", "recall_at_k", "PAD_ID", "UNK_ID"]

#: Word id of padding and of a word outside the vocabulary.
PAD_ID, UNK_ID = 0, 1


class W2VVPP(nnx.Module):
    """The W2VV++ text encoder (module doc).

    Args:
      vocab_size: ``V`` words including padding (0) and unknown (1); the bag-of-words has ``V`` entries
        (padding never counts).
      word_dim: width of the word vectors (learned); gru_dim: width of the GRU.
      mlp_dims: hidden widths of the MLP (ReLU, dropout); the last layer maps to ``visual_dim`` (linear).
      visual_dim: width of the visual feature space.
      dropout: dropout rate on the concatenated sentence vector and the MLP's hidden layers.
      rngs: parameter RNGs.
    """

    def __init__(self, *, vocab_size: int, word_dim: int, gru_dim: int, mlp_dims: Sequence[int], visual_dim: int,
                 dropout: float, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.vocab_size, self.gru_dim, self.visual_dim = int(vocab_size), int(gru_dim), int(visual_dim)
        self.embedding = nnx.Embed(vocab_size, word_dim, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        cell = nnx.GRUCell(word_dim, gru_dim, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.gru = nnx.RNN(cell, return_carry=True, rngs=False)
        dims = [self.vocab_size + int(word_dim) + self.gru_dim, *[int(d) for d in mlp_dims], self.visual_dim]
        self.mlp = nnx.List([dense(a, b, rngs, dtype) for a, b in zip(dims[:-1], dims[1:])])
        self.dropout = Dropout(dropout)

    def sentence_vector(self, ids: jax.Array) -> jax.Array:
        """``ids`` ``(batch, max_words)`` -> the concatenated encoders ``(batch, vocab + word_dim + gru_dim)``.

        An empty sentence (all padding) gives zeros for the bag-of-words and the mean, and the GRU's state after
        one padding step."""
        mask = ids != PAD_ID
        bow = jnp.zeros((ids.shape[0], self.vocab_size), jnp.float32).at[
            jnp.arange(ids.shape[0])[:, None], ids].add(mask.astype(jnp.float32))
        emb = self.embedding(ids)
        m = mask[..., None].astype(emb.dtype)
        mean = (emb * m).sum(1) / jnp.maximum(m.sum(1), 1.0)
        lengths = jnp.maximum(mask.sum(-1), 1).astype(jnp.int32)
        h0 = jnp.zeros((ids.shape[0], self.gru_dim), jnp.float32)
        h, _ = self.gru(emb, initial_carry=h0, seq_lengths=lengths)
        return jnp.concatenate([bow, mean.astype(jnp.float32), h.astype(jnp.float32)], -1)

    def __call__(self, ids: jax.Array, *, deterministic: bool = True, rngs: nnx.Rngs | None = None) -> jax.Array:
        """``ids`` ``(batch, max_words)`` int32 -> ``(batch, visual_dim)`` float32 (not normalized)."""
        x = self.dropout(self.sentence_vector(ids), deterministic=deterministic, rngs=rngs)
        for i, layer in enumerate(self.mlp):
            x = layer(x)
            if i < len(self.mlp) - 1:
                x = self.dropout(jax.nn.relu(x), deterministic=deterministic, rngs=rngs)
        return x.astype(jnp.float32)


def _unit(x, eps: float = 1e-8):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def cosine_matrix(text: jax.Array, visual: jax.Array) -> jax.Array:
    """Cosine similarities ``(n_text, n_visual)`` of ``text`` ``(n_text, d)`` and ``visual`` ``(n_visual, d)``."""
    return _unit(text) @ _unit(visual).T


def vse_hardest_negative_loss(text: jax.Array, visual: jax.Array, margin: float,
                              same: jax.Array | None = None, hardest: bool | jax.Array = True) -> jax.Array:
    """VSE++'s max-of-hinges loss (Faghri et al. 2018, eq. 5) over a batch of matching pairs.

    With ``s = cosine_matrix(text, visual)`` and ``s[i, i]`` the score of pair ``i``, the loss of pair ``i`` is
    ``max_j [margin + s[i, j] - s[i, i]]_+ + max_j [margin + s[j, i] - s[i, i]]_+`` over the negatives ``j``:
    the hardest negative image for text ``i`` and the hardest negative text for image ``i``.

    Args:
      text, visual: ``(batch, d)``: row ``i`` of both is a matching pair.
      margin: the hinge margin ``alpha``.
      same: ``(batch, batch)`` bool, True where pair ``j`` is no negative of pair ``i`` (the same image, or the
        same text: a duplicate is not a mistake); the diagonal is always excluded. None: only the diagonal.
      hardest: True: the max over the negatives (VSE++); False: their sum (VSE0, Faghri et al. eq. 3), which
        VSE++ trains with first when the max alone does not get going (a scalar bool array is accepted under jit).

    Returns:
      The mean over the batch of the per-pair loss, a float32 scalar.
    """
    s = cosine_matrix(text, visual)
    b = s.shape[0]
    excluded = jnp.eye(b, dtype=bool) if same is None else (same | jnp.eye(b, dtype=bool))
    pos = jnp.diagonal(s)
    cost_image = jnp.where(excluded, 0.0, jnp.maximum(0.0, margin + s - pos[:, None]))  # text i vs image j
    cost_text = jnp.where(excluded, 0.0, jnp.maximum(0.0, margin + s - pos[None, :]))   # text j vs image i
    hard = cost_image.max(1) + cost_text.max(0)
    total = cost_image.sum(1) + cost_text.sum(0)
    return jnp.where(hardest, hard, total).mean()


def recall_at_k(sims: np.ndarray, text_image: np.ndarray, ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    """Retrieval recall@K in both directions.

    Args:
      sims: ``(n_text, n_image)`` similarities of every text to every image.
      text_image: ``(n_text,)`` int, the column of each text's own image.
      ks: the cut-offs.

    Returns:
      ``{"t2i_R@K": ..., "i2t_R@K": ..., "rsum": ...}`` in [0, 1] (``rsum``: their sum). Text to image: the
      share of texts whose image ranks in the top K of the ``n_image`` images; image to text: the share of images
      (those with at least one text) one of whose texts ranks in the top K of the ``n_text`` texts. A rank is
      the number of candidates scored strictly higher than the right one (ties favour the right one).
    """
    sims = np.asarray(sims, np.float64)
    text_image = np.asarray(text_image, np.int64)
    n_text = sims.shape[0]
    right = sims[np.arange(n_text), text_image]
    t2i_rank = (sims > right[:, None]).sum(1)
    i2t_best = {}
    for j in np.unique(text_image):
        col = sims[:, j]
        own = np.flatnonzero(text_image == j)
        i2t_best[int(j)] = int(min((col > col[t]).sum() for t in own))
    i2t_rank = np.asarray(list(i2t_best.values()))
    out: dict[str, float] = {}
    for k in ks:
        out[f"t2i_R@{k}"] = float(np.mean(t2i_rank < k))
    for k in ks:
        out[f"i2t_R@{k}"] = float(np.mean(i2t_rank < k))
    out["rsum"] = float(sum(out.values()))
    return out
