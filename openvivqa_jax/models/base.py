"""The interface every model implements, and the losses.

Generators (FST, QuMLAG, MLPAG, M4C) implement :class:`AnswerGenerator` (the interface
:mod:`openvivqa_jax.vqa.decoding` is typed against) and teacher forcing::

    encode(batch, deterministic, rngs) -> enc            # dict of arrays, batch-major
    __call__(batch, deterministic, rngs) -> logits       # teacher forcing, (batch, ans_len, V + N)
    prepare_decode(enc) -> dec                           # per-example constants (cross K/V, prefix cache)
    init_cache(batch_size, max_len) -> cache             # self-attention KV cache
    decode_step(dec, ids_t, t, cache) -> (logits (batch, V + N), cache)

``dec`` and ``cache`` are pytrees whose leaves all have ``batch`` as the leading axis, so beam search
can tile and reorder them. Classifiers (SAAA, MCAN, LoRRA) set ``is_generator = False`` and return
``(batch, num_answers [+ N])`` logits from ``__call__``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.layers import NEG_INF

__all__ = ["AnswerGenerator", "GeneratorModel", "MemoryDecoderGenerator", "pointer_softmax_loss",
           "pointer_bce_loss", "extended_targets"]

#: A pytree of arrays whose leaves all have ``batch`` (or ``batch * beam``) as the leading axis.
BatchTree = Any


@runtime_checkable
class AnswerGenerator(Protocol):
    """What :func:`~openvivqa_jax.vqa.decoding.greedy_search` and :func:`~openvivqa_jax.vqa.decoding.beam_search`
    need of a model: encode once, then one cached decoder step at a time over the extended output space
    (``V`` vocabulary pieces then ``N`` OCR slots, the pointer network of M4C, Hu et al. 2020 §3.3).

    Every generator of the zoo (:class:`GeneratorModel` subclasses: FST, QuMLAG, MLPAG, M4C) satisfies it;
    ``isinstance(model, AnswerGenerator)`` checks the methods' presence only.
    """

    def encode(self, batch: dict, *, deterministic: bool = True, rngs: nnx.Rngs | None = None) -> dict:
        """Encodes the inputs once: a dict of batch-major arrays that holds at least ``ocr_mask``
        ``(batch, N)`` bool (decoding reads ``batch`` and ``N`` from it)."""
        ...

    def prepare_decode(self, enc: dict) -> BatchTree:
        """Per-example decoding constants (cross-attention K/V, M4C's prefix), computed once from
        :meth:`encode`'s output; every leaf has ``batch`` as its leading axis (beam search repeats it)."""
        ...

    def init_cache(self, batch_size: int, max_len: int) -> BatchTree:
        """The zeroed self-attention KV cache for ``batch_size`` rows and ``max_len`` steps; every leaf
        has ``batch_size`` as its leading axis (beam search reorders it by parent beam)."""
        ...

    def decode_step(self, dec: BatchTree, ids_t: jax.Array, t: jax.Array,
                    cache: BatchTree) -> tuple[jax.Array, BatchTree]:
        """One step: the previous ids ``ids_t`` ``(batch,)`` int32 (``V + j`` copies OCR slot ``j``) at step
        ``t`` (scalar int32) -> ``(logits (batch, V + N) float32, updated cache)``."""
        ...


class GeneratorModel(nnx.Module):
    """Base class of answer-generating models (see the module docstring for the interface)."""

    is_generator = True
    #: Whether answers may copy OCR tokens (a pointer network); False for FST and QuMLAG.
    copies_ocr = True
    #: Keys of :meth:`prepare_decode`'s dict whose leaves beam search may keep once per example instead of once
    #: per beam (``beam_search(share_memory=True)``): the model's ``decode_step`` must accept them with
    #: ``batch`` rows while the cache and ids have ``batch * K``. Empty for M4C (its prefix keys/values are
    #: attended together with the per-beam cache).
    beam_shared_keys: tuple[str, ...] = ()
    vocab_size: int
    num_ocr: int

    def _set_sizes(self, cfg, vocab_size: int) -> None:
        """Sets ``vocab_size`` (``V``), ``num_ocr`` (``N``, from ``cfg.num_ocr``) and ``d_model`` (``d``) from the
        model's config ``cfg`` (``config.model``)."""
        self.vocab_size = vocab_size
        self.num_ocr = cfg.num_ocr
        self.d_model = cfg.d_model

    def __call__(self, batch, *, deterministic=True, rngs=None):
        """Teacher-forced logits ``(batch, ans_len, V + N)`` float32."""
        enc = self.encode(batch, deterministic=deterministic, rngs=rngs)
        return self.decode_train(enc, batch["decoder_in"], deterministic=deterministic, rngs=rngs)

    def decoder_memory_layout(self, num_vision: int, num_ocr: int) -> tuple[int, int] | None:
        """Where the image's ``num_vision`` grid cells / regions sit in the answer decoder's cross-attention
        memory: ``(start, stop)``, or None for a model whose decoder attends to no such memory (M4C's
        multimodal transformer decodes over one joint sequence)."""
        return None


class MemoryDecoderGenerator(GeneratorModel):
    """A generator whose ``encode`` returns a fused memory for the transformer answer decoder
    (:class:`~openvivqa_jax.models.decoder.AnswerDecoder`): FST, QuMLAG and MLPAG.

    Subclasses set ``self.decoder`` and return ``{memory (batch, M, d), memory_mask (batch, M),
    ocr_feats (batch, N, d), ocr_mask (batch, N)}`` from ``encode``; the decoding methods below are the
    generator interface of :mod:`openvivqa_jax.models.base` over that memory (the same as MLPAG's).
    """

    decoder: nnx.Module
    #: The memory's cross-attention keys/values and mask are the same for every beam of an example; the
    #: decoder's cross-attention reads one copy for all of them (``MultiHeadAttention.attend_heads``).
    beam_shared_keys = ("cross_kv", "memory_mask")

    def decode_train(self, enc, decoder_in, *, deterministic=True, rngs=None):
        """Teacher-forced logits ``(batch, ans_len, V + N)`` float32 (eq. 7 / eq. 8), the encoder's
        ``first_logit_bias`` ``(batch, V)`` (MLPAG's verifier) added to the first position's when it gives one."""
        logits = self.decoder(decoder_in, enc["memory"], enc["memory_mask"], enc["ocr_feats"], enc["ocr_mask"],
                              deterministic=deterministic, rngs=rngs, input_bias=enc.get("decoder_bias"))
        if enc.get("first_logit_bias") is not None:
            logits = logits.at[:, 0].add(_pad_to(enc["first_logit_bias"], logits.shape[-1]))
        return logits

    def prepare_decode(self, enc):
        """Per-example decoding constants, computed once: cross-attention K/V of the memory (head-major),
        and with the pointer network the OCR tokens' projections (``AnswerDecoder.precompute_ocr``: the
        copied tokens' input features and the pointer keys) instead of the OCR features themselves, and the
        encoder's ``decoder_bias`` ``(batch, d)`` when it gives one."""
        ocr = self.decoder.precompute_ocr(enc["ocr_feats"])
        dec = {"cross_kv": self.decoder.precompute_heads(enc["memory"]), "memory_mask": enc["memory_mask"],
               "ocr_feats": None if ocr else enc["ocr_feats"], "ocr_mask": enc["ocr_mask"], **ocr}
        if enc.get("decoder_bias") is not None:  # MLPAG's question_to_decoder: added to every step's input
            dec["decoder_bias"] = enc["decoder_bias"]
        if enc.get("first_logit_bias") is not None:  # MLPAG's verifier: added to the first step's logits
            dec["first_logit_bias"] = enc["first_logit_bias"]
        return dec

    def init_cache(self, batch_size: int, max_len: int):
        """Decoder self-attention KV cache for ``max_len`` steps."""
        return self.decoder.init_cache(batch_size, max_len)

    def decode_step(self, dec, ids_t, t, cache):
        """One cached step: ``(logits (batch, V + N), cache)``; at step 0 with ``first_logit_bias`` added (as
        :meth:`decode_train`)."""
        logits, cache = self.decoder.step(ids_t, t, cache, dec["cross_kv"], dec["memory_mask"], dec["ocr_feats"],
                                          dec["ocr_mask"], ocr_proj=dec.get("ocr_proj"),
                                          ocr_keys=dec.get("ocr_keys"), input_bias=dec.get("decoder_bias"))
        if dec.get("first_logit_bias") is not None:
            bias = _pad_to(dec["first_logit_bias"], logits.shape[-1])
            logits = logits + jnp.where(t == 0, 1.0, 0.0) * bias
        return logits, cache

    def decoder_memory_layout(self, num_vision: int, num_ocr: int) -> tuple[int, int] | None:
        """``(0, num_vision)``: FST's memory is ``x_f`` over the grid (then optionally the question) and
        QuMLAG's ``[x_I; x_Q]``, so the image comes first. MLPAG overrides it."""
        return (0, num_vision)

    def answer_attention(self, batch: dict, answer_ids: jax.Array, bos_id: int) -> dict:
        """The answer decoder's cross-attention while it reads ``answer_ids`` (teacher forcing from BOS),
        with the image's cells for drawing it (prediction's heat map).

        Args:
          batch: the model inputs of ``batch`` examples.
          answer_ids: ``(batch, steps)`` int32 decoded ids over ``V + N``.
          bos_id: the tokenizer's BOS id (the first decoder input).

        Returns:
          ``{"weights": (batch, steps, memory) float32`` (mean over layers and heads; rows sum to 1 over the
          unmasked memory), ``"boxes": (batch, num_vision, 4)`` the image cells' xyxy boxes in ``[0, 1]``,
          ``"mask": (batch, num_vision)`` valid cells``}``; :meth:`decoder_memory_layout` says which memory
          positions are the cells.
        """
        enc = self.encode(batch)
        vis = self.vision(batch)
        ids = answer_ids
        dec_in = jnp.concatenate([jnp.full(ids[:, :1].shape, bos_id, ids.dtype), ids[:, :-1]], 1)
        _, weights = self.decoder(dec_in, enc["memory"], enc["memory_mask"], enc["ocr_feats"], enc["ocr_mask"],
                                  return_attention=True, input_bias=enc.get("decoder_bias"))
        return {"weights": jnp.mean(jnp.stack(weights, 1), axis=(1, 2)), "boxes": vis["boxes"], "mask": vis["mask"]}


def _pad_to(bias: jax.Array, width: int) -> jax.Array:
    """``(batch, V)`` -> ``(batch, width)``, zeros for the OCR slots past ``V``."""
    return jnp.pad(bias.astype(jnp.float32), ((0, 0), (0, width - bias.shape[-1])))


def extended_targets(target_vocab: jax.Array, target_ocr: jax.Array, vocab_size: int) -> jax.Array:
    """Multi-hot positive set over ``V + N``.

    Args:
      target_vocab: ``(batch, ans_len)`` int32 positive piece or -1.
      target_ocr: ``(batch, ans_len, N)`` bool positive OCR slots.
      vocab_size: ``V``.

    Returns:
      ``(batch, ans_len, V + N)`` bool.
    """
    vocab_hot = jax.nn.one_hot(jnp.where(target_vocab >= 0, target_vocab, vocab_size), vocab_size + 1,
                               dtype=bool)[..., :vocab_size]
    return jnp.concatenate([vocab_hot, target_ocr.astype(bool)], axis=-1)


def pointer_softmax_loss(logits, target_vocab, target_ocr, target_mask, prefer_copy: bool = False):
    """Softmax cross-entropy over the extended space with a positive *set* per step.

    ``loss_t = logsumexp(all logits) - logsumexp(positive logits)``: the negative log of the total
    probability of the positives (any matching OCR slot, or the piece). Steps with an empty positive
    set or ``target_mask`` False do not count.

    With ``prefer_copy`` a step that has OCR positives keeps only those: the vocabulary piece of a
    copyable word is not a target. Otherwise the softmax can put all the mass on the piece of a name
    seen in training and the pointer network never learns to copy (measured on the synthetic set:
    1.6% of unseen shop names copied without it).

    Args:
      logits: ``(batch, ans_len, V + N)`` float32 (masked OCR slots already ``NEG_INF``).
      target_vocab, target_ocr, target_mask: as built by :class:`~openvivqa_jax.text.AnswerVocab`.
      prefer_copy: see above.

    Returns:
      ``(mean loss over counted steps, dict(loss, token_accuracy, num_tokens))``.
    """
    V = logits.shape[-1] - target_ocr.shape[-1]
    if prefer_copy:
        target_vocab = jnp.where(target_ocr.any(-1), -1, target_vocab)
    pos = extended_targets(target_vocab, target_ocr, V)
    has_pos = pos.any(-1)
    mask = target_mask.astype(bool) & has_pos
    lse_all = jax.nn.logsumexp(logits, axis=-1)
    lse_pos = jax.nn.logsumexp(jnp.where(pos, logits, NEG_INF), axis=-1)
    per = jnp.where(mask, lse_all - lse_pos, 0.0)
    n = jnp.maximum(mask.sum(), 1)
    pred = jnp.argmax(logits, -1)
    correct = jnp.take_along_axis(pos, pred[..., None], -1)[..., 0] & mask
    return per.sum() / n, {"loss": per.sum() / n, "token_accuracy": correct.sum() / n, "num_tokens": mask.sum()}


def pointer_bce_loss(logits, target_vocab, target_ocr, target_mask, ocr_mask=None):
    """M4C's multi-label binary cross-entropy over ``V + N`` (Hu et al. 2020, eq. in §3.3).

    Each output unit is an independent sigmoid; positives are the step's positive set. Padding OCR
    slots (``ocr_mask`` False) are excluded. The loss is summed over units and averaged over counted
    steps, as in M4C.

    Returns:
      ``(loss, dict(loss, token_accuracy, num_tokens))``.
    """
    V = logits.shape[-1] - target_ocr.shape[-1]
    pos = extended_targets(target_vocab, target_ocr, V).astype(jnp.float32)
    unit_mask = jnp.ones(logits.shape[-1], bool)[None, None]
    if ocr_mask is not None:
        unit_mask = jnp.concatenate(
            [jnp.ones(ocr_mask.shape[:1] + (V,), bool), ocr_mask.astype(bool)], -1)[:, None, :]
    safe = jnp.where(unit_mask, logits, 0.0)
    bce = jnp.maximum(safe, 0) - safe * pos + jnp.log1p(jnp.exp(-jnp.abs(safe)))
    bce = jnp.where(unit_mask, bce, 0.0).sum(-1)
    mask = target_mask.astype(bool) & (pos.sum(-1) > 0)
    n = jnp.maximum(mask.sum(), 1)
    loss = jnp.where(mask, bce, 0.0).sum() / n
    pred = jnp.argmax(logits, -1)
    correct = (jnp.take_along_axis(pos, pred[..., None], -1)[..., 0] > 0) & mask
    return loss, {"loss": loss, "token_accuracy": correct.sum() / n, "num_tokens": mask.sum()}
