"""Input embeddings shared by the zoo: vision (grid or region features), question, OCR tokens.

Batch keys read here (docs/design.md §5; built by :mod:`openvivqa_jax.data.pipeline`):

* ``image``: ``(batch, H, W, 3)`` uint8 pixels (vision kind ``cnn``), or
  ``region_features`` ``(batch, num_regions, region_dim)``, ``region_boxes`` ``(batch, num_regions, 4)``,
  ``region_mask`` ``(batch, num_regions)`` (vision kind ``region``: a detector's, pre-extracted; vision kind
  ``proposals``: the picture's class-free region proposals, ``region_dim = PROPOSAL_FEATURE_DIM``, made by the
  input pipeline, :mod:`openvivqa_jax.data.proposals`);
* ``question`` ``(batch, q_len)`` int32 piece ids, ``question_mask`` ``(batch, q_len)`` bool;
* ``ocr_pieces`` ``(batch, N, P)`` int32 pieces of each OCR token, ``ocr_piece_mask`` ``(batch, N, P)``,
  ``ocr_phoc`` ``(batch, N, phoc_dim)``, ``ocr_boxes`` ``(batch, N, 4)`` xyxy in [0, 1],
  ``ocr_mask`` ``(batch, N)``; optional extra per-token features such as ``ocr_fasttext``
  ``(batch, N, 300)``, ``ocr_det`` and ``ocr_rec`` (named in the config).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from openvivqa_jax.data.proposals import OBJECT_FEATURE_DIM, PROPOSAL_FEATURE_DIM
from openvivqa_jax.models import OCR_FEATURE_GROUPS
from openvivqa_jax.models.layers import SmallCNN, box_overlap_weights, dense, grid_boxes, layer_norm, masked_mean
from openvivqa_jax.models.vit import ViT, load_big_vision_npz, vit_settings

__all__ = ["PROPOSAL_FEATURE_SETS", "vision_encoder", "VisionEncoder", "QuestionEmbedding", "OcrEmbedding",
           "VisionOutput", "question_word_dim", "question_match", "longest_run_match", "QUESTION_EMBEDDINGS",
           "OCR_FEATURE_GROUPS", "OCR_BOX_GRID", "reading_order_code"]

#: ``model.question_embedding`` values: ``"learned"`` (piece embeddings trained from a random start) or
#: ``"fasttext"`` (rows started from the fastText vectors of ``model.fasttext.path``,
#: :func:`openvivqa_jax.models.pretrained.initialize_pretrained`; OpenViVQA §4.2-4.3).
QUESTION_EMBEDDINGS = ("learned", "fasttext")
#: ``(rows, columns)`` of the fixed grid of the ``box_grid`` OCR feature: 12 x 16 cells of 8x8 pixels at 128x96.
OCR_BOX_GRID = (12, 16)


def question_word_dim(cfg) -> int | None:
    """The question piece-embedding width of a transformer question embedding (MLPAG, M4C): ``model.word_dim``
    (the fastText vectors' width, 300 for ``cc.vi.300``) with ``question_embedding = "fasttext"``, else None
    (``d_model``, the learned embedding's width).

    Raises:
      ValueError: an unknown ``model.question_embedding``.
    """
    kind = cfg.get("question_embedding", "learned") or "learned"
    if kind not in QUESTION_EMBEDDINGS:
        raise ValueError(f"model.question_embedding must be one of {QUESTION_EMBEDDINGS}, got {kind!r}")
    return int(cfg.get("word_dim", 300) or 300) if kind == "fasttext" else None


#: ``model.vision.proposal_features`` values (:class:`VisionEncoder`).
PROPOSAL_FEATURE_SETS = ("all", "objects")


class VisionOutput(dict):
    """Vision features: ``feats`` ``(batch, S, d)``, ``mask`` ``(batch, S)``, ``raw`` ``(batch, S, C)``
    (pre-projection features for OCR appearance pooling) and ``boxes`` ``(batch, S, 4)``."""


class VisionEncoder(nnx.Module):
    """Grid features from pixels (small CNN or ViT) or projected pre-extracted region features, plus a box
    embedding, layer-normed: ``LN(W_f f) + LN(W_b box)`` (M4C's object embedding).

    Args:
      kind: ``"cnn"``, ``"vit"``, ``"region"`` or ``"proposals"`` (read like ``region``, with
        ``PROPOSAL_FEATURE_DIM`` features).
      d_model: output width.
      cnn_channels: channels of :class:`SmallCNN` (kind ``cnn``).
      space_to_depth: :class:`SmallCNN`'s space-to-depth block size (kind ``cnn``; 1: none).
      pixel_features: :class:`SmallCNN`'s pixel pooling size for the cells' own pixels (kind ``cnn``; 0: none).
      region_dim: region feature width (kind ``region``).
      proposal_features: kind ``proposals``: ``"all"`` (the :data:`PROPOSAL_FEATURE_DIM` features) or
        ``"objects"`` (the first :data:`OBJECT_FEATURE_DIM`: the segment's own colour, area and shape, without the
        pixels of its box and context; the box is embedded either way).
      dropout: dropout on the output.
      vision_cfg: ``config.model.vision`` (kind ``vit``): ``vit_variant`` / ``patch_size``, ``width``,
        ``depth``, ``heads``, ``mlp_dim``, ``posemb_grid``, ``cls_token`` (see
        :func:`openvivqa_jax.models.vit.vit_settings`), ``checkpoint`` (a big_vision ``.npz`` loaded at
        construction; None: random init) and ``freeze`` (the backbone is not trained: the optimizer
        masks ``vision/backbone`` parameters, :func:`openvivqa_jax.training.state.make_optimizer`).

    Raises:
      ValueError: for an unknown kind or ``proposal_features``, or kind ``vit`` without ``vision_cfg``.
      openvivqa_jax.models.vit.CheckpointError: an unreadable or mismatched ViT checkpoint.
    """

    def __init__(self, *, kind: str, d_model: int, cnn_channels=(32, 64, 128, 128), region_dim: int = 2048,
                 dropout: float = 0.1, rngs: nnx.Rngs, dtype: Any = jnp.float32, vision_cfg=None,
                 space_to_depth: int = 1, pixel_features: int = 0, proposal_features: str = "all"):
        if kind not in ("cnn", "vit", "region", "proposals"):
            raise ValueError(f"vision kind must be 'cnn', 'vit', 'region' or 'proposals', got {kind!r}")
        if proposal_features not in PROPOSAL_FEATURE_SETS:
            raise ValueError(f"model.vision.proposal_features must be one of {PROPOSAL_FEATURE_SETS}, got "
                             f"{proposal_features!r}")
        self.kind = kind
        self.objects_only = kind == "proposals" and proposal_features == "objects"
        if kind == "cnn":
            self.backbone = SmallCNN(tuple(cnn_channels), rngs=rngs, dtype=dtype, space_to_depth=space_to_depth,
                                     pixel_features=pixel_features)
            raw_dim = self.backbone.out_dim
        elif kind == "vit":
            if vision_cfg is None:
                raise ValueError("vision kind 'vit' needs vision_cfg (config.model.vision with vit_variant, ...)")
            vs = vit_settings(vision_cfg)
            self.backbone = ViT(patch_size=vs["patch_size"], width=vs["width"], depth=vs["depth"], heads=vs["heads"],
                                mlp_dim=vs["mlp_dim"], posemb_grid=vs["posemb_grid"], cls_token=vs["cls_token"],
                                dropout=float(vision_cfg.get("vit_dropout", 0.0) or 0.0), rngs=rngs, dtype=dtype)
            if vision_cfg.get("checkpoint"):
                load_big_vision_npz(self.backbone, os.path.expanduser(vision_cfg.get("checkpoint")))
            raw_dim = self.backbone.out_dim
        elif kind == "proposals":
            raw_dim = OBJECT_FEATURE_DIM if self.objects_only else PROPOSAL_FEATURE_DIM
        else:
            raw_dim = region_dim
        #: Width of ``batch["region_features"]`` as stored (kinds region and proposals), before any selection.
        self.input_dim = PROPOSAL_FEATURE_DIM if kind == "proposals" else raw_dim
        self.raw_dim = raw_dim
        self.feat_proj = dense(raw_dim, d_model, rngs, dtype)
        self.feat_norm = layer_norm(d_model, rngs, dtype)
        self.box_proj = dense(4, d_model, rngs, dtype)
        self.box_norm = layer_norm(d_model, rngs, dtype)
        self.dropout = nnx.Dropout(dropout)

    def __call__(self, batch: dict, *, deterministic=True, rngs=None) -> VisionOutput:
        """Returns the :class:`VisionOutput` for ``batch``."""
        if self.kind in ("cnn", "vit"):
            images = batch["image"].astype(jnp.float32) / 255.0
            grid = self.backbone(images.astype(self.feat_proj.dtype or jnp.float32))
            b, gh, gw, c = grid.shape
            raw = grid.reshape(b, gh * gw, c)
            boxes = jnp.broadcast_to(grid_boxes(gh, gw)[None], (b, gh * gw, 4))
            mask = jnp.ones((b, gh * gw), bool)
        else:
            raw = batch["region_features"]
            if self.objects_only:
                raw = raw[..., :OBJECT_FEATURE_DIM]
            boxes = batch["region_boxes"].astype(jnp.float32)
            mask = batch["region_mask"].astype(bool)
        feats = self.feat_norm(self.feat_proj(raw)) + self.box_norm(self.box_proj(boxes))
        feats = self.dropout(feats, deterministic=deterministic, rngs=rngs)
        return VisionOutput(feats=feats, mask=mask, raw=raw, boxes=boxes)


class QuestionEmbedding(nnx.Module):
    """Piece embeddings + learned positions, then a fully connected projection (MLPAG §4.3:
    "a token embedding module ... and a fully connected layer").

    Args:
      vocab_size: ``V``; ``d_model``; ``max_len``: question length; ``dropout``.
      word_dim: width of the piece embeddings and positions (None: ``d_model``); the fastText question
        embedding (``model.question_embedding = "fasttext"``) uses the vectors' width, 300, and the fully
        connected layer maps it to ``d_model`` (:func:`openvivqa_jax.models.pretrained.question_word_dim`).
    """

    def __init__(self, *, vocab_size: int, d_model: int, max_len: int, dropout: float, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32, word_dim: int | None = None):
        w = word_dim or d_model
        self.embedding = nnx.Embed(vocab_size, w, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.pos_embedding = nnx.Embed(max_len, w, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.proj = dense(w, d_model, rngs, dtype)
        self.norm = layer_norm(d_model, rngs, dtype)
        self.dropout = nnx.Dropout(dropout)

    def __call__(self, ids: jax.Array, *, deterministic=True, rngs=None) -> jax.Array:
        """``ids``: ``(batch, q_len)`` -> ``(batch, q_len, d)``."""
        x = self.embedding(ids) + self.pos_embedding(jnp.arange(ids.shape[1]))[None]
        x = self.norm(self.proj(x))
        return self.dropout(x, deterministic=deterministic, rngs=rngs)


def reading_order_code(num_slots: int, dim: int) -> jax.Array:
    """The Transformer's sinusoidal position code (Vaswani et al. 2017, sec. 3.5) of OCR slots ``0 .. N-1``.

    Args:
      num_slots: ``N``, the OCR list's length; dim: the code's width (even).

    Returns:
      ``(N, dim)`` float32: ``sin(k / 10000^(2i/dim))`` in column ``2i`` and ``cos`` of the same in ``2i + 1``.

    Raises:
      ValueError: if ``dim`` is odd.
    """
    if dim % 2:
        raise ValueError(f"the OCR reading-order code needs an even width, got {dim}")
    k = np.arange(num_slots, dtype=np.float64)[:, None]
    freq = 10000.0 ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    code = np.zeros((num_slots, dim), np.float32)
    code[:, 0::2] = np.sin(k * freq)
    code[:, 1::2] = np.cos(k * freq)
    return jnp.asarray(code)


class OcrEmbedding(nnx.Module):
    """OCR token features (M4C style): ``LN(sum_k W_k f_k) + LN(W_b box)``.

    Feature groups ``f_k`` (each optional, chosen by ``features``):

    * ``pieces``: mean of the token's SentencePiece embeddings (padding pieces masked);
    * ``phoc``: the PHOC descriptor;
    * ``appearance``: vision ``raw`` features pooled under the token box by area overlap;
    * ``box_grid``: a learned 2-D position embedding of the token's box: one vector per cell of a fixed
      ``OCR_BOX_GRID`` grid over the picture, pooled under the box by area overlap (tokens on one text line
      share cells, so their embeddings are alike; the linear box embedding alone does not make nearby boxes
      alike under a dot product);
    * ``order``: the token's slot in the OCR list, its reading order, as a fixed sinusoidal code
      (:func:`reading_order_code`) through a learned projection. A name's syllables are consecutive slots, and
      a sinusoidal code of slot ``k + 1`` is a fixed rotation of slot ``k``'s, so the pointer's bilinear score
      can learn "the token after the one just copied" once for every slot (the boxes alone make it a relation
      between coordinates, learned separately for every line of every layout);
    * ``question_match``: whether the token's pieces occur, in order and side by side, among the question's
      pieces (:func:`question_match`), as a learned vector: the exact-match feature of reading comprehension
      (DrQA, Chen et al., ACL 2017), so that "is the word X written?" finds the token X for any word X, also one
      never seen in training;
    * any extra batch key in ``extra_dims`` (e.g. ``ocr_fasttext``: 300).

    Args:
      vocab_size, d_model, phoc_dim, appearance_dim: sizes.
      features: tuple of group names.
      extra_dims: mapping ``batch key -> feature width``.
      piece_embedding: an ``nnx.Embed`` to share with the question (or None for a private one).

    Raises:
      ValueError: if ``features`` names an unknown group, or has ``order`` with an odd ``d_model``.
    """

    def __init__(self, *, vocab_size: int, d_model: int, phoc_dim: int, appearance_dim: int,
                 features=("pieces", "phoc", "appearance"), extra_dims=None, dropout: float = 0.1,
                 rngs: nnx.Rngs, dtype: Any = jnp.float32):
        unknown = set(features) - set(OCR_FEATURE_GROUPS)
        if unknown:
            raise ValueError(f"unknown OCR feature groups {sorted(unknown)}; known: {', '.join(OCR_FEATURE_GROUPS)}")
        self.features = tuple(features)
        self.extra = tuple(sorted((extra_dims or {}).items()))
        if "pieces" in self.features:
            self.piece_embedding = nnx.Embed(vocab_size, d_model, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
            self.piece_proj = dense(d_model, d_model, rngs, dtype)
        if "phoc" in self.features:
            self.phoc_proj = dense(phoc_dim, d_model, rngs, dtype)
        if "appearance" in self.features:
            self.app_proj = dense(appearance_dim, d_model, rngs, dtype)
        if "box_grid" in self.features:
            self.grid_proj = dense(OCR_BOX_GRID[0] * OCR_BOX_GRID[1], d_model, rngs, dtype, use_bias=False)
        if "order" in self.features:
            if d_model % 2:
                raise ValueError(f"the OCR feature group 'order' (a sinusoidal code) needs an even model.d_model, "
                                 f"got {d_model}")
            self.order_proj = dense(d_model, d_model, rngs, dtype, use_bias=False)
        if "question_match" in self.features:
            self.match_proj = dense(1, d_model, rngs, dtype, use_bias=False)
        self.extra_proj = nnx.Dict({k.replace("/", "_"): dense(dim, d_model, rngs, dtype) for k, dim in self.extra})
        self.feat_norm = layer_norm(d_model, rngs, dtype)
        self.box_proj = dense(4, d_model, rngs, dtype)
        self.box_norm = layer_norm(d_model, rngs, dtype)
        self.dropout = nnx.Dropout(dropout)

    def __call__(self, batch: dict, vision: VisionOutput | None, *, deterministic=True, rngs=None) -> jax.Array:
        """Returns ``(batch, N, d)`` OCR features (padding slots are computed but masked downstream)."""
        parts = []
        if "pieces" in self.features:
            emb = self.piece_embedding(batch["ocr_pieces"])
            parts.append(self.piece_proj(masked_mean(emb, batch["ocr_piece_mask"].astype(bool), axis=2)))
        if "phoc" in self.features:
            parts.append(self.phoc_proj(batch["ocr_phoc"].astype(jnp.float32)))
        if "appearance" in self.features:
            w = box_overlap_weights(batch["ocr_boxes"].astype(jnp.float32), vision["boxes"])
            pooled = jnp.einsum("bns,bsc->bnc", w.astype(vision["raw"].dtype), vision["raw"])
            parts.append(self.app_proj(pooled))
        if "box_grid" in self.features:
            cells = grid_boxes(*OCR_BOX_GRID)
            parts.append(self.grid_proj(box_overlap_weights(batch["ocr_boxes"].astype(jnp.float32), cells)))
        if "order" in self.features:
            code = reading_order_code(batch["ocr_boxes"].shape[1], self.order_proj.in_features)
            parts.append(self.order_proj(code)[None])
        if "question_match" in self.features:
            match = question_match(batch["ocr_pieces"], batch["ocr_piece_mask"], batch["question"],
                                   batch["question_mask"])
            parts.append(self.match_proj(match[..., None]))
        for key, _ in self.extra:
            parts.append(self.extra_proj[key.replace("/", "_")](batch[key]))
        x = self.feat_norm(sum(parts)) + self.box_norm(self.box_proj(batch["ocr_boxes"].astype(jnp.float32)))
        return self.dropout(x, deterministic=deterministic, rngs=rngs)


def _match_offsets(ocr_pieces: jax.Array, ocr_piece_mask: jax.Array, question: jax.Array,
                   question_mask: jax.Array) -> jax.Array:
    """``(batch, N, l)`` bool: True where OCR token ``n`` has pieces and they all match the question's pieces at
    offset ``t`` (piece ``p`` at ``t + p``, inside the question's real pieces)."""
    b, l = question.shape
    p = ocr_pieces.shape[-1]
    q = jnp.pad(question, ((0, 0), (0, p)))
    qm = jnp.pad(question_mask.astype(bool), ((0, 0), (0, p)))
    windows = jnp.stack([q[:, k:k + l] for k in range(p)], -1)  # (batch, l, P): piece k of the window at t
    valid = jnp.stack([qm[:, k:k + l] for k in range(p)], -1)
    pm = ocr_piece_mask.astype(bool)
    same = (ocr_pieces[:, :, None, :] == windows[:, None]) & valid[:, None]  # (batch, N, l, P)
    whole = jnp.all(same | ~pm[:, :, None, :], axis=-1)  # every piece of the token matches at offset t
    return whole & jnp.any(pm, axis=-1)[..., None]


def question_match(ocr_pieces: jax.Array, ocr_piece_mask: jax.Array, question: jax.Array,
                   question_mask: jax.Array) -> jax.Array:
    """Whether each OCR token's pieces occur in the question, in order and side by side (the exact-match feature
    of DrQA, Chen et al., ACL 2017, at the level of the tokenizer's pieces: the question and every OCR token are
    encoded by the same tokenizer, so a word written in both has the same pieces).

    Args:
      ocr_pieces: ``(batch, N, P)`` int piece ids of each OCR token; ocr_piece_mask: ``(batch, N, P)`` bool.
      question: ``(batch, l)`` int piece ids; question_mask: ``(batch, l)`` bool.

    Returns:
      ``(batch, N)`` float32: 1 where the token has pieces and they all match the question's pieces at some
      offset ``t`` (piece ``p`` at ``t + p``, inside the question), else 0.
    """
    at = _match_offsets(ocr_pieces, ocr_piece_mask, question, question_mask)
    return jnp.any(at, axis=-1).astype(jnp.float32)


def longest_run_match(ocr_pieces: jax.Array, ocr_piece_mask: jax.Array, ocr_mask: jax.Array, question: jax.Array,
                      question_mask: jax.Array) -> jax.Array:
    """The OCR tokens of the longest stretch of the question that the picture writes out, word after word.

    A question names a shop by its whole name ("cửa hàng uyên linh"), and the same picture often writes one of
    its words on another sign (a shop called "uyên"): :func:`question_match` marks both signs, and the box or
    mean over the marked tokens is then of two signs. Here a run is a sequence of OCR tokens consecutive in the
    OCR list (reading order) whose pieces occur in the question consecutively too (token ``n + 1`` matches where
    token ``n``'s match ends); a token's score is the number of question pieces covered by the longest run
    through it, and the tokens whose score is the picture's largest are kept. Two runs of the same length (the
    same name on two signs, or two one-word matches) are both kept, as :func:`question_match` would keep them.

    Args:
      ocr_pieces: ``(batch, N, P)`` int piece ids of each OCR token; ocr_piece_mask: ``(batch, N, P)`` bool
        (a token's pieces first); ocr_mask: ``(batch, N)`` bool, the real tokens.
      question: ``(batch, l)`` int piece ids; question_mask: ``(batch, l)`` bool.

    Returns:
      ``(batch, N)`` float32: 1 for the tokens of the longest runs, 0 elsewhere (all 0 where no token matches).
    """
    at = _match_offsets(ocr_pieces, ocr_piece_mask, question, question_mask) & ocr_mask.astype(bool)[..., None]
    n_pieces = jnp.sum(ocr_piece_mask.astype(jnp.int32), axis=-1)  # (batch, N)
    b, _, l = at.shape
    t = jnp.arange(l)[None]

    def shifted(prev, shift):
        """``prev[:, t - shift]`` per batch row, 0 outside ``[0, l)``."""
        src = t - shift[:, None]
        inside = (src >= 0) & (src < l)
        return jnp.where(inside, jnp.take_along_axis(prev, jnp.clip(src, 0, l - 1), axis=1), 0)

    def ends(carry, xs):  # pieces covered by the run ending with token n matched at t
        prev, prev_len = carry
        at_n, len_n = xs
        cur = jnp.where(at_n, len_n[:, None] + shifted(prev, prev_len), 0)
        return (cur, len_n), cur

    def starts(nxt, xs):  # pieces covered by the run starting with token n matched at t
        at_n, len_n = xs
        cur = jnp.where(at_n, len_n[:, None] + shifted(nxt, -len_n), 0)
        return cur, cur

    xs = (jnp.swapaxes(at, 0, 1), n_pieces.T)
    zeros = jnp.zeros((b, l), jnp.int32)
    _, end = jax.lax.scan(ends, (zeros, jnp.zeros((b,), jnp.int32)), xs)
    _, start = jax.lax.scan(starts, zeros, xs, reverse=True)
    run = jnp.swapaxes(jnp.where(xs[0], end + start - xs[1][..., None], 0), 0, 1)  # (batch, N, l)
    score = run.max(-1)
    best = score.max(-1, keepdims=True)
    return ((score == best) & (score > 0)).astype(jnp.float32)


def vision_encoder(cfg, *, rngs: nnx.Rngs, dtype: Any) -> VisionEncoder:
    """The :class:`VisionEncoder` described by ``cfg.vision`` (``kind``: cnn, vit or region, and its fields)."""
    v = cfg.vision
    return VisionEncoder(kind=v.kind, d_model=cfg.d_model, cnn_channels=tuple(v.get("cnn_channels", (32, 64, 128))),
                         region_dim=v.get("region_dim", 2048), dropout=cfg.dropout, rngs=rngs, dtype=dtype,
                         vision_cfg=v, space_to_depth=int(v.get("space_to_depth", 1) or 1),
                         pixel_features=int(v.get("pixel_features", 0) or 0),
                         proposal_features=str(v.get("proposal_features", "all") or "all"))
