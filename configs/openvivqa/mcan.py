"""MCAN at paper sizes on the real OpenViVQA dataset (Yu et al. 2019; paper §5.1; docs/design.md §6).

``--config configs/openvivqa/mcan.py[:images|cnn|features|benchmark]``; usage, variants, ``num_answers`` and the
settings shared with configs/openvivqa/mlpag.py: configs/common.py.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)
VARIANTS = common.OPENVIVQA_VARIANTS


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size MCAN config for ``variant`` (ValueError for an unknown one)."""
    c = common.openvivqa_paper("mcan", variant)
    m = c.model
    m.num_fusion_layers = 6  # MCAN: 6 SA + 6 SGA units (encoder-decoder)
    m.num_glimpses = 1  # AttFlat glimpses
    m.classifier_dim = 1024  # AttFlat output (MCAN: 2 d)
    m.classifier_loss = "bce"
    return c
