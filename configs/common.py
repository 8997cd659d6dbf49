"""What the config files share (not a config itself: it has no ``get_config``).

Config files are plain Python files read by path (:mod:`openvivqa_jax.config_files`), so a config loads this
module by path too, which works from any current directory::

    from openvivqa_jax.config_files import config_module

    common = config_module("../common.py", relative_to=__file__)

**Paper-size configs** (``configs/openvivqa/<model>.py``, :func:`openvivqa_paper`): every model of the zoo at
the sizes of its paper on the real OpenViVQA dataset, with the data, tokenizer, training and evaluation
settings of configs/openvivqa/mlpag.py so that the models compare on equal terms. Usage (the dataset
downloaded to ``~/data/openvivqa``, see ``tfds_builders/openvivqa``)::

    python -m openvivqa_jax.main --config configs/openvivqa/<model>.py[:<variant>] --workdir runs/<model> \\
        --config.data.manual_dir=~/data/openvivqa

Variants (:data:`OPENVIVQA_VARIANTS`):

* ``images`` (default): images + tesseract OCR at build time; a CNN backbone gives grid features.
* ``features``: the authors' pre-extracted per-image feature files (region features 2048-d + boxes,
  scene-text tokens), i.e. the paper's setting.
* ``benchmark``: ``features`` at docs/design.md §10's benchmark shapes (50 regions of 1024-d, 50 OCR tokens
  with det 256 / rec 256 / fastText 300 features, question 20, answer 20, vocabulary 4,000, batch 64).

Classifiers (SAAA, MCAN, LoRRA): ``model.num_answers`` is ``K``, the top-K training answers
(:class:`openvivqa_jax.text.answer_list.AnswerList`; set it to ``len(answer_list)`` when the train split has
fewer distinct answers). Predictions are decoded to text and scored by the same evaluator.

**Synthetic configs** (``configs/synthetic/<model>.py``, :func:`synthetic`): configs/default.py (the
embedded synthetic OpenViVQA set, small sizes for CPU minutes) with the model swapped.
"""

import ml_collections

from openvivqa_jax.config_files import load_config

#: ``--config configs/openvivqa/<model>.py:<variant>``.
OPENVIVQA_VARIANTS = ("images", "features", "benchmark")
#: Models whose question tokens are embedded with FastText (OpenViVQA §4.2-4.3; LoRRA, whose English question
#: embedding is GloVe, with FastText as there are no Vietnamese GloVe vectors):
#: their ``images`` / ``features`` configs start the question embedding from ``model.fasttext.path``.
FASTTEXT_QUESTION_MODELS = ("mlpag", "qumlag", "lorra")
#: Models whose OCR token features include 300-d fastText vectors (``ocr_fasttext``; MLPAG §4.3, LoRRA, M4C §3.2),
#: computed from ``model.fasttext.path`` in the ``images`` / ``features`` configs.
FASTTEXT_OCR_MODELS = ("mlpag", "lorra", "m4c")


def check_variant(variant: str, variants: tuple[str, ...]) -> None:
    """Raises ``ValueError("unknown variant 'x'; expected one of (...)")`` unless ``variant`` is in ``variants``."""
    if variant not in variants:
        raise ValueError(f"unknown variant {variant!r}; expected one of {variants}")


def openvivqa_paper(name: str, variant: str, *, d_model: int = 512, num_heads: int = 8, ffn_dim: int = 2048,
                    dropout: float = 0.1) -> ml_collections.ConfigDict:
    """configs/openvivqa/mlpag.py's config for ``variant`` with ``model.name = name`` and the transformer sizes.

    Args:
      name: the model (``config.model.name``).
      variant: one of :data:`OPENVIVQA_VARIANTS`.
      d_model, num_heads, ffn_dim, dropout: the transformer sizes (configs/openvivqa/mlpag.py's by default).

    Returns:
      The config; the caller sets the model's own fields.

    Raises:
      ValueError: for an unknown variant.
    """
    c = load_config("openvivqa/mlpag.py", variant, relative_to=__file__)
    m = c.model
    m.name = name
    if name not in FASTTEXT_QUESTION_MODELS:
        m.question_embedding = "learned"
    if name not in FASTTEXT_OCR_MODELS and variant != "benchmark":
        m.ocr_extra_features = {}
    m.d_model = d_model
    m.num_heads = num_heads
    m.ffn_dim = ffn_dim
    m.dropout = dropout
    return c


def synthetic(name: str) -> ml_collections.ConfigDict:
    """configs/default.py (the synthetic set at small sizes) with ``model.name = name``."""
    c = load_config("default.py", relative_to=__file__)
    c.model.name = name
    return c
