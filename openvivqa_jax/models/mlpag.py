"""MLPAG: MultiModal Learning and Pointer-augmented Answer Generator (OpenViVQA paper §4.3).

Components (Figure 10):

* Image embedding: region (or grid) features projected to ``d``: ``x_I`` ``(batch, S, d)``.
* Question embedding: piece embeddings (300-d fastText vectors with ``model.question_embedding = "fasttext"``,
  as the paper) + a fully connected layer: ``x_Q`` ``(batch, l, d)``.
* Scene-text embedding: OCR token features: ``x_S`` ``(batch, N, d)``.
* MultiModal fusion, repeated ``num_fusion_layers`` times:
  self attention of ``x_Q`` over itself giving ``a_Q``; *context attention* of ``x_S`` over ``a_Q``;
  *spatial attention* of ``x_I`` over ``a_Q`` (the question as key/value in both).
  Then ``x_f = x_S ⊕ x_I`` (eq. 9, element-wise sum). When ``S != N`` the shorter stream is
  zero-padded to ``M = max(S, N)`` and the fused mask is the union of the two masks.
  ``fusion="concat"`` (an option, not the paper) concatenates instead.
* Options, not the paper: ``question_over_image`` adds one more block after the fusion layers in which the
  question tokens attend over the image, ``x_Q <- CrossBlock(x_Q, x_I)`` (MCAN's guided attention, Yu et al.
  2019), so each question token can carry the object it names; ``question_in_memory`` appends ``x_Q`` to the
  decoder's memory. Together they let the decoder read an object's colour through the question token that
  names it (docs/evaluation.md, "Non-text questions").
* Option, training only: ``word_region_loss`` (weight > 0, with ``question_over_image``) sows a contrastive
  loss that matches the question's words to its own picture's cells through that block's query/key
  projections (:mod:`openvivqa_jax.models.word_region`); the training loss adds it.
* Option: ``counter`` (weight > 0, region vision) appends one memory token, the count of the regions the
  question names by a small counter trained on a stream of counting questions
  (:mod:`openvivqa_jax.models.counting`).
* Option: ``joint_layers`` (``J`` > 0) runs ``J`` self-attention blocks over the question tokens, the image and
  the OCR tokens together, ``[x_Q; x_I; x_S] <- EncoderBlock([x_Q; x_I; x_S])``, after the fusion layers (and
  the question-over-image block) and before the memory is formed: M4C's multimodal transformer (Hu et al., CVPR
  2020) inside MLPAG. Every region then sees the question's words *and* the other regions, so an attribute the
  question names meets the region's own in one place (verifying "is the circle red?", comparing two shapes'
  colours or counts, finding what is left of a named shape), which the paper's fusion, where the image attends to
  the question only, leaves to the decoder.
* Option: ``ocr_self_attention`` (``K`` > 0) runs ``K`` self-attention blocks over the OCR tokens before the
  fusion layers (in the paper's fusion an OCR token attends to the question only), so a token takes on what
  the tokens beside it carry, such as being the name the question asks about (the OCR feature group
  ``question_match``): the other words of a named shop's sign.
* Option: ``named_text_token`` appends one memory token, the mean of the fused OCR tokens whose pieces occur
  in the question (:func:`named_text`, the exact match of
  :func:`openvivqa_jax.models.embeddings.question_match`), masked when none does: a question about a named
  shop (its sign's colour, its side, what it sells) reads that shop's tokens from one fixed slot instead of
  first finding them among the OCR slots. Which tokens are named is ``named_match``: ``"any"``, every token
  that occurs in the question; ``"longest_run"``, only the tokens of the longest stretch of the question the
  picture writes out word after word (:func:`openvivqa_jax.models.embeddings.longest_run_match`), so that a
  shop named "uyên linh" is not pooled with another sign that says "uyên". The named-region token below
  uses the same tokens.
* Option: ``named_region_token`` appends one more memory token: the raw features (region features or grid
  cells) of the smallest region whose box holds the box around the named OCR tokens and is larger than it
  (:func:`named_region`): the sign the named text is painted on, so that the sign's colour reaches the decoder
  from the named shop. Area-overlap pooling, as the OCR tokens' ``appearance`` group has it, gives every region
  that covers the text the same weight, the facade's too; the region best matching the text's box is mostly
  the text's own strokes, whose colour blends the letters' with the sign's.
* Option: ``question_to_decoder`` adds the question, as one projected mean of its fused tokens
  (:func:`question_summary`), to every input of the answer decoder, so what is asked reaches each step
  directly: after copying a shop's name, the next word ("bán" for what it sells, "nằm" for its side) depends on
  the question's last words only.
* Option: ``verifier`` (``enabled``, region vision) adds to the first answer piece's logits the existence of
  what a yes/no question names, flipped by the question's negation from rules
  (:mod:`openvivqa_jax.models.verifying`): affirming pieces up, denying ones down, or the reverse; with
  ``verifier.ocr_tokens`` the OCR tokens that the question names count as well (*is the word milk written?*),
  and the regions inside an OCR token's box are not scored as things.
* Answer generator: transformer decoder over ``x_f`` (eq. 10) with the dynamic pointer network over
  ``x_S`` (eq. 11) and ``argmax [h', ocr]`` (eq. 12).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.base import MemoryDecoderGenerator
from openvivqa_jax.models.counting import counter_weight, region_counter
from openvivqa_jax.models.verifying import POLARITY_FIELD, region_verifier
from openvivqa_jax.models.decoder import answer_decoder
from openvivqa_jax.models.embeddings import (OcrEmbedding, QuestionEmbedding, longest_run_match, question_match,
                                             question_word_dim, vision_encoder)
from openvivqa_jax.models.grounding import count_loss, counting_targets, visual_glimpses
from openvivqa_jax.models.layers import CrossBlock, EncoderBlock, dense, layer_norm
from openvivqa_jax.models.word_region import alignment_scores, picture_fingerprint, word_region_loss

__all__ = ["MLPAG", "NAMED_MATCH_RULES", "fuse_sum", "named_text", "named_region", "question_summary"]

#: ``model.named_match`` values (module doc): which OCR tokens the named-text and named-region tokens are made of.
NAMED_MATCH_RULES = ("any", "longest_run")


def fuse_sum(x_s, s_mask, x_i, i_mask):
    """Eq. 9, ``x_f = x_S ⊕ x_I``, padding the shorter stream with zeros.

    Args:
      x_s: ``(batch, N, d)``; ``s_mask``: ``(batch, N)``.
      x_i: ``(batch, S, d)``; ``i_mask``: ``(batch, S)``.

    Returns:
      ``(x_f (batch, M, d), mask (batch, M))`` with ``M = max(N, S)``; padded/masked rows contribute
      zeros, so a position is the sum of the valid entries present there.
    """
    m = max(x_s.shape[1], x_i.shape[1])

    def pad(x, mask):
        x = jnp.where(mask[..., None], x, 0)
        extra = m - x.shape[1]
        if extra:
            x = jnp.pad(x, ((0, 0), (0, extra), (0, 0)))
            mask = jnp.pad(mask, ((0, 0), (0, extra)))
        return x, mask

    xs, ms = pad(x_s, s_mask)
    xi, mi = pad(x_i, i_mask)
    return xs + xi, ms | mi


def named_text(match, mask, x):
    """The mean of the OCR tokens the question names.

    Args:
      match: ``(batch, N)`` float, 1 where the token's pieces occur in the question
        (:func:`openvivqa_jax.models.embeddings.question_match`); mask: ``(batch, N)`` bool, the real tokens.
      x: ``(batch, N, d)`` OCR token features.

    Returns:
      ``(token (batch, 1, d), token_mask (batch, 1) bool)``: the mean of ``x`` over the real tokens that match;
      zeros and False where none does.
    """
    w = ((match > 0) & mask).astype(x.dtype)
    n = w.sum(1, keepdims=True)
    tok = jnp.einsum("bn,bnd->bd", w / jnp.maximum(n, 1), x)[:, None]
    return tok, n > 0


#: :func:`named_region`: the least share of the named text's box that a region's box must hold.
CONTAIN_MIN = 0.8
#: :func:`named_region`: the largest share of a region's box that the named text's box may be (the text's own
#: strokes, whose box is the text's, are not the surface it is painted on).
TEXT_SHARE_MAX = 0.7


def question_summary(x_q, q_mask, proj):
    """The question as one vector for the answer decoder's inputs (``model.question_to_decoder``).

    The masked mean of the fused question tokens (after the fusion layers' self-attention, before the question
    attends over the image), through ``proj``. The answer decoder adds it to every step's input
    (:meth:`openvivqa_jax.models.decoder.AnswerDecoder.embed_inputs`), so the word that says what is asked
    ("bán" / "nằm ở") is in every step's own input, not only in one memory slot among the regions and OCR
    tokens that cross-attention must find.

    Args:
      x_q: ``(batch, q_len, d)`` question tokens.
      q_mask: ``(batch, q_len)`` bool, True for real tokens.
      proj: a ``d -> d`` layer.

    Returns:
      ``(batch, d)``; a question with no real token gives ``proj`` of zeros.
    """
    w = q_mask.astype(x_q.dtype)[..., None]
    mean = jnp.sum(x_q * w, axis=1) / jnp.maximum(jnp.sum(w, axis=1), 1.0)
    return proj(mean)


def _area(x):
    return jnp.clip(x[..., 2] - x[..., 0], 0) * jnp.clip(x[..., 3] - x[..., 1], 0)


def named_region(match, mask, ocr_boxes, raw, boxes, region_mask):
    """The image region under the text the question names (module doc, ``named_region_token``): the smallest
    real region whose box holds the box around the named OCR tokens (at least :data:`CONTAIN_MIN` of it) and is
    larger than it (the text's box at most :data:`TEXT_SHARE_MAX` of the region's): the sign the text is painted
    on, not the text's own strokes, whose segment has the text's box, nor the facade around the sign.

    Args:
      match: ``(batch, N)`` float, 1 where the OCR token's pieces occur in the question; mask: ``(batch, N)``
        bool, the real OCR tokens; ocr_boxes: ``(batch, N, 4)`` xyxy in [0, 1].
      raw: ``(batch, S, C)`` the vision encoder's raw features; boxes: ``(batch, S, 4)`` their boxes;
        region_mask: ``(batch, S)`` bool, the real regions.

    Returns:
      ``(features (batch, 1, C), token_mask (batch, 1) bool)``: that region's raw features; zeros and False
      where no token is named or no region qualifies.
    """
    named = (match > 0) & mask
    big = jnp.float32(1e9)
    lo = jnp.where(named[..., None], ocr_boxes[..., :2].astype(jnp.float32), big).min(1)
    hi = jnp.where(named[..., None], ocr_boxes[..., 2:].astype(jnp.float32), -big).max(1)
    box = jnp.concatenate([lo, hi], -1)[:, None]  # (batch, 1, 4)
    boxes = boxes.astype(jnp.float32)
    ix = jnp.clip(jnp.minimum(box[..., 2], boxes[..., 2]) - jnp.maximum(box[..., 0], boxes[..., 0]), 0)
    iy = jnp.clip(jnp.minimum(box[..., 3], boxes[..., 3]) - jnp.maximum(box[..., 1], boxes[..., 1]), 0)
    text_area = _area(box)  # (batch, 1); 0 where nothing is named (the box is inverted)
    region_area = _area(boxes)  # (batch, S)
    holds = ix * iy >= CONTAIN_MIN * text_area
    share = text_area / jnp.maximum(region_area, 1e-12)
    ok = region_mask & holds & (share <= TEXT_SHARE_MAX) & (text_area > 0) & named.any(1, keepdims=True)
    pick = jnp.argmax(jnp.where(ok, share, -1.0), axis=1)  # the smallest qualifying region
    found = ok.any(1, keepdims=True)
    feats = jnp.take_along_axis(raw, pick[:, None, None], axis=1)
    return jnp.where(found[..., None], feats, 0).astype(raw.dtype), found


class MLPAG(MemoryDecoderGenerator):
    """MLPAG (paper §4.3). See the module docstring.

    Args:
      cfg: the ``config.model`` ConfigDict (d_model, num_heads, ffn_dim, dropout, num_fusion_layers,
        num_decoder_layers, max_question_len, max_answer_len, num_ocr, vision.*, ocr_features,
        ocr_extra_features, phoc_dim, fusion, question_in_memory: also append the fused question tokens
        ``x_Q`` to the decoder's memory, after the OCR tokens and the image; off in the paper's model),
        question_over_image (the question tokens attend over the image after the fusion layers; off in the
        paper's model; its block is created after every other one, so the other parameters are the same as
        without it for a seed), word_region_loss (weight, temperature, sharpness; a training-only loss, no
        parameters of its own), joint_layers (self-attention blocks over the question, image and OCR tokens
        together; 0, the paper's model, by default; made last), ocr_self_attention (self-attention blocks over
        the OCR tokens before the fusion; 0 by default) and named_text_token (one more memory token, the OCR
        tokens the question names; False by default), both made after every other module, and
        named_region_token (one more memory token, the image under the named text; False by default), made
        after those, and question_to_decoder (the question's mean token, projected, added to every answer
        decoder input; False by default), then verifier (the first answer piece's yes/no bias; off by default),
        made last; named_match (``"any"``, the default, or
        ``"longest_run"``: which OCR tokens the two named tokens are made from, module doc; no parameters).
      vocab_size: ``V``.
      rngs: parameter RNGs.
      dtype: compute dtype.

    Raises:
      ValueError: for an unknown ``fusion``, a ``word_region_loss.weight`` > 0 without ``question_over_image``,
        a negative ``joint_layers`` or ``ocr_self_attention``, or an unknown ``named_match``.
    """

    def __init__(self, cfg, vocab_size: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        d = cfg.d_model
        self.vocab_size = vocab_size
        self.num_ocr = cfg.num_ocr
        self.fusion = cfg.get("fusion", "sum")
        self.question_in_memory = bool(cfg.get("question_in_memory", False))
        self.question_over_image = bool(cfg.get("question_over_image", False))
        wr = cfg.get("word_region_loss") or {}
        self.word_region_weight = float(wr.get("weight", 0.0))
        self.word_region_temperature = float(wr.get("temperature", 0.1))
        self.word_region_sharpness = float(wr.get("sharpness", 1.0))
        self.word_region_max_words = int(wr.get("max_words", 0) or 0)
        self.counter_weight = counter_weight(cfg)
        if self.word_region_weight and not self.question_over_image:
            raise ValueError("model.word_region_loss.weight > 0 trains the attention of the question over the "
                             "image: set model.question_over_image=True too")
        if self.fusion not in ("sum", "concat"):
            raise ValueError(f"MLPAG fusion must be 'sum' (eq. 9) or 'concat', got {self.fusion!r}")
        self.vision = vision_encoder(cfg, rngs=rngs, dtype=dtype)
        self.question = QuestionEmbedding(vocab_size=vocab_size, d_model=d, max_len=cfg.max_question_len,
                                          dropout=cfg.dropout, rngs=rngs, dtype=dtype, word_dim=question_word_dim(cfg))
        self.ocr = OcrEmbedding(vocab_size=vocab_size, d_model=d, phoc_dim=cfg.phoc_dim,
                                appearance_dim=self.vision.raw_dim, features=tuple(cfg.ocr_features),
                                extra_dims=dict(cfg.get("ocr_extra_features", {}) or {}), dropout=cfg.dropout,
                                rngs=rngs, dtype=dtype)
        L = cfg.num_fusion_layers
        mk = lambda: CrossBlock(d, cfg.num_heads, cfg.ffn_dim, cfg.dropout, rngs=rngs, dtype=dtype)  # noqa: E731
        self.self_attention = nnx.List([
            EncoderBlock(d, cfg.num_heads, cfg.ffn_dim, cfg.dropout, rngs=rngs, dtype=dtype) for _ in range(L)])
        self.context_attention = nnx.List([mk() for _ in range(L)])
        self.spatial_attention = nnx.List([mk() for _ in range(L)])
        self.decoder = answer_decoder(cfg, vocab_size, use_pointer=True, rngs=rngs, dtype=dtype)
        if self.question_over_image:  # made last, so the other parameters are those of the model without it
            self.question_image_attention = mk()
        # Made after every other module for the same reason.
        self.glimpses = visual_glimpses(cfg, rngs=rngs, dtype=dtype)
        # The counter reads the stored region features whole, whatever part the vision encoder embeds.
        self.counter = region_counter(cfg, feature_dim=self.vision.input_dim, vocab_size=vocab_size, rngs=rngs,
                                      dtype=dtype)
        num_joint = int(cfg.get("joint_layers", 0) or 0)
        if num_joint < 0:
            raise ValueError(f"model.joint_layers must be >= 0, got {num_joint}")
        # Made last, so that every other parameter is that of the model without them for a seed.
        self.joint = nnx.List([EncoderBlock(d, cfg.num_heads, cfg.ffn_dim, cfg.dropout, rngs=rngs, dtype=dtype)
                               for _ in range(num_joint)]) if num_joint else None
        num_ocr_sa = int(cfg.get("ocr_self_attention", 0) or 0)
        if num_ocr_sa < 0:
            raise ValueError(f"model.ocr_self_attention must be >= 0 (self-attention blocks over the OCR tokens), "
                             f"got {num_ocr_sa}")
        # Made after every other module (the named-text projection first), so that without them the parameters
        # for a seed are unchanged.
        self.named_text_token = bool(cfg.get("named_text_token", False))
        if self.named_text_token:
            # A projection of its own, so that the decoder tells the named text from the OCR slot it came from.
            self.named_text_proj = dense(d, d, rngs, dtype)
            self.named_text_norm = layer_norm(d, rngs, dtype)
        self.ocr_self_attention = nnx.List([
            EncoderBlock(d, cfg.num_heads, cfg.ffn_dim, cfg.dropout, rngs=rngs, dtype=dtype)
            for _ in range(num_ocr_sa)]) if num_ocr_sa else None
        self.named_region_token = bool(cfg.get("named_region_token", False))
        self.named_match = str(cfg.get("named_match", "any") or "any")
        if self.named_match not in NAMED_MATCH_RULES:
            raise ValueError(f"model.named_match must be one of {NAMED_MATCH_RULES} (which OCR tokens the question "
                             f"names), got {self.named_match!r}")
        if self.named_region_token:  # made last, as the options above
            self.named_region_proj = dense(self.vision.raw_dim, d, rngs, dtype)
            self.named_region_norm = layer_norm(d, rngs, dtype)
        self.question_to_decoder = bool(cfg.get("question_to_decoder", False))
        if self.question_to_decoder:  # made last, as the options above
            self.question_summary = dense(d, d, rngs, dtype)
        # Made last, as the options above. It reads the stored region features (with proposals, by default their
        # first OBJECT_FEATURE_DIM), whatever part the vision encoder embeds.
        self.verifier = region_verifier(cfg, feature_dim=self.vision.input_dim, vocab_size=vocab_size, rngs=rngs,
                                        dtype=dtype)

    def decoder_memory_layout(self, num_vision: int, num_ocr: int) -> tuple[int, int]:
        """Eq. 9 sum fusion: memory position ``j`` is OCR token ``j`` + image cell ``j`` (zero-padded), so the
        cells are ``[0, S)`` (positions ``j < N`` also carry OCR token ``j``); ``concat`` fusion: ``[N, N + S)``."""
        return (num_ocr, num_ocr + num_vision) if self.fusion == "concat" else (0, num_vision)

    def encode(self, batch, *, deterministic=True, rngs=None):
        """Fusion module. Returns ``{memory (batch, M, d), memory_mask (batch, M), ocr_feats
        (batch, N, d), ocr_mask (batch, N)}``."""
        kw = dict(deterministic=deterministic, rngs=rngs)
        vis = self.vision(batch, **kw)
        x_i, i_mask = vis["feats"], vis["mask"]
        q_mask = batch["question_mask"].astype(bool)
        x_q = self.question(batch["question"], **kw)
        x_s = self.ocr(batch, vis, **kw)
        s_mask = batch["ocr_mask"].astype(bool)
        for block in self.ocr_self_attention or ():
            x_s = block(x_s, s_mask, **kw)
        for sa, ca, spa in zip(self.self_attention, self.context_attention, self.spatial_attention):
            x_q = sa(x_q, q_mask, **kw)
            x_s = ca(x_s, x_q, q_mask, **kw)
            x_i = spa(x_i, x_q, q_mask, **kw)
        decoder_bias = question_summary(x_q, q_mask, self.question_summary) if self.question_to_decoder else None
        if self.question_over_image:
            if self.word_region_weight and not deterministic:
                self._sow_word_region_loss(x_q, q_mask, vis)
            x_q = self.question_image_attention(x_q, x_i, i_mask, **kw)
        if self.joint is not None:
            x_q, x_i, x_s = self._joint(x_q, q_mask, x_i, i_mask, x_s, s_mask, kw)
        if self.fusion == "sum":
            memory, mem_mask = fuse_sum(x_s, s_mask, x_i, i_mask)
        else:
            memory = jnp.concatenate([x_s, x_i], 1)
            mem_mask = jnp.concatenate([s_mask, i_mask], 1)
        if self.question_in_memory:
            memory = jnp.concatenate([memory, x_q.astype(memory.dtype)], 1)
            mem_mask = jnp.concatenate([mem_mask, q_mask], 1)
        if self.glimpses is not None:
            g = self.glimpses(vis["feats"], i_mask, x_q, q_mask, vis["boxes"], **kw)
            if self.glimpses.count_loss_weight and not deterministic:
                self.sow(nnx.Intermediate, "count_loss", self.glimpses.count_loss_weight * count_loss(
                    g["counts"][:, 0], counting_targets(batch)))
            memory = jnp.concatenate([memory, g["tokens"].astype(memory.dtype)], 1)
            mem_mask = jnp.concatenate([mem_mask, g["mask"]], 1)
        if self.counter is not None:
            memory, mem_mask = self._with_count_token(batch, memory, mem_mask, deterministic)
        if self.named_text_token or self.named_region_token:
            memory, mem_mask = self._with_named_tokens(batch, vis, x_s, s_mask, memory, mem_mask)
        out = {"memory": memory, "memory_mask": mem_mask, "ocr_feats": x_s, "ocr_mask": s_mask}
        if decoder_bias is not None:
            out["decoder_bias"] = decoder_bias
        if self.verifier is not None:
            text = {}
            if self.verifier.ocr_tokens:
                text = dict(text_match=question_match(batch["ocr_pieces"], batch["ocr_piece_mask"],
                                                      batch["question"], batch["question_mask"]), text_mask=s_mask)
            scored = self.verifier.scored_regions(batch["region_mask"], batch["region_boxes"], batch["ocr_boxes"],
                                                  s_mask)
            regions = (batch["region_features"], batch["region_boxes"], scored, batch["question"], q_mask)
            out["first_logit_bias"] = self.verifier(*regions, batch[POLARITY_FIELD], **text)
            if self.verifier.relate:
                tok, nothing = self.verifier.related(*regions)
                out["first_logit_bias"] = out["first_logit_bias"] + nothing
                out["memory"] = jnp.concatenate([out["memory"], tok.astype(out["memory"].dtype)], 1)
                out["memory_mask"] = jnp.concatenate([out["memory_mask"], jnp.ones_like(out["memory_mask"][:, :1])],
                                                     1)
        return out

    def _with_named_tokens(self, batch, vis, x_s, s_mask, memory, mem_mask):
        """Appends the named-text token (``named_text_token``), then the named-region token
        (``named_region_token``), each ``(batch, 1, d)`` with its mask, to the memory (module doc)."""
        if self.named_match == "longest_run":
            match = longest_run_match(batch["ocr_pieces"], batch["ocr_piece_mask"], s_mask, batch["question"],
                                      batch["question_mask"])
        else:
            match = question_match(batch["ocr_pieces"], batch["ocr_piece_mask"], batch["question"],
                                   batch["question_mask"])
        toks = []
        if self.named_text_token:
            tok, tok_mask = named_text(match, s_mask, x_s)
            toks.append((self.named_text_norm(self.named_text_proj(tok)), tok_mask))
        if self.named_region_token:
            feats, tok_mask = named_region(match, s_mask, batch["ocr_boxes"], vis["raw"], vis["boxes"], vis["mask"])
            toks.append((self.named_region_norm(self.named_region_proj(feats)), tok_mask))
        for tok, tok_mask in toks:
            memory = jnp.concatenate([memory, tok.astype(memory.dtype)], 1)
            mem_mask = jnp.concatenate([mem_mask, tok_mask], 1)
        return memory, mem_mask

    def _joint(self, x_q, q_mask, x_i, i_mask, x_s, s_mask, kw):
        """The ``joint_layers`` blocks (module doc) over ``[x_q (batch, l, d); x_i (batch, S, d); x_s (batch, N,
        d)]`` with the three masks as one key mask; returns the three parts, each ``(batch, ., d)``."""
        l, n_i = x_q.shape[1], x_i.shape[1]
        x = jnp.concatenate([x_q, x_i.astype(x_q.dtype), x_s.astype(x_q.dtype)], 1)
        mask = jnp.concatenate([q_mask, i_mask, s_mask], 1)
        for block in self.joint:
            x = block(x, mask, **kw)
        return x[:, :l], x[:, l:l + n_i], x[:, l + n_i:]

    def _with_count_token(self, batch, memory, mem_mask, deterministic: bool):
        """Appends the region counter's token (:mod:`openvivqa_jax.models.counting`) to the memory; in training,
        sows its loss on the batch's counting stream (``counting_loss``, weighted by ``model.counter.weight``) and
        the stream's exact-count share (``counting_exact``, a metric)."""
        counts = self.counter(batch["region_features"], batch["region_boxes"], batch["region_mask"],
                              batch["question"], batch["question_mask"])
        tok, tok_mask = self.counter.memory_token(counts)
        if not deterministic and "counting_question" in batch:
            loss, exact = self.counter.stream_loss(batch)
            self.sow(nnx.Intermediate, "counting_loss", self.counter_weight * loss)
            self.sow(nnx.Intermediate, "counting_exact", exact)
        return (jnp.concatenate([memory, tok.astype(memory.dtype)], 1),
                jnp.concatenate([mem_mask, tok_mask], 1))

    def _sow_word_region_loss(self, x_q, q_mask, vis) -> None:
        """Sows the contrastive word–region alignment loss (:mod:`openvivqa_jax.models.word_region`) of the
        question tokens ``x_q`` ``(batch, l, d)`` against the image before fusion, through the projections of
        the question-over-image attention, as the ``nnx.Intermediate`` ``word_region_loss`` (already weighted
        by ``model.word_region_loss.weight``); the training loss adds it."""
        block = self.question_image_attention
        attn = block.attn
        n = self.word_region_max_words
        if 0 < n < x_q.shape[1]:
            # The (batch^2 * words * heads * cells) scores are most of this loss's cost, and questions are often
            # far shorter than model.max_question_len: the words past n are left out of this loss only (the
            # share of questions that had any is the metric word_region_words_cut).
            self.sow(nnx.Intermediate, "word_region_words_cut", jnp.any(q_mask[:, n:], axis=1).mean())
            x_q, q_mask = x_q[:, :n], q_mask[:, :n]
        q = attn.project_q(block.norm_q(x_q))
        k = attn.project_k(block.norm_kv(vis["feats"]))
        scores = alignment_scores(q, q_mask, k, vis["mask"], self.word_region_sharpness)
        loss = word_region_loss(scores, picture_fingerprint(vis["raw"]), self.word_region_temperature)
        self.sow(nnx.Intermediate, "word_region_loss", self.word_region_weight * loss)
