"""SAAA at paper sizes on the real OpenViVQA dataset (Kazemi & Elqursh 2017; paper §5.1; docs/design.md §6).

``--config configs/openvivqa/saaa.py[:images|cnn|features|benchmark]``; usage, variants, ``num_answers`` and the
settings shared with configs/openvivqa/mlpag.py: configs/common.py.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)
VARIANTS = common.OPENVIVQA_VARIANTS


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size SAAA config for ``variant`` (ValueError for an unknown one)."""
    c = common.openvivqa_paper("saaa", variant)
    m = c.model
    m.lstm_dim = 1024  # Kazemi & Elqursh: LSTM 1024
    m.attention_dim = 512  # their attention conv width
    m.num_glimpses = 2
    m.classifier_dim = 1024  # their fully connected layer
    m.classifier_loss = "softmax"
    return c
