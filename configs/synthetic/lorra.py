"""LoRRA on the embedded synthetic OpenViVQA set (Singh et al. 2019; small sizes for CPU minutes).

configs/default.py with the model swapped: image and OCR (context) attention guided by the question, a
classifier over the top ``num_answers`` training answers plus ``num_ocr`` OCR slots, sigmoid BCE.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic LoRRA config."""
    c = common.synthetic("lorra")
    m = c.model
    m.word_dim = m.d_model
    m.lstm_dim = m.d_model
    m.attention_dim = m.d_model  # top-down attention combine width
    m.num_glimpses = 2  # image (and question self-attention) glimpses
    m.context_glimpses = 1  # OCR context-attention glimpses
    m.classifier_dim = 2 * m.d_model
    m.num_answers = 1000  # K, an upper bound: the answer list may be shorter
    m.classifier_loss = "bce"
    return c
