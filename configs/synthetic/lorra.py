"""LoRRA on the embedded synthetic OpenViVQA set (Singh et al. 2019; small sizes for CPU minutes).

configs/default.py with the model swapped: image and OCR (context) attention guided by the question, a
classifier over the top ``num_answers`` training answers plus ``num_ocr`` OCR slots, sigmoid BCE.
"""

import importlib.util
import os

import ml_collections


def _default() -> ml_collections.ConfigDict:
    """configs/default.py, loaded from its file path."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "default.py")
    spec = importlib.util.spec_from_file_location("configs_default", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic LoRRA config."""
    c = _default()
    m = c.model
    m.name = "lorra"
    m.word_dim = m.d_model
    m.lstm_dim = m.d_model
    m.attention_dim = m.d_model  # top-down attention combine width
    m.num_glimpses = 2  # image (and question self-attention) glimpses
    m.context_glimpses = 1  # OCR context-attention glimpses
    m.classifier_dim = 2 * m.d_model
    m.num_answers = 1000  # K, an upper bound: the answer list may be shorter
    m.classifier_loss = "bce"
    return c
