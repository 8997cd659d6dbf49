"""LoRRA at paper sizes on the real OpenViVQA dataset (Singh et al. 2019; paper §5.1; docs/design.md §6).

``--config configs/openvivqa/lorra.py[:images|cnn|features|benchmark]``; usage, variants, ``num_answers`` and the
settings shared with configs/openvivqa/mlpag.py: configs/common.py.

``images`` and ``features``: the question embedding starts from fastText vectors and the OCR tokens get their
300-d fastText features, as LoRRA's, when ``--config.model.fasttext.path=<cc.vi.300.bin>`` is given
(docs/pretrained.md); without it one warning line says the embeddings start random and the features are zero.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)
VARIANTS = common.OPENVIVQA_VARIANTS


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size LoRRA config for ``variant`` (ValueError for an unknown one)."""
    c = common.openvivqa_paper("lorra", variant)
    m = c.model
    m.lstm_dim = 1024  # Pythia/LoRRA question LSTM
    m.attention_dim = 1024  # top-down attention combine width
    m.num_glimpses = 2  # image attention and question self-attention glimpses
    m.context_glimpses = 1  # OCR context attention
    m.classifier_dim = 1024  # over K answers + num_ocr OCR classes
    m.classifier_loss = "bce"
    return c
