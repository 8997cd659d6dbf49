"""Answer classifiers (SAAA, MCAN, LoRRA): the shared base class, its losses and prediction.

A classifier scores ``K`` answer classes, the top-K normalized training answers of an
:class:`~openvivqa_jax.text.answer_list.AnswerList`, and (LoRRA only) ``N`` more classes, one per OCR
slot ("copy OCR token ``j``"). Class ids: ``[0, K)`` answers, ``K + j`` OCR slot ``j``. **Class 0 is a real
answer (the most frequent one) and is trained like any other**; the authors' code ignored it.

Interface (``is_generator = False``; compare :mod:`openvivqa_jax.models.base` for generators)::

    logits = model(batch, deterministic=..., rngs=...)   # (batch, K [+ N]) float32
    loss, metrics = model.loss(logits, batch)            # needs batch["answer_scores"] (batch, K [+ N])
    class_ids = model.predict(logits, batch)             # (batch,) int32; OCR padding slots never chosen
    text = answer_list.decode(int(class_ids[i]), ocr_tokens_of_example_i)

Batch keys read here (besides each model's inputs):

* ``answer_scores`` ``(batch, K [+ N])`` float32 soft scores in [0, 1] from
  :meth:`AnswerList.scores <openvivqa_jax.text.answer_list.AnswerList.scores>` (VQA soft score
  ``min(#matching references / 3, 1)``);
* ``ocr_mask`` ``(batch, N)`` bool (models with OCR classes): padding slots are excluded from the loss
  and from prediction;
* ``valid`` ``(batch,)`` bool, optional: rows with ``False`` (evaluation padding) do not count.

Losses (each model's paper):

* ``softmax`` (SAAA, Kazemi & Elqursh 2017 §3.4: the average negative log-likelihood of the ground-truth
  answers): cross-entropy of the softmax over the valid classes against the target distribution
  ``answer_scores / sum(answer_scores)``; rows whose references are all outside the class list (score sum
  0) carry no target and do not count;
* ``bce`` (MCAN, Yu et al. 2019; LoRRA/Pythia ``logit_bce``): per-class sigmoid binary cross-entropy
  against the soft scores, summed over the valid classes and averaged over rows (every valid row counts).

Metrics: ``loss``; ``accuracy``, the mean soft score of the predicted class (VQA accuracy against the
soft targets); ``num_examples``, the rows counted.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from openvivqa_jax.models.embeddings import vision_encoder
from openvivqa_jax.models.layers import NEG_INF

__all__ = ["ClassifierModel", "LOSSES", "soft_cross_entropy_loss", "soft_bce_loss", "class_mask"]


def _metrics(logits, scores, cmask, rows, loss):
    pred = jnp.argmax(jnp.where(cmask, logits, NEG_INF), -1)
    got = jnp.take_along_axis(scores, pred[:, None], -1)[:, 0]
    n = jnp.maximum(rows.sum(), 1)
    return {"loss": loss, "accuracy": jnp.where(rows, got, 0.0).sum() / n, "num_examples": rows.sum()}


def soft_cross_entropy_loss(logits: jax.Array, scores: jax.Array, cmask: jax.Array,
                            example_mask: jax.Array | None = None) -> tuple[jax.Array, dict]:
    """Softmax cross-entropy against soft targets (SAAA; Kazemi & Elqursh 2017).

    ``loss_i = -sum_c p_ic log softmax(z_i)_c`` with ``p_ic = s_ic / sum_c s_ic`` over valid classes.

    Args:
      logits: ``(batch, C)`` float32.
      scores: ``(batch, C)`` soft scores in [0, 1].
      cmask: ``(batch, C)`` bool, classes that exist for the row (OCR padding slots False).
      example_mask: ``(batch,)`` bool rows to count (None: all).

    Returns:
      ``(mean loss over counted rows, metrics)``; a row counts when it is in ``example_mask`` and has a
      positive score on some valid class.
    """
    logits = logits.astype(jnp.float32)
    scores = jnp.where(cmask, scores.astype(jnp.float32), 0.0)
    total = scores.sum(-1)
    rows = total > 0
    if example_mask is not None:
        rows = rows & example_mask.astype(bool)
    target = scores / jnp.maximum(total, 1e-12)[:, None]
    logp = jax.nn.log_softmax(jnp.where(cmask, logits, NEG_INF), -1)
    per = -(jnp.where(cmask, target * logp, 0.0)).sum(-1)
    loss = jnp.where(rows, per, 0.0).sum() / jnp.maximum(rows.sum(), 1)
    return loss, _metrics(logits, scores, cmask, rows, loss)


def soft_bce_loss(logits: jax.Array, scores: jax.Array, cmask: jax.Array,
                  example_mask: jax.Array | None = None) -> tuple[jax.Array, dict]:
    """Sigmoid binary cross-entropy against soft scores (MCAN; LoRRA/Pythia ``logit_bce``).

    ``loss_i = sum_{c valid} [max(z, 0) - z s + log(1 + exp(-|z|))]`` (numerically stable BCE with logits),
    averaged over counted rows.

    Args: as :func:`soft_cross_entropy_loss`; every row in ``example_mask`` counts.

    Returns:
      ``(loss, metrics)``.
    """
    z = jnp.where(cmask, logits.astype(jnp.float32), 0.0)
    s = jnp.where(cmask, scores.astype(jnp.float32), 0.0)
    bce = jnp.maximum(z, 0.0) - z * s + jnp.log1p(jnp.exp(-jnp.abs(z)))
    per = jnp.where(cmask, bce, 0.0).sum(-1)
    rows = jnp.ones(per.shape, bool) if example_mask is None else example_mask.astype(bool)
    loss = jnp.where(rows, per, 0.0).sum() / jnp.maximum(rows.sum(), 1)
    return loss, _metrics(logits, s, cmask, rows, loss)


#: ``name -> loss function`` for :attr:`ClassifierModel.loss_type`.
LOSSES = {"softmax": soft_cross_entropy_loss, "bce": soft_bce_loss}


def class_mask(batch_size: int, num_answers: int, ocr_mask: jax.Array | None) -> jax.Array:
    """Valid classes ``(batch, K [+ N])`` bool: all ``K`` answers, then the real OCR slots if given."""
    answers = jnp.ones((batch_size, num_answers), bool)
    if ocr_mask is None:
        return answers
    return jnp.concatenate([answers, ocr_mask.astype(bool)], -1)


class ClassifierModel(nnx.Module):
    """Base class of the answer classifiers (module docstring for the interface and the losses).

    Subclasses call this ``__init__`` first, then make their own modules, and implement
    ``__call__(batch, *, deterministic, rngs) -> (batch, K + num_ocr_classes)`` logits.

    Args:
      cfg: ``config.model`` (num_answers ``K``, vision.*, classifier_loss).
      vocab_size: ``V``.
      default_loss: ``loss_type`` (``"softmax"`` or ``"bce"``) unless ``cfg.classifier_loss`` names one.
      num_ocr_classes: ``N`` OCR slots after the ``K`` answers (LoRRA), else 0.
      rngs: parameter RNGs.
      dtype: compute dtype.

    Raises:
      ValueError: for an unknown loss name.
    """

    is_generator = False
    num_answers: int
    num_ocr_classes: int = 0
    loss_type: str = "bce"

    def __init__(self, cfg, vocab_size: int, *, default_loss: str, num_ocr_classes: int = 0, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.vocab_size = vocab_size
        self.num_answers = cfg.num_answers
        self.num_ocr_classes = num_ocr_classes
        self._set_loss(cfg, default_loss)
        # Made before the subclass's own modules: parameters draw their RNGs in the order modules are made.
        self.vision = vision_encoder(cfg, rngs=rngs, dtype=dtype)

    def _set_loss(self, cfg, default: str) -> None:
        """Sets ``loss_type`` from ``cfg.classifier_loss`` (or ``default``).

        Raises:
          ValueError: for an unknown loss name.
        """
        kind = cfg.get("classifier_loss", None) or default
        if kind not in LOSSES:
            raise ValueError(f"classifier_loss must be one of {sorted(LOSSES)}, got {kind!r}")
        self.loss_type = kind

    def output_mask(self, batch: dict) -> jax.Array:
        """Valid classes ``(batch, K [+ N])`` bool for ``batch`` (OCR padding slots False)."""
        b = batch["question"].shape[0]
        ocr = batch["ocr_mask"] if self.num_ocr_classes else None
        return class_mask(b, self.num_answers, ocr)

    def loss(self, logits: jax.Array, batch: dict) -> tuple[jax.Array, dict]:
        """The paper's loss of ``logits`` ``(batch, K [+ N])`` against ``batch["answer_scores"]``.

        Raises:
          ValueError: if ``answer_scores`` does not have ``K [+ N]`` columns.
        """
        scores = batch["answer_scores"]
        if scores.shape[-1] != logits.shape[-1]:
            raise ValueError(
                f"{type(self).__name__}: answer_scores has {scores.shape[-1]} classes, the model outputs "
                f"{logits.shape[-1]} (num_answers={self.num_answers}, OCR classes={self.num_ocr_classes}); "
                "set config.model.num_answers = len(answer_list)")
        valid = batch.get("valid")
        return LOSSES[self.loss_type](logits, scores, self.output_mask(batch), valid)

    def predict(self, logits: jax.Array, batch: dict) -> jax.Array:
        """Predicted class ids ``(batch,)`` int32 (``>= K``: OCR slot ``id - K``), padding slots excluded."""
        return jnp.argmax(jnp.where(self.output_mask(batch), logits, NEG_INF), -1).astype(jnp.int32)
