"""MCAN at paper sizes on the real OpenViVQA dataset (Yu et al. 2019; paper §5.1; docs/design.md §6).

Usage (the dataset downloaded to ``~/data/openvivqa``, see ``tfds_builders/openvivqa``)::

    python -m openvivqa_jax.main --config configs/openvivqa/mcan.py --workdir runs/mcan \
        --config.data.manual_dir=~/data/openvivqa

Variants (``--config configs/openvivqa/mcan.py:<variant>``): ``images`` (default; images + OCR, grid
features from a CNN), ``features`` (the authors' pre-extracted region features and scene text, the paper's
setting), ``benchmark`` (``features`` at docs/design.md §10's benchmark shapes). Data, tokenizer, training and
evaluation settings are configs/openvivqa/mlpag.py's, so the models compare on equal terms.

Classifier: ``model.num_answers`` is ``K``, the top-K training answers
(:class:`openvivqa_jax.text.answer_list.AnswerList`; set it to ``len(answer_list)`` when the train split
has fewer distinct answers). Predictions are decoded to text and scored by the same evaluator.
"""

import ml_collections

from openvivqa_jax.config_files import load_config

#: ``--config configs/openvivqa/mcan.py:<variant>``.
VARIANTS = ("images", "features", "benchmark")


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size MCAN config for ``variant`` (``images``, ``features`` or ``benchmark``).

    Raises:
      ValueError: for an unknown variant.
    """
    c = load_config("mlpag.py", variant, relative_to=__file__)
    m = c.model
    m.name = "mcan"
    m.d_model = 512
    m.num_heads = 8
    m.ffn_dim = 2048
    m.dropout = 0.1
    m.num_fusion_layers = 6  # MCAN: 6 SA + 6 SGA units (encoder-decoder)
    m.word_dim = 300
    m.num_glimpses = 1  # AttFlat glimpses
    m.classifier_dim = 1024  # AttFlat output (MCAN: 2 d)
    m.num_answers = 3000
    m.classifier_loss = "bce"
    return c
