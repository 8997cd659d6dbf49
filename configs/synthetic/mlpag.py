"""MLPAG on the embedded synthetic OpenViVQA set: configs/default.py as it is (paper §4.3, small sizes).

Run: ``python -m openvivqa_jax.main --config configs/synthetic/mlpag.py --workdir runs/syn_mlpag``.
"""

import ml_collections

from openvivqa_jax.config_files import load_config


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic MLPAG config (identical to configs/default.py)."""
    c = load_config("../default.py", relative_to=__file__)
    c.model.name = "mlpag"
    return c
