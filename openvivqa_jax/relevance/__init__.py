"""The ``relevance`` task: trains a W2VV++ sentence encoder (:mod:`openvivqa_jax.models.w2vvpp`) that projects
sentences of one language into a visual feature space, for CLinRel and CMedRel
(:mod:`openvivqa_jax.evaluation.relevance`, ``papers/cross_lingual_caption_eval.md``).

Laid out as every task of the package (config, model, loop, evaluation): :mod:`.config` (the relevance fields of
the config), :mod:`.model` (the encoder: vocabulary, W2VV++ model, :func:`~.model.load_encoder`),
:mod:`.features` (image feature files, pooling, standardization), :mod:`.data` (text/image pairs and every
image's feature), :mod:`.train` (the loop) and :mod:`.evals` (retrieval recall, ``--mode evaluate``). The
metrics read the encoder and the feature files through :mod:`.model` and :mod:`.features`, never the loop.

Run: ``python -m openvivqa_jax.main --config configs/relevance/w2vvpp.py --workdir runs/w2vvpp_vi``
(``--mode evaluate`` scores the best checkpoint again).

Data: (text, image feature) pairs from a built TFDS dataset (``config.data``). The text of a pair is an answer
(``data.pair_text = "answer"``) or the question and the answer (``"question_answer"``), one pair per reference
answer; only questions of ``data.language`` are used when the records carry a language (EVJVQA), so one
encoder is trained per language. Words are the tokens of the normalized text
(:func:`openvivqa_jax.relevance.model.words`: whitespace, Japanese per character, punctuation dropped).

Visual features (``config.visual.source``), fixed during training as in W2VV++:

* ``regions``: the image's region features (the synthetic ``*_regions`` builder configs, the OpenViVQA
  ``features`` variant), averaged per cell of ``visual.pool_grid`` (by box centre; ``(1, 1)``: the mean of the
  region features) and concatenated;
* ``cnn``: the project's ``SmallCNN`` (``models/layers.py``) over the image, its grid average-pooled to
  ``visual.pool_grid``; the CNN keeps its seeded initialization (random features: no trained backbone ships
  with the project);
* ``vit``: a ViT from a big_vision ``.npz`` (``visual.vit_checkpoint``, sizes as ``model.vision`` of the VQA
  configs: ``vit_variant``...), grid pooled the same way;
* ``file``: a user file of precomputed vectors keyed by image id (:func:`.features.read_feature_file`).

The features of every image of every split are written to ``<workdir>/image_features.npz`` (keys: image ids),
which CMedRel reads when no other file is given.

Workdir: ``relevance_model.json`` (language, vocabulary, sizes), ``checkpoints/`` and ``best/`` (orbax, the best
by dev ``train.best_metric``, default ``rsum``, the sum of the recalls), ``metrics.jsonl`` and TensorBoard events
(clu), ``eval/<split>_retrieval.json``. Training resumes from the last checkpoint; a batch depends only on the
seed and the step, so a resumed run draws what the uninterrupted run would have. Ctrl-C / SIGTERM saves the
current step first (:mod:`openvivqa_jax.training.interrupts`).
"""

from __future__ import annotations

from openvivqa_jax.errors import UserError

__all__ = ["RelevanceModelError", "FeatureFileError"]


class RelevanceModelError(UserError, ValueError):
    """A relevance model that cannot be used: no model in the folder, another language than the data, a
    checkpoint that does not fit (one line naming the folder)."""


class FeatureFileError(UserError, ValueError):
    """An image-feature file that cannot be used: unreadable, not keyed by image id, the wrong width, or
    missing an image (one line naming the file)."""
