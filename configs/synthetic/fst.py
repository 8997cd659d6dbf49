"""FST on the embedded synthetic OpenViVQA set (paper §4.1, eq. 5-7; small sizes for CPU minutes).

configs/synthetic/base.py with the model swapped: grid features from the small CNN, an LSTM question encoder,
stacked attention with ``num_glimpses`` glimpses, the transformer decoder (vocabulary only). The embedding,
LSTM (d_Q) and attention (W_I, W_Q of eq. 5) widths are ``d_model`` (configs/common.py ``synthetic``).
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic FST config."""
    c = common.synthetic("fst")
    m = c.model
    m.num_glimpses = 2  # G columns of a in eq. 5 (the authors' code: 2)
    m.append_question = True  # memory [x_f; W x_Q] (authors' code); False: x_f only (eq. 7)
    return c
