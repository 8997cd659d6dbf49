"""The feature schema shared by every VQA builder (docs/design.md §3) and helpers to fill it.

Schema (one example = one question):

==============  ============================================================  ===========================
feature         type                                                          notes
==============  ============================================================  ===========================
``image``       ``tfds.features.Image`` (encoded JPEG/PNG bytes)              RGB, any size
``image_id``    ``Text``                                                      id as in the source files
``question_id`` ``Text``                                                      id as in the source files
``question``    ``Text``                                                      normalized (docs/design.md §4)
``answers``     ``Sequence(Text)``                                            all references, normalized;
                                                                                                                                                            empty when a split has none
``qa_type``     ``int32``                                                     1 text QA, 0 non-text, -1 unknown
``language``    ``Text``                                                      ISO 639-1 code of the question
                                                                              and answers: ``vi``, ``en``, ``ja``
``ocr``         ``Sequence({text: Text, box: float32[4], score: float32})``   box xyxy in [0, 1] of the image
==============  ============================================================  ===========================

Builders with pre-extracted region features add ``objects: {features: float16[N, D], boxes: float32[N, 4]}``
via :func:`vqa_features` with ``region_feature_dim``. Builders that know each question's template kind (the
synthetic set: ``name``, ``colour``, ``count``, ...) add ``kind: Text`` with ``with_kind``; readers treat a
dataset without it as kind ``""``.
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

__all__ = ["vqa_features", "empty_ocr", "QA_TYPE_TEXT", "QA_TYPE_NON_TEXT", "QA_TYPE_UNKNOWN", "LANGUAGES"]

QA_TYPE_TEXT = 1
QA_TYPE_NON_TEXT = 0
QA_TYPE_UNKNOWN = -1

#: The ``language`` values the builders write (ISO 639-1): Vietnamese for OpenViVQA, ViVQA, ViQuAD and the
#: synthetic set; English for TextVQA and ST-VQA; all three (per record) for EVJVQA.
LANGUAGES = ("vi", "en", "ja")


def vqa_features(with_image: bool = True, region_feature_dim: int | None = None,
                 with_kind: bool = False, compact_regions: bool = False,
                 extra: dict | None = None) -> tfds.features.FeaturesDict:
    """Returns the common VQA ``FeaturesDict``.

    Args:
        with_image: include the ``image`` feature (False only for feature-only configs).
        region_feature_dim: if given, add ``objects`` with ``features`` of shape ``(num_regions, D)``
            (float16) and ``boxes`` ``(num_regions, 4)`` (float32, xyxy in [0, 1]).
        with_kind: add ``kind`` (``Text``): the question's template kind, for scores per kind of question.
        compact_regions: store ``objects/features`` as raw bytes (``Encoding.BYTES``) instead of a protobuf float
            list: for 50 x 2048 regions 0.1 ms instead of 27 ms to serialize, about 0 instead of 11 ms to parse,
            and half the bytes. Changes the stored format (a builder that turns it on bumps its version).
        extra: a builder's own features ``{name: feature}``, added after the common ones (ST-VQA's
            ``dictionary``, ViVQA's ``question_type``, ViQuAD's passage and spans).

    Returns:
        The feature specification.
    """
    feats = {
            "image_id": tfds.features.Text(),
            "question_id": tfds.features.Text(),
            "question": tfds.features.Text(),
            "answers": tfds.features.Sequence(tfds.features.Text()),
            "qa_type": np.int32,
            "language": tfds.features.Text(),
            "ocr": tfds.features.Sequence({
                    "text": tfds.features.Text(),
                    "box": tfds.features.Tensor(shape=(4,), dtype=np.float32),
                    "score": np.float32,
            }),
    }
    if with_image:
        feats["image"] = tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg")
    if with_kind:
        feats["kind"] = tfds.features.Text()
    if region_feature_dim is not None:
        feats["objects"] = {
                "features": tfds.features.Tensor(
                    shape=(None, region_feature_dim), dtype=np.float16,
                    encoding=tfds.features.Encoding.BYTES if compact_regions else tfds.features.Encoding.NONE),
                "boxes": tfds.features.Tensor(shape=(None, 4), dtype=np.float32),
        }
    feats.update(extra or {})
    return tfds.features.FeaturesDict(feats)


def empty_ocr() -> dict:
    """Returns an ``ocr`` value with no tokens, in the layout TFDS expects for a sequence of dicts."""
    return {"text": [], "box": np.zeros((0, 4), np.float32), "score": np.zeros((0,), np.float32)}
