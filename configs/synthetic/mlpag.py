"""MLPAG on the embedded synthetic OpenViVQA set: configs/default.py as it is (paper §4.3, small sizes).

Run: ``python -m openvivqa_jax.main --config configs/synthetic/mlpag.py --workdir runs/syn_mlpag``.
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
    """Returns the synthetic MLPAG config (identical to configs/default.py)."""
    c = _default()
    c.model.name = "mlpag"
    return c
