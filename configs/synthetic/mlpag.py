"""MLPAG on the embedded synthetic OpenViVQA set: configs/synthetic/base.py as it is (paper §4.3, small sizes;
the pixel CNN).

Run: ``python -m openvivqa_jax.main --config configs/synthetic/mlpag.py --workdir runs/syn_mlpag``.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic MLPAG config (identical to configs/synthetic/base.py)."""
    return common.synthetic("mlpag")
