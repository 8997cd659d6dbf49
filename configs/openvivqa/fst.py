"""FST at paper sizes on the real OpenViVQA dataset (paper §4.1, eq. 5-7; docs/design.md §6).

Usage (the dataset downloaded to ``~/data/openvivqa``, see ``tfds_builders/openvivqa``)::

    python -m openvivqa_jax.main --config configs/openvivqa/fst.py --workdir runs/fst \
        --config.data.manual_dir=~/data/openvivqa

Variants (``--config configs/openvivqa/fst.py:<variant>``): ``images`` (default; images + OCR, grid
features from a CNN), ``features`` (the authors' pre-extracted region features and scene text, the paper's
setting), ``benchmark`` (``features`` at docs/design.md §10's benchmark shapes). Data, tokenizer, training and
evaluation settings are configs/openvivqa/mlpag.py's, so the models compare on equal terms.
"""

import ml_collections

from openvivqa_jax.config_files import load_config

#: ``--config configs/openvivqa/fst.py:<variant>``.
VARIANTS = ("images", "features", "benchmark")


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size FST config for ``variant`` (``images``, ``features`` or ``benchmark``).

    Raises:
      ValueError: for an unknown variant.
    """
    c = load_config("mlpag.py", variant, relative_to=__file__)
    m = c.model
    m.name = "fst"
    m.d_model = 512
    m.num_heads = 8
    m.ffn_dim = 2048
    m.dropout = 0.1
    m.num_decoder_layers = 3
    m.word_dim = 300  # the paper's FastText width (embeddings trained here)
    m.lstm_dim = 512  # d_Q
    m.attention_dim = 512  # width of W_I, W_Q (eq. 5)
    m.num_glimpses = 2  # G (the authors' code: GLIMPSES 2)
    m.append_question = True  # memory [x_f; W x_Q] as in the authors' code; False: eq. 7's x_f only
    return c
