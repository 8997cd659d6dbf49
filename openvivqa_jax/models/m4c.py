"""M4C: Multimodal Multi-Copy Mesh (Hu et al., CVPR 2020), the generator baseline of paper §5.1.

Components (Hu et al. §3):

* Question: a transformer text encoder trained from scratch (BERT-like): piece +
  position embeddings (:class:`~openvivqa_jax.models.embeddings.QuestionEmbedding`), ``num_text_layers``
  self-attention blocks with the question padding masked, a final LayerNorm. ``(batch, l, d)``. Or, as M4C,
  a pretrained BERT / RoBERTa (PhoBERT) checkpoint's first ``model.text_encoder.num_layers`` layers
  (``model.text_encoder.kind = "bert"`` with ``model.text_encoder.path``; :mod:`openvivqa_jax.models.bert`),
  fine-tuned, over the question ids of the checkpoint's own tokenizer (batch keys ``question_bert`` /
  ``question_bert_mask``), projected to ``d`` when its width differs.
* Objects: ``x_obj = LN(W_1 x_fr) + LN(W_2 x_b)`` (region features and boxes; ``VisionEncoder``).
* OCR tokens: ``x_ocr = LN(W_3 x_txt + W_4 x_app + W_5 x_phoc + ...) + LN(W_6 x_b)`` (``OcrEmbedding``):
  the text embedding (mean of the token's pieces), PHOC (:mod:`openvivqa_jax.data.phoc`), the appearance
  pooled under the box, optional extra features, and the box.
* One multimodal transformer (MMT, ``num_mmt_layers`` blocks) over ``[question; objects; OCR; previous
  outputs]`` with a **prefix-LM mask** (:func:`prefix_lm_mask`): a prefix position (question, object, OCR)
  attends to the valid prefix positions only; decoder position ``i`` attends to the valid prefix positions
  and to decoder positions ``j <= i``. The prefix therefore never sees a decoder token (the authors' code
  let the encoder see the decoder inputs, leaking future answer tokens into every step).
* Previous outputs (M4C's ``PrevPredEmbeddings``): a vocabulary piece ``k`` enters as
  ``LN_a(w_k)`` where ``w_k`` is row ``k`` of the vocabulary classifier (tied weights); a copied OCR slot ``j``
  enters as ``LN_o(x_ocr_j)``, that token's OCR embedding (the MMT input, as in M4C's code); plus
  ``LN(position + type)`` with type 0 for a piece, 1 for a copy.
* Output: vocabulary logits ``W_v h + b`` and the dynamic pointer network over the MMT's OCR outputs
  ``z_ocr``: ``(W_h h + b_h)(W_S z_ocr + b_S)^T / sqrt(d)`` (OpenViVQA eq. 11; M4C §3.3), concatenated
  (eq. 12). This is :meth:`AnswerDecoder.output_logits <openvivqa_jax.models.decoder.AnswerDecoder.output_logits>`,
  shared, not copied.

Loss: M4C's multi-label BCE (``train.loss = "bce"``; :func:`~openvivqa_jax.models.base.pointer_bce_loss`)
or the softmax over the positive set (``"softmax"``).

Cached decoding: ``prepare_decode`` runs the prefix once through the MMT and keeps each layer's prefix
keys/values ``(batch, P, H, head_dim)``; ``decode_step`` appends one decoder position per step with a
per-layer self cache. Because the prefix never attends to decoder positions, this equals the full recompute
(tested), and the OCR outputs used by the pointer are fixed per example.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.base import GeneratorModel
from openvivqa_jax.models.bert import BertEncoder, read_bert_settings, text_encoder_folder
from openvivqa_jax.models.decoder import AnswerDecoder
from openvivqa_jax.models.embeddings import OcrEmbedding, QuestionEmbedding, vision_encoder
from openvivqa_jax.models.layers import Dropout, EncoderBlock, call_block, dense, layer_norm

__all__ = ["M4C", "prefix_lm_mask", "remat_plan"]


def remat_plan(spec, num_text: int, num_mmt: int) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """Which of M4C's blocks run under ``nnx.remat`` (recomputed in the backward pass instead of keeping their
    activations; :func:`~openvivqa_jax.models.layers.call_block`), from ``config.model.remat_blocks`` when it is
    set (a string), else ``config.model.remat`` (a bool).

    Args:
      spec: ``True`` or ``"all"`` (every text and MMT block, the behaviour of ``remat = True``), ``False`` or
        ``"none"``, ``"mmt"`` (the MMT blocks only: over ``P + L`` positions they hold most of the activation
        memory, while the text blocks run over the ``l`` question tokens), ``"text"``, or a list of block
        indices into ``[text_0 .. text_{num_text-1}, mmt_0 .. mmt_{num_mmt-1}]`` (also as a comma-separated
        string, ``"0,13"``).
      num_text, num_mmt: the numbers of text and MMT blocks.

    Returns:
      ``(text flags (num_text,), mmt flags (num_mmt,))``.

    Raises:
      ValueError: for another value or an index outside ``[0, num_text + num_mmt)``.
    """
    n = num_text + num_mmt
    named = {True: range(n), "all": range(n), False: (), "none": (), "mmt": range(num_text, n),
             "text": range(num_text)}
    if isinstance(spec, str) and spec not in named:
        try:
            spec = [int(x) for x in spec.split(",")]
        except ValueError:
            pass
    if isinstance(spec, (bool, str)) and spec in named:
        chosen = set(named[spec])
    elif isinstance(spec, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in spec):
        chosen = set(spec)
        if any(i < 0 or i >= n for i in chosen):
            raise ValueError(f"model.remat_blocks {list(spec)}: block indices must lie in [0, {n}) (text blocks "
                             f"0..{num_text - 1}, MMT blocks {num_text}..{n - 1})")
    else:
        raise ValueError(f"model.remat_blocks/remat must be 'all', 'none', 'mmt', 'text', block indices such as "
                         f"'0,13', or true/false; got {spec!r}")
    return tuple(i in chosen for i in range(num_text)), tuple(num_text + i in chosen for i in range(num_mmt))


def prefix_lm_mask(prefix_mask: jax.Array, dec_len: int) -> jax.Array:
    """The MMT attention mask over ``[prefix; decoder]``.

    Args:
      prefix_mask: ``(batch, P)`` bool, valid prefix positions (question, objects, OCR).
      dec_len: ``L`` decoder positions.

    Returns:
      ``(batch, 1, P + L, P + L)`` bool, ``[query, key]``: every query sees the valid prefix keys; a prefix
      query sees no decoder key; decoder query ``i`` sees decoder keys ``j <= i``.
    """
    b, p = prefix_mask.shape
    pm = prefix_mask.astype(bool)[:, None, :]
    top = jnp.concatenate([jnp.broadcast_to(pm, (b, p, p)), jnp.zeros((b, p, dec_len), bool)], -1)
    causal = jnp.tril(jnp.ones((dec_len, dec_len), bool))
    bottom = jnp.concatenate([jnp.broadcast_to(pm, (b, dec_len, p)),
                              jnp.broadcast_to(causal[None], (b, dec_len, dec_len))], -1)
    return jnp.concatenate([top, bottom], 1)[:, None]


class M4C(GeneratorModel):
    """M4C. See the module docstring.

    Args:
      cfg: ``config.model`` (d_model, num_heads, ffn_dim, dropout, num_text_layers, num_mmt_layers,
        max_question_len, max_answer_len, num_ocr, phoc_dim, ocr_features, ocr_extra_features, vision.*,
        text_encoder.kind / path / num_layers / freeze: the pretrained question encoder, module doc).
      vocab_size: ``V``.
      rngs: parameter RNGs.
      dtype: compute dtype.
    """

    #: The pointer network is on (read by the shared ``output_logits``).
    use_pointer = True
    output_logits = AnswerDecoder.output_logits

    def __init__(self, cfg, vocab_size: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        d = cfg.d_model
        self._set_sizes(cfg, vocab_size)
        self.remat_text, self.remat_mmt = remat_plan(cfg.get("remat_blocks") or cfg.get("remat", False),
                                                     cfg.num_text_layers, cfg.num_mmt_layers)
        blk = dict(d_model=d, num_heads=cfg.num_heads, ffn_dim=cfg.ffn_dim, dropout=cfg.dropout, rngs=rngs,
                   dtype=dtype)
        bert_folder = text_encoder_folder(cfg)
        self.uses_bert = bert_folder is not None
        if self.uses_bert:
            settings = read_bert_settings(bert_folder)
            self.text_bert = BertEncoder(settings, int(cfg.text_encoder.get("num_layers", 3)), rngs=rngs, dtype=dtype)
            self.text_proj = dense(settings.hidden_size, d, rngs, dtype) if settings.hidden_size != d else None
        else:
            self.question = QuestionEmbedding(vocab_size=vocab_size, d_model=d, max_len=cfg.max_question_len,
                                              dropout=cfg.dropout, rngs=rngs, dtype=dtype)
            self.text_layers = nnx.List([EncoderBlock(**blk) for _ in range(cfg.num_text_layers)])
            self.text_norm = layer_norm(d, rngs, dtype)
        self.vision = vision_encoder(cfg, rngs=rngs, dtype=dtype)
        self.ocr = OcrEmbedding(vocab_size=vocab_size, d_model=d, phoc_dim=cfg.phoc_dim,
                                appearance_dim=self.vision.raw_dim, features=tuple(cfg.ocr_features),
                                extra_dims=dict(cfg.get("ocr_extra_features", {}) or {}), dropout=cfg.dropout,
                                rngs=rngs, dtype=dtype)
        self.mmt_layers = nnx.List([EncoderBlock(**blk) for _ in range(cfg.num_mmt_layers)])
        self.mmt_norm = layer_norm(d, rngs, dtype)
        self.prev_vocab_norm = layer_norm(d, rngs, dtype)
        self.prev_ocr_norm = layer_norm(d, rngs, dtype)
        self.dec_pos = nnx.Embed(cfg.max_answer_len, d, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.dec_type = nnx.Embed(2, d, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.dec_emb_norm = layer_norm(d, rngs, dtype)
        self.vocab_head = dense(d, vocab_size, rngs, dtype)
        self.ptr_query = dense(d, d, rngs, dtype)
        self.ptr_key = dense(d, d, rngs, dtype)
        self.dropout = Dropout(cfg.dropout)

    # ------------------------------------------------------------------ encoder
    def encode(self, batch, *, deterministic=True, rngs=None):
        """Prefix embeddings. Returns ``{prefix (batch, P, d), prefix_mask (batch, P), ocr_in (batch, N, d),
        ocr_mask (batch, N)}`` with ``P = l + s + N`` in the order question, objects, OCR."""
        kw = dict(deterministic=deterministic, rngs=rngs)
        if self.uses_bert:
            q_mask = batch["question_bert_mask"].astype(bool)
            q = self.text_bert(batch["question_bert"], q_mask, **kw)
            if self.text_proj is not None:
                q = self.text_proj(q)
        else:
            q_mask = batch["question_mask"].astype(bool)
            q = self.question(batch["question"], **kw)
            for i, blk in enumerate(self.text_layers):
                q = call_block(blk, q, q_mask, remat=self.remat_text[i], **kw)
            q = self.text_norm(q)
        vis = self.vision(batch, **kw)
        ocr = self.ocr(batch, vis, **kw)
        ocr_mask = batch["ocr_mask"].astype(bool)
        prefix = jnp.concatenate([q, vis["feats"].astype(q.dtype), ocr.astype(q.dtype)], 1)
        prefix_mask = jnp.concatenate([q_mask, vis["mask"].astype(bool), ocr_mask], 1)
        return {"prefix": prefix, "prefix_mask": prefix_mask, "ocr_in": ocr, "ocr_mask": ocr_mask}

    def embed_previous(self, ids: jax.Array, positions: jax.Array, ocr_in: jax.Array, *, deterministic=True,
                       rngs=None) -> jax.Array:
        """Decoder inputs (M4C ``PrevPredEmbeddings``).

        Args:
          ids: ``(batch, len)`` extended ids (``>= V``: OCR slot ``id - V``).
          positions: ``(len,)`` int32 step indices.
          ocr_in: ``(batch, N, d)`` OCR embeddings.

        Returns:
          ``(batch, len, d)``: ``LN_a(W_v[:, k])`` or ``LN_o(x_ocr_j)``, plus ``LN(pos + type)``.
        """
        V = self.vocab_size
        is_ocr = ids >= V
        table = self.vocab_head.kernel[...]  # (d, V): row k of the classifier is column k here
        tok = jnp.take(table, jnp.where(is_ocr, 0, ids), axis=1)  # (d, batch, len)
        tok = self.prev_vocab_norm(jnp.moveaxis(tok, 0, -1).astype(ocr_in.dtype))
        slot = jnp.clip(ids - V, 0, self.num_ocr - 1)
        copied = jnp.take_along_axis(self.prev_ocr_norm(ocr_in), slot[..., None], axis=1)
        raw = jnp.where(is_ocr[..., None], copied, tok)
        emb = self.dec_emb_norm(self.dec_pos(positions)[None] + self.dec_type(is_ocr.astype(jnp.int32)))
        return self.dropout(raw + emb, deterministic=deterministic, rngs=rngs)

    def mmt(self, enc, decoder_in, *, deterministic=True, rngs=None) -> jax.Array:
        """The MMT over ``[prefix; previous outputs]`` with the prefix-LM mask.

        Args:
          enc: from :meth:`encode`; decoder_in: ``(batch, L)`` teacher-forced extended ids.

        Returns:
          ``(batch, P + L, d)`` layer-normed outputs.
        """
        kw = dict(deterministic=deterministic, rngs=rngs)
        L = decoder_in.shape[1]
        dec = self.embed_previous(decoder_in, jnp.arange(L), enc["ocr_in"], **kw)
        x = jnp.concatenate([enc["prefix"], dec.astype(enc["prefix"].dtype)], 1)
        mask = prefix_lm_mask(enc["prefix_mask"], L)
        key_mask = jnp.concatenate([enc["prefix_mask"], jnp.ones(decoder_in.shape, bool)], 1)
        for i, blk in enumerate(self.mmt_layers):
            x = call_block(blk, x, key_mask, attn_mask=mask, remat=self.remat_mmt[i], **kw)
        return self.mmt_norm(x)

    def decode_train(self, enc, decoder_in, *, deterministic=True, rngs=None):
        """Teacher-forced logits ``(batch, L, V + N)`` float32."""
        x = self.mmt(enc, decoder_in, deterministic=deterministic, rngs=rngs)
        P, N = enc["prefix"].shape[1], self.num_ocr
        return self.output_logits(x[:, P:], x[:, P - N:P], enc["ocr_mask"])

    # ------------------------------------------------------------------ cached decoding
    def prepare_decode(self, enc):
        """Runs the prefix once: per MMT layer its prefix keys/values, head-major ``(batch, H, head_dim, P)``
        (:meth:`~openvivqa_jax.models.layers.MultiHeadAttention.project_kv_heads`), and the pointer keys of
        the OCR outputs ``ptr_key(ocr_out)`` ``(batch, N, d)``, which are fixed per example."""
        x, pm = enc["prefix"], enc["prefix_mask"]
        kvs = []
        for blk in self.mmt_layers:
            kvs.append(blk.attn.project_kv_heads(blk.norm_q(x)))
            x = blk(x, pm)
        N = self.num_ocr
        ocr_out = self.mmt_norm(x)[:, x.shape[1] - N:]
        return {"prefix_kv": kvs, "prefix_mask": pm, "ocr_keys": self.ptr_key(ocr_out), "ocr_in": enc["ocr_in"],
                "ocr_mask": enc["ocr_mask"]}

    def init_cache(self, batch_size: int, max_len: int, dtype: Any = jnp.float32):
        """Per MMT layer ``{"k", "v"}`` of ``(batch, H, head_dim, max_len)`` zeros (decoder positions, head-major)."""
        out = []
        for blk in self.mmt_layers:
            shape = (batch_size, blk.attn.num_heads, blk.attn.head_dim, max_len)
            out.append({"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)})
        return out

    def decode_step(self, dec, ids_t, t, cache):
        """One decoder position ``t`` through the MMT: ``(logits (batch, V + N), cache)``.

        Decoder position ``t`` attends to the valid prefix (its cached keys/values) and to the cached
        decoder positions ``<= t``, exactly the rows of :func:`prefix_lm_mask`. The prefix and the decoder
        keys/values stay two head-major segments (``MultiHeadAttention.attend_heads``): concatenating
        ``(batch, P + T, H, head_dim)`` keys/values and transposing them for the dot at every step and layer
        cost more than the step's matmuls in beam search (benchmarks/decode.py).
        """
        x = self.embed_previous(ids_t[:, None], jnp.reshape(t, (1,)), dec["ocr_in"])
        pm = dec["prefix_mask"]
        new_cache = []
        for blk, (pk, pv), c in zip(self.mmt_layers, dec["prefix_kv"], cache):
            xn = blk.norm_q(x)
            k_t, v_t = blk.attn.project_kv_heads(xn)
            ck = jax.lax.dynamic_update_slice_in_dim(c["k"], k_t.astype(c["k"].dtype), t, axis=3)
            cv = jax.lax.dynamic_update_slice_in_dim(c["v"], v_t.astype(c["v"].dtype), t, axis=3)
            steps = jnp.broadcast_to(jnp.arange(ck.shape[3]) <= t, (pm.shape[0], ck.shape[3]))
            mask = jnp.concatenate([pm, steps], 1)[:, None, None, :]
            x = x + blk.attn.attend_heads(xn, [(pk, pv), (ck.astype(pk.dtype), cv.astype(pv.dtype))], mask)
            x = x + blk.ffn(blk.norm_ffn(x))
            new_cache.append({"k": ck, "v": cv})
        logits = self.output_logits(self.mmt_norm(x), None, dec["ocr_mask"], ocr_keys=dec["ocr_keys"])
        return logits[:, 0], new_cache
