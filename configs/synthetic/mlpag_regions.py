"""MLPAG on region features, as in its paper (OpenViVQA §4.3: detector region features of the image), on the
synthetic set's oracle detector: ``synthetic_openvivqa/default_clean_regions`` stores, for every drawn object,
signboard, street sign and banner, its ground-truth box and a feature of its class one-hot and its pooled
colours (``tfds_builders/synthetic_openvivqa/generator.py`` ``detector_regions``). Everything else is
configs/default.py.

It separates the two halves of a non-text answer: with exact regions, errors on colour, count and side come
from the fusion and the decoder, not from the small pixel CNN of the default config (docs/evaluation.md,
"Non-text questions").

Run: ``python -m openvivqa_jax.main --config configs/synthetic/mlpag_regions.py --workdir runs/syn_regions``.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)

#: ``generator.REGION_FEATURE_DIM``: 8 class one-hot + 4 x 4 pooled RGB (a test checks the two agree).
REGION_DIM = 56


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic MLPAG config on the oracle detector's region features."""
    c = common.synthetic("mlpag")
    c.data.builder_config = "default_clean_regions"
    c.model.vision.kind = "region"
    c.model.vision.num_regions = 24  # a scene has at most 14 objects + 3 signboards + a street sign + a banner
    c.model.vision.region_dim = REGION_DIM
    return c
