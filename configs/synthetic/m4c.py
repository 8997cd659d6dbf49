"""M4C on the embedded synthetic OpenViVQA set (Hu et al. 2020; small sizes for CPU minutes).

configs/default.py with the model swapped: a small from-scratch text encoder, one multimodal transformer
with the prefix-LM mask, tied previous-output embeddings and the dynamic pointer network; M4C's
multi-label BCE loss.
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
    """Returns the synthetic M4C config."""
    c = _default()
    m = c.model
    m.name = "m4c"
    m.num_text_layers = 1  # question encoder blocks
    m.num_mmt_layers = 2  # multimodal transformer blocks
    c.train.loss = "bce"  # M4C's multi-label BCE ('softmax': over the positive set)
    return c
