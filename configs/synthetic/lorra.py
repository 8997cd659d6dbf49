"""LoRRA on the embedded synthetic OpenViVQA set (Singh et al. 2019; small sizes for CPU minutes).

configs/synthetic/base.py with the model swapped: image and OCR (context) attention guided by the question, a
classifier over the top ``num_answers`` training answers plus ``num_ocr`` OCR slots, sigmoid BCE. Widths and
``num_answers``: configs/common.py ``synthetic``.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic LoRRA config."""
    c = common.synthetic("lorra")
    m = c.model
    m.num_glimpses = 2  # image (and question self-attention) glimpses
    m.context_glimpses = 1  # OCR context-attention glimpses
    m.classifier_loss = "bce"
    return c
