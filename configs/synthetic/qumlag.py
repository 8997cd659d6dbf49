"""QuMLAG on the embedded synthetic OpenViVQA set (paper §4.2; small sizes for CPU minutes).

configs/default.py with the model swapped: grid features stand in for region features, embeddings +
LSTM for the question, ``num_fusion_layers`` SA units per stream with question-guided attention, the
transformer decoder (vocabulary only).
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
    """Returns the synthetic QuMLAG config."""
    c = _default()
    m = c.model
    m.name = "qumlag"
    m.word_dim = m.d_model  # question piece embedding width (LSTM input)
    m.num_fusion_layers = 1  # SA units on the question; SA + GA units on the image
    return c
