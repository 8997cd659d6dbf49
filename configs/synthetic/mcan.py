"""MCAN on the embedded synthetic OpenViVQA set (Yu et al. 2019; small sizes for CPU minutes).

configs/default.py with the model swapped: SA/SGA co-attention, attentional reduction, a classifier over
the top ``num_answers`` training answers trained with sigmoid BCE on soft scores.
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
    """Returns the synthetic MCAN config."""
    c = _default()
    m = c.model
    m.name = "mcan"
    m.word_dim = m.d_model
    m.num_fusion_layers = 2  # SA units on the question; SA + GA units on the image
    m.num_glimpses = 1  # AttFlat glimpses
    m.classifier_dim = 2 * m.d_model  # AttFlat output width (MCAN: 2 d)
    m.num_answers = 1000  # K, an upper bound: the answer list may be shorter
    m.classifier_loss = "bce"
    return c
