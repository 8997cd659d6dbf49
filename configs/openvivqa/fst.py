"""FST at paper sizes on the real OpenViVQA dataset (paper §4.1, eq. 5-7; docs/design.md §6).

``--config configs/openvivqa/fst.py[:images|cnn|features|benchmark]``; usage, variants and the settings shared
with configs/openvivqa/mlpag.py: configs/common.py.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)
VARIANTS = common.OPENVIVQA_VARIANTS


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size FST config for ``variant`` (ValueError for an unknown one)."""
    c = common.openvivqa_paper("fst", variant)
    m = c.model
    m.num_decoder_layers = 3
    m.lstm_dim = 512  # d_Q
    m.attention_dim = 512  # width of W_I, W_Q (eq. 5)
    m.num_glimpses = 2  # G (the authors' code: GLIMPSES 2)
    m.append_question = True  # memory [x_f; W x_Q] as in the authors' code; False: eq. 7's x_f only
    return c
