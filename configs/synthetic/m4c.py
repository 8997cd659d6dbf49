"""M4C on the embedded synthetic OpenViVQA set (Hu et al. 2020; small sizes for CPU minutes).

configs/synthetic/base.py with the model swapped: a small from-scratch text encoder, one multimodal transformer
with the prefix-LM mask, tied previous-output embeddings and the dynamic pointer network; M4C's
multi-label BCE loss.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic M4C config."""
    c = common.synthetic("m4c")
    m = c.model
    m.num_text_layers = 1  # question encoder blocks
    m.num_mmt_layers = 2  # multimodal transformer blocks
    c.train.loss = "bce"  # M4C's multi-label BCE ('softmax': over the positive set)
    return c
