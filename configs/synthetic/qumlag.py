"""QuMLAG on the embedded synthetic OpenViVQA set (paper §4.2; small sizes for CPU minutes).

configs/synthetic/base.py with the model swapped: grid features stand in for region features, embeddings +
LSTM for the question, ``num_fusion_layers`` SA units per stream with question-guided attention, the
transformer decoder (vocabulary only). The embedding width is ``d_model`` (configs/common.py ``synthetic``).
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic QuMLAG config."""
    c = common.synthetic("qumlag")
    m = c.model
    m.num_fusion_layers = 1  # SA units on the question; SA + GA units on the image
    return c
