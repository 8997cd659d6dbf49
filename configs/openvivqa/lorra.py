"""LoRRA at paper sizes on the real OpenViVQA dataset (Singh et al. 2019; paper §5.1; docs/design.md §6).

Usage (the dataset downloaded to ``~/data/openvivqa``, see ``tfds_builders/openvivqa``)::

    python -m openvivqa_jax.main --config configs/openvivqa/lorra.py --workdir runs/lorra \
        --config.data.manual_dir=~/data/openvivqa

Variants (``--config configs/openvivqa/lorra.py:<variant>``): ``images`` (default; images + OCR, grid
features from a CNN), ``features`` (the authors' pre-extracted region features and scene text, the paper's
setting), ``benchmark`` (``features`` at docs/design.md §10's benchmark shapes). Data, tokenizer, training and
evaluation settings are configs/openvivqa/mlpag.py's, so the models compare on equal terms.

Classifier: ``model.num_answers`` is ``K``, the top-K training answers
(:class:`openvivqa_jax.text.answer_list.AnswerList`; set it to ``len(answer_list)`` when the train split
has fewer distinct answers). Predictions are decoded to text and scored by the same evaluator.
"""

import ml_collections

from openvivqa_jax.config_files import load_config

#: ``--config configs/openvivqa/lorra.py:<variant>``.
VARIANTS = ("images", "features", "benchmark")


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size LoRRA config for ``variant`` (``images``, ``features`` or ``benchmark``).

    Raises:
      ValueError: for an unknown variant.
    """
    c = load_config("mlpag.py", variant, relative_to=__file__)
    m = c.model
    m.name = "lorra"
    m.d_model = 512
    m.num_heads = 8
    m.ffn_dim = 2048
    m.dropout = 0.1
    m.word_dim = 300
    m.lstm_dim = 1024  # Pythia/LoRRA question LSTM
    m.attention_dim = 1024  # top-down attention combine width
    m.num_glimpses = 2  # image attention and question self-attention glimpses
    m.context_glimpses = 1  # OCR context attention
    m.classifier_dim = 1024
    m.num_answers = 3000  # K answers; + num_ocr OCR classes
    m.classifier_loss = "bce"
    return c
