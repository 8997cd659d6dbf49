"""QuMLAG at paper sizes on the real OpenViVQA dataset (paper §4.2; docs/design.md §6).

Usage (the dataset downloaded to ``~/data/openvivqa``, see ``tfds_builders/openvivqa``)::

    python -m openvivqa_jax.main --config configs/openvivqa/qumlag.py --workdir runs/qumlag \
        --config.data.manual_dir=~/data/openvivqa

Variants (``--config configs/openvivqa/qumlag.py:<variant>``): ``images`` (default; images + OCR, grid
features from a CNN), ``features`` (the authors' pre-extracted region features and scene text, the paper's
setting), ``benchmark`` (``features`` at docs/design.md §10's benchmark shapes). Data, tokenizer, training and
evaluation settings are configs/openvivqa/mlpag.py's, so the models compare on equal terms.
"""

import ml_collections

from openvivqa_jax.config_files import load_config

#: ``--config configs/openvivqa/qumlag.py:<variant>``.
VARIANTS = ("images", "features", "benchmark")


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size QuMLAG config for ``variant`` (``images``, ``features`` or ``benchmark``).

    Raises:
      ValueError: for an unknown variant.
    """
    c = load_config("mlpag.py", variant, relative_to=__file__)
    m = c.model
    m.name = "qumlag"
    m.d_model = 512
    m.num_heads = 8
    m.ffn_dim = 2048
    m.dropout = 0.1
    m.num_fusion_layers = 3  # SA units on the question; SA + GA units on the image (docs/design.md §10: 3+3)
    m.num_decoder_layers = 3
    m.word_dim = 300  # the paper's FastText width (embeddings trained here)
    return c
