"""FST at paper sizes on the real OpenViVQA dataset (paper §4.1, eq. 5-7; DESIGN §6).

Usage (the dataset downloaded to ``~/data/openvivqa``, see ``tfds_builders/openvivqa``)::

    python -m openvivqa_jax.main --config configs/openvivqa/fst.py --workdir runs/fst \
        --config.data.manual_dir=~/data/openvivqa

Variants (``--config configs/openvivqa/fst.py:<variant>``): ``images`` (default; images + OCR, grid
features from a CNN), ``features`` (the authors' pre-extracted region features and scene text, the paper's
setting), ``benchmark`` (``features`` at DESIGN §10's benchmark shapes). Data, tokenizer, training and
evaluation settings are configs/openvivqa/mlpag.py's, so the models compare on equal terms.
"""

import importlib.util
import os

import ml_collections

#: ``--config configs/openvivqa/fst.py:<variant>``.
VARIANTS = ("images", "features", "benchmark")


def _base(variant: str) -> ml_collections.ConfigDict:
    """configs/openvivqa/mlpag.py's ``variant``: the data, training and evaluation settings all paper-size
    configs share (it validates ``variant``)."""
    path = os.path.join(os.path.dirname(__file__), "mlpag.py")
    spec = importlib.util.spec_from_file_location("configs_openvivqa_mlpag", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(variant)


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size FST config for ``variant`` (``images``, ``features`` or ``benchmark``).

    Raises:
      ValueError: for an unknown variant.
    """
    c = _base(variant)
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
