"""MCAN on the embedded synthetic OpenViVQA set (Yu et al. 2019; small sizes for CPU minutes).

configs/synthetic/base.py with the model swapped: SA/SGA co-attention, attentional reduction, a classifier over
the top ``num_answers`` training answers trained with sigmoid BCE on soft scores. Widths and ``num_answers``:
configs/common.py ``synthetic``.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic MCAN config."""
    c = common.synthetic("mcan")
    m = c.model
    m.num_fusion_layers = 2  # SA units on the question; SA + GA units on the image
    m.num_glimpses = 1  # AttFlat glimpses
    m.classifier_loss = "bce"
    return c
