"""A region verifier: whether what a yes/no question names is in the picture, as a bias on the first answer piece.

A yes/no question (*is there a red star?*, *hình tròn có màu đỏ không?*, *is the circle not red?*) is answered by
the existence of what it names, flipped by its negation. Learned from the answers alone, the two are an
exclusive-or: neither the negation nor what a word names in the picture says anything about the answer without
the other, and a transformer from scratch memorizes its training pictures long before it finds both. So this
module takes the negation from rules (:mod:`openvivqa_jax.text.polarity`: the ``question_polarity`` field of a
batch, +1 or -1) and learns only the existence, by a structure that cannot do much else:

* each region's input ``x_r`` = its features and box ``(R, F + 4)``, standardized by per-feature statistics of
  the training split's regions (set once before training by the training loop, then kept as set); with
  class-free proposals the features are by default the segment's own colour, area and shape only
  (``model.verifier.proposal_features = "objects"``, the first ``OBJECT_FEATURE_DIM`` of
  :mod:`openvivqa_jax.data.proposals`), without the pixels of its box and context, which on a few hundred
  pictures tell the pictures apart more readily than they show what a word names;
* ``h_r = relu(W_1 x_r + b_1)`` (width ``H``), shared by every question;
* each question piece ``w`` has its own detector ``d_w`` (``H``) and bias; the question's detector is the mean
  of its pieces' (``d``, ``b``), and a region's score ``s_r = sigmoid(d . h_r + b - 3)`` (the -3: a region
  matches nothing until its detector is learned);
* the existence is the noisy-OR ``e_R = 1 - prod_r (1 - s_r)`` over the valid regions;
* with ``model.verifier.ocr_tokens`` (*is the word milk written in the picture?*) it is a mixture
  ``e = pi e_T + (1 - pi) e_R``: ``e_T`` is 1 when an OCR token's pieces occur in the question
  (:func:`openvivqa_jax.models.embeddings.question_match`, the exact-match feature), else 0, and
  ``pi = sigmoid(TEXT_GAIN * mean of the pieces' text weights - 4)`` says whether the question asks about the
  written words (its wording: *word*, *written*, *chữ*); it starts near 0 (0.018), so the regions decide until
  the text questions are learned, and its gain lets a few pieces move it as fast as the regions' detectors,
  whose scores are ``H``-wide products, move theirs; and a region whose box lies at least
  :data:`TEXT_REGION_SHARE` inside one real OCR token's box (:func:`text_region_share`: a printed letter, the
  label it is printed on) is not scored at all, in any of the rules below (:meth:`RegionVerifier.scored_regions`,
  applied by the model): the written words are the OCR tokens' to answer, and class-free proposals cut a word
  into letter-sized regions that a size word (*the small square*) scores above every drawn thing, since a linear
  detector reads *small* as *the smaller, the better*;
* its logit (``e`` clipped to ``[1e-6, 1 - 1e-6]``), times the polarity and a learned gate
  ``g = sigmoid(mean of the pieces' gate weights)`` (which questions are yes/no questions), is added, halved, to
  the first answer piece's logits of the affirming answer pieces (``yes``, ``có``, ``đúng``, ...) and taken from
  those of the denying ones (``no``, ``không``, ``sai``, ...): ``bias = 0.5 g p logit(e) a`` with ``a``
  ``(V,)`` +1, -1 or 0 per piece (:func:`answer_piece_polarity`, set from the run's tokenizer before training
  and kept in the checkpoint).

With ``model.verifier.compare`` the same region scores also answer *how many*, *more / fewer ... than* and *the
same colour* questions (:mod:`openvivqa_jax.models.comparing`): a number word's first-piece logit gets ``c log
P(count = n)``, ``c = sigmoid(mean of the pieces' count weights)``; and a yes/no question's probability becomes
the mixture ``r_e e + r_m sigmoid(L_more) + r_s sigmoid(L_same)`` of the existence, the count comparison and the
attribute comparison, ``r = softmax(ROUTE_GAIN * mean of the pieces' route weights + (0, -2, -2))`` (so the
existence leads at the start, with 0.79) for a question cut in two things by a split word, and ``r = (1, 0, 0)``
for one that is not (it names one thing, so it compares nothing). The mixture is of probabilities, not of
logits, so that a head that does not apply to the question, sure of its own answer (an existence logit of -14
for *are the circle and the square the same colour?*), moves the answer by its share at most.

The decoder's own logits still carry the question's prior over the answer words (which pair a template takes).
The module is trained by the answer loss through the bias, with an optimizer of its own (Adam at the constant
``model.verifier.learning_rate``, given by :func:`openvivqa_jax.training.state.counter_optimizer` beside the
region counter's): the model's warm-up and decay would hold it back as they would the counter.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from openvivqa_jax.data.proposals import read_feature_dim
from openvivqa_jax.models import comparing
from openvivqa_jax.models.layers import dense, layer_norm
from openvivqa_jax.text.polarity import answer_polarity

__all__ = ["TEXT_GAIN", "ROUTE_GAIN", "ROUTE_START", "SAME_GAIN", "TEXT_REGION_SHARE", "RegionVerifier",
           "region_verifier", "verifier_enabled", "answer_piece_polarity", "text_region_share", "POLARITY_FIELD"]

#: The gain of the text weights' mean in the share of the written words (module doc).
TEXT_GAIN = 10.0
#: The gain of the route weights' mean (module doc), as :data:`TEXT_GAIN` for the same reason.
ROUTE_GAIN = 10.0
#: The route weights' starting offsets (existence, count comparison, attribute comparison; module doc).
ROUTE_START = (0.0, -2.0, -2.0)
#: The gain of the attribute comparison's logit (module doc of :mod:`openvivqa_jax.models.comparing`): the
#: squared distance is never negative, so without it two things of one colour reach at most ``c`` (about 1.6
#: when trained, a probability of 0.8) while two of different colours reach -4 to -12; the gain lets *same* be
#: as sure as *different* at the learning rate of the rest.
SAME_GAIN = 4.0
#: The share of a region's box inside one OCR token's box from which the region is taken for text and not scored
#: (module doc): a letter lies wholly inside its word's box and a word's label nearly so, while a sign whose words
#: fill less than half of it is still a thing.
TEXT_REGION_SHARE = 0.5
#: The batch field of each question's polarity (+1, or -1 when negated), made by the input pipeline.
POLARITY_FIELD = "question_polarity"


def verifier_enabled(model_cfg) -> bool:
    """``model.verifier.enabled`` of a model config (False without a ``verifier`` entry)."""
    return bool((model_cfg.get("verifier") or {}).get("enabled", False))


def text_region_share(boxes: jax.Array, text_boxes: jax.Array, text_mask: jax.Array) -> jax.Array:
    """``(batch, R)`` float32: for each region, the largest share of its box's area inside one real OCR token's
    box, ``max_t area(b_r & t_t) / area(b_r)`` (0 without OCR tokens, and for a region of no area).

    Args:
      boxes: ``(batch, R, 4)`` the regions' boxes, xyxy in [0, 1]; text_boxes: ``(batch, N, 4)`` the OCR tokens',
        xyxy in [0, 1]; text_mask: ``(batch, N)`` bool, the real OCR tokens.
    """
    b = boxes.astype(jnp.float32)[:, :, None]
    t = text_boxes.astype(jnp.float32)[:, None]
    w = jnp.clip(jnp.minimum(b[..., 2], t[..., 2]) - jnp.maximum(b[..., 0], t[..., 0]), 0.0)
    h = jnp.clip(jnp.minimum(b[..., 3], t[..., 3]) - jnp.maximum(b[..., 1], t[..., 1]), 0.0)
    area = jnp.clip(b[..., 2] - b[..., 0], 0.0) * jnp.clip(b[..., 3] - b[..., 1], 0.0)
    share = jnp.where(area > 0, w * h / jnp.maximum(area, 1e-12), 0.0)
    return jnp.max(jnp.where(text_mask.astype(bool)[:, None], share, 0.0), -1, initial=0.0)


def answer_piece_polarity(tokenizer) -> np.ndarray:
    """``(V,)`` float32: +1 for a piece that is a whole affirming answer word, -1 for a denying one, 0 else
    (:func:`openvivqa_jax.text.polarity.answer_polarity` of the piece without SentencePiece's word-start mark)."""
    out = np.zeros((int(tokenizer.vocab_size),), np.float32)
    for i in range(len(out)):
        piece = tokenizer.id_to_piece(i)
        if piece.startswith("\u2581"):
            out[i] = answer_polarity(piece[1:])
    return out


class RegionVerifier(nnx.Module):
    """Existence of what a yes/no question names, as a first-piece logit bias (module doc).

    Args:
      feature_dim: ``F``, the width of the region features it reads (box excluded): the first ``F`` of those
        it is given.
      vocab_size: ``V``, the pieces of the question and of the answer.
      hidden_dim: ``H``, the region embedding's width and each piece's detector's.
      rngs: parameter RNGs.
      ocr_tokens: whether the OCR tokens the question names count too (module doc; the parameter
        ``text_weight`` ``(V,)`` exists only then, so that a checkpoint without it still restores).
      compare: whether it also counts and compares (module doc; its parameters exist only then).
      max_count: ``K``, the largest count it tells apart from larger ones (with ``compare``).
      relate: whether it also answers *what is left of X?* (module doc of :mod:`openvivqa_jax.models.comparing`;
        its parameters, and the memory token's projection to ``d_model``, exist only then).
      d_model: the decoder memory's width (with ``relate``); dtype: the memory token's.
    """

    def __init__(self, *, feature_dim: int, vocab_size: int, hidden_dim: int, rngs: nnx.Rngs,
                 ocr_tokens: bool = False, compare: bool = False, max_count: int = 10, relate: bool = False,
                 d_model: int = 0, dtype=jnp.float32):
        self.feature_dim = int(feature_dim)
        self.ocr_tokens = bool(ocr_tokens)
        if self.ocr_tokens:
            self.text_weight = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
        n_in = feature_dim + 4
        self.compare = bool(compare)
        self.max_count = int(max_count)
        if self.compare:
            self.count_gate = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
            self.route = nnx.Param(jnp.zeros((vocab_size, 3), jnp.float32))
            self.attribute_weight = nnx.Param(jnp.zeros((vocab_size, n_in), jnp.float32))
            self.same_bias = nnx.Param(jnp.ones((), jnp.float32))
            # Set once from the tokenizer before training (vqa/verifier_start.py), then kept.
            self.split_piece = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
            self.reverse_piece = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
            # float32, as every trained leaf is (the gradient is taken over all parameters); integers in value.
            self.answer_number = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
        self.input_mean = nnx.Param(jnp.zeros((n_in,), jnp.float32))
        self.input_std = nnx.Param(jnp.ones((n_in,), jnp.float32))
        self.answer_polarity = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
        self.w1 = dense(n_in, hidden_dim, rngs, jnp.float32)
        self.detector = nnx.Param(jnp.zeros((vocab_size, hidden_dim), jnp.float32))
        self.detector_bias = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
        self.gate = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
        self.relate = bool(relate)
        if self.relate:  # made last, so that the parameters above start as without it
            if d_model < 1:
                raise ValueError(f"a region verifier that relates needs the memory's d_model >= 1, got {d_model}")
            self.direction = nnx.Param(jnp.zeros((vocab_size, 2), jnp.float32))
            self.object_weight = nnx.Param(jnp.zeros((hidden_dim,), jnp.float32))
            self.relation_gate = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
            self.nothing_piece = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))  # set from the tokenizer
            self.relation_piece = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))  # set from the tokenizer
            self.relation_proj = dense(n_in, d_model, rngs, dtype)
            self.relation_norm = layer_norm(d_model, rngs, dtype)

    def scored_regions(self, mask: jax.Array, boxes: jax.Array, text_boxes: jax.Array,
                       text_mask: jax.Array) -> jax.Array:
        """``(batch, R)`` bool: the regions of ``mask`` it scores. With ``ocr_tokens``, those whose box lies less
        than :data:`TEXT_REGION_SHARE` inside every real OCR token's box (:func:`text_region_share`; module doc);
        without, ``mask`` as given. Arguments as :func:`text_region_share`, ``mask`` ``(batch, R)``."""
        mask = mask.astype(bool)
        if not self.ocr_tokens:
            return mask
        return mask & (text_region_share(boxes, text_boxes, text_mask) < TEXT_REGION_SHARE)

    def existence(self, features: jax.Array, boxes: jax.Array, mask: jax.Array, question: jax.Array,
                  question_mask: jax.Array, text_match: jax.Array | None = None,
                  text_mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """``(logit(e) (batch,), gate g (batch,))`` float32 of the module doc.

        Args:
          features: ``(batch, R, F)`` region features; boxes: ``(batch, R, 4)``; mask: ``(batch, R)`` bool.
          question: ``(batch, l)`` int piece ids; question_mask: ``(batch, l)`` bool.
          text_match: ``(batch, N)`` float, 1 where an OCR token occurs in the question; text_mask: ``(batch, N)``
            bool, the real OCR tokens. Both are needed when the module reads OCR tokens, and ignored otherwise.

        Raises:
          ValueError: a module that reads OCR tokens is given no ``text_match`` or ``text_mask``.
        """
        x = self._inputs(features, boxes)
        qm = question_mask.astype(jnp.float32)
        mean = qm / jnp.maximum(qm.sum(1, keepdims=True), 1.0)
        s = self._scores(jax.nn.relu(self.w1(x)), mask, question, qm)
        none = jnp.sum(jnp.log1p(-jnp.clip(s, 0.0, 1.0 - 1e-6)), 1)  # log prod (1 - s_r)
        e = -jnp.expm1(none)
        if self.ocr_tokens:
            if text_match is None or text_mask is None:
                raise ValueError("the region verifier reads OCR tokens (model.verifier.ocr_tokens) and was given "
                                 "no text_match or text_mask")
            written = jnp.any((text_match > 0) & text_mask.astype(bool), axis=1).astype(jnp.float32)
            pi = jax.nn.sigmoid(TEXT_GAIN * jnp.einsum("bl,bl->b", mean, self.text_weight[...][question]) - 4.0)
            e = pi * written + (1.0 - pi) * e
        e = jnp.clip(e, 1e-6, 1.0 - 1e-6)
        gate = jax.nn.sigmoid(jnp.einsum("bl,bl->b", mean, self.gate[...][question]))
        return jnp.log(e) - jnp.log1p(-e), gate

    def _inputs(self, features: jax.Array, boxes: jax.Array) -> jax.Array:
        """``(batch, R, F + 4)``: the read features and the box, standardized."""
        x = jnp.concatenate([features[..., :self.feature_dim].astype(jnp.float32), boxes.astype(jnp.float32)], -1)
        return (x - self.input_mean[...]) / self.input_std[...]

    def _scores(self, h: jax.Array, mask: jax.Array, question: jax.Array, weights: jax.Array) -> jax.Array:
        """``(batch, R)`` region scores ``s_r`` (0 at padding) for the detector that is the mean of the pieces'
        where ``weights`` ``(batch, l)`` is 1; ``h`` ``(batch, R, H)`` the region embeddings."""
        mean = weights / jnp.maximum(weights.sum(1, keepdims=True), 1.0)
        det = jnp.einsum("bl,blh->bh", mean, self.detector[...][question])
        bias = jnp.einsum("bl,bl->b", mean, self.detector_bias[...][question]) - 3.0
        s = jax.nn.sigmoid(jnp.einsum("brh,bh->br", h, det) + bias[:, None])
        return jnp.where(mask.astype(bool), s, 0.0)

    def comparisons(self, features: jax.Array, boxes: jax.Array, mask: jax.Array, question: jax.Array,
                    question_mask: jax.Array) -> dict[str, jax.Array]:
        """The counting and comparing terms of the module doc (``compare`` only; arguments as :meth:`existence`):
        ``log_count`` ``(batch, K + 1)`` the log-distribution of the count of the first thing the question names
        (floored at -20), ``count_gate`` ``(batch,)``, ``more`` and ``same`` ``(batch,)`` the logits of the count
        and attribute comparisons (turned round by a reversing word), ``route`` ``(batch, 3)``."""
        x = self._inputs(features, boxes)
        h = jax.nn.relu(self.w1(x))
        stop = jax.lax.stop_gradient
        first, second = comparing.question_segments(question, question_mask, stop(self.split_piece[...]))
        s_a = self._scores(h, mask, question, first)
        s_b = self._scores(h, mask, question, second) * (second.sum(1, keepdims=True) > 0)
        p_a = comparing.count_distribution(s_a, mask, self.max_count)
        p_b = comparing.count_distribution(s_b, mask, self.max_count)
        qm = question_mask.astype(jnp.float32)
        mean = qm / jnp.maximum(qm.sum(1, keepdims=True), 1.0)
        reversed_ = jnp.mod(jnp.sum(stop(self.reverse_piece[...])[question] * qm, 1), 2.0) > 0.5
        more = jnp.where(reversed_, comparing.greater_probability(p_b, p_a), comparing.greater_probability(p_a, p_b))
        more = jnp.clip(more, 1e-6, 1.0 - 1e-6)
        weights = jax.nn.softplus(jnp.einsum("bl,blf->bf", mean, self.attribute_weight[...][question]))
        same = SAME_GAIN * comparing.same_logit(comparing.soft_pointer(s_a, mask, x),
                                                comparing.soft_pointer(s_b, mask, x), weights, self.same_bias[...])
        # A question that names one thing compares nothing: only its existence answers it, so a folder of
        # yes/no questions without a split word trains the existence exactly as without ``compare``.
        two = second.sum(1) > 0
        start = jnp.where(two[:, None], jnp.asarray(ROUTE_START, jnp.float32),
                          jnp.asarray([0.0, -1e4, -1e4], jnp.float32))
        route = jax.nn.softmax(ROUTE_GAIN * jnp.einsum("bl,blk->bk", mean, self.route[...][question]) + start, -1)
        return {"log_count": jnp.maximum(jnp.log(jnp.maximum(p_a, 1e-30)), -20.0),
                "count_gate": jax.nn.sigmoid(jnp.einsum("bl,bl->b", mean, self.count_gate[...][question])),
                "more": jnp.log(more) - jnp.log1p(-more), "same": jnp.where(reversed_, -same, same), "route": route}

    def related(self, features: jax.Array, boxes: jax.Array, mask: jax.Array, question: jax.Array,
                question_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``relate`` only: ``(memory token (batch, 1, d_model), nothing bias (batch, V))`` of the relation rule
        (:func:`openvivqa_jax.models.comparing.relation_terms`; arguments as :meth:`existence`); the bias is 0
        for a question without a side word followed by other words."""
        x = self._inputs(features, boxes)
        h = jax.nn.relu(self.w1(x))
        qm = question_mask.astype(jnp.float32)
        mean = qm / jnp.maximum(qm.sum(1, keepdims=True), 1.0)
        _, named = comparing.question_segments(question, question_mask,
                                               jax.lax.stop_gradient(self.relation_piece[...]))
        s = self._scores(h, mask, question, jnp.where(named.sum(1, keepdims=True) > 0, named, qm))
        objectness = h @ self.object_weight[...]
        direction = jnp.einsum("bl,blk->bk", mean, self.direction[...][question])
        pointed, some = comparing.relation_terms(s, mask, boxes, x, objectness, direction)
        gate = jax.nn.sigmoid(jnp.einsum("bl,bl->b", mean, self.relation_gate[...][question]) - 2.0)
        token = self.relation_norm(self.relation_proj(pointed.astype(self.relation_proj.kernel[...].dtype)))
        # A question without a side word asks about no side, so its answer's first piece is left alone: the
        # denying answer often begins as "nothing" does (không / không có gì).
        side = (named.sum(1) > 0).astype(jnp.float32)
        bias = -(side * gate * some)[:, None] * jax.lax.stop_gradient(self.nothing_piece[...])[None]
        return token[:, None], bias

    def __call__(self, features: jax.Array, boxes: jax.Array, mask: jax.Array, question: jax.Array,
                 question_mask: jax.Array, polarity: jax.Array, text_match: jax.Array | None = None,
                 text_mask: jax.Array | None = None) -> jax.Array:
        """``(batch, V)`` float32 bias on the first answer piece's vocabulary logits; ``polarity`` ``(batch,)``
        +1 or -1 (other arguments and errors as :meth:`existence`). With ``relate``, the *nothing* bias of
        :meth:`related` is not in it (MLPAG adds it with the token)."""
        logit, gate = self.existence(features, boxes, mask, question, question_mask, text_match, text_mask)
        count_bias = 0.0
        if self.compare:
            c = self.comparisons(features, boxes, mask, question, question_mask)
            r = c["route"]
            p = (r[:, 0] * jax.nn.sigmoid(logit) + r[:, 1] * jax.nn.sigmoid(c["more"])
                 + r[:, 2] * jax.nn.sigmoid(c["same"]))
            p = jnp.clip(p, 1e-6, 1.0 - 1e-6)
            logit = jnp.log(p) - jnp.log1p(-p)
            numbers = jax.lax.stop_gradient(self.answer_number[...]).astype(jnp.int32)
            per_piece = jnp.take_along_axis(c["log_count"], jnp.broadcast_to(
                jnp.clip(numbers, 0, self.max_count)[None], (logit.shape[0], numbers.shape[0])), 1)
            said = (numbers > 0) & (numbers <= self.max_count)
            count_bias = c["count_gate"][:, None] * jnp.where(said[None], per_piece, 0.0)
        scale = 0.5 * gate * polarity.astype(jnp.float32) * logit
        return scale[:, None] * jax.lax.stop_gradient(self.answer_polarity[...])[None] + count_bias


def region_verifier(cfg, *, feature_dim: int, vocab_size: int, rngs: nnx.Rngs,
                    dtype=jnp.float32) -> RegionVerifier | None:
    """The :class:`RegionVerifier` of ``config.model.verifier`` (``enabled``; ``hidden_dim``, default 32;
    ``proposal_features``, ``"objects"`` (default) or ``"all"``; ``ocr_tokens``, default False; ``compare``,
    default False, with ``max_count``, default 10; ``relate``, default False, its memory token of width
    ``model.d_model`` in ``dtype``; module doc) over
    regions of ``feature_dim`` stored features, or None when it is off.

    Raises:
      ValueError: a verifier over a vision that has no regions (``model.vision.kind`` not ``proposals`` or
        ``region``), a ``hidden_dim`` or ``max_count`` below 1 or an unknown ``proposal_features``.
    """
    if not verifier_enabled(cfg):
        return None
    kind = (cfg.get("vision") or {}).get("kind")
    if kind not in ("proposals", "region"):
        raise ValueError(f"model.verifier scores image regions; model.vision.kind={kind!r} has none (use "
                         "'proposals', which makes them from the pixels, or 'region'), or set "
                         "--config.model.verifier.enabled=False")
    hidden = int(cfg.verifier.get("hidden_dim", 32))
    if hidden < 1:
        raise ValueError(f"model.verifier.hidden_dim must be >= 1, got {hidden}")
    max_count = int(cfg.verifier.get("max_count", 10))
    if max_count < 1:
        raise ValueError(f"model.verifier.max_count must be >= 1, got {max_count}")
    feature_dim = read_feature_dim(cfg.verifier.get("proposal_features", "objects"), kind, feature_dim,
                                   "model.verifier")
    return RegionVerifier(feature_dim=feature_dim, vocab_size=vocab_size, hidden_dim=hidden, rngs=rngs,
                          ocr_tokens=bool(cfg.verifier.get("ocr_tokens", False)),
                          compare=bool(cfg.verifier.get("compare", False)),
                          max_count=max_count,
                          relate=bool(cfg.verifier.get("relate", False)), d_model=int(cfg.d_model),
                          dtype=dtype)
