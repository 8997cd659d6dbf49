"""The tiny MLPAG (``configs/tiny.py``: d_model 32, one decoder layer) on the oracle detector's region features
of the ``tiny_regions`` synthetic set, with the question grounded in the image (``model.question_over_image``)
and given to the decoder (``model.question_in_memory``). Seconds to minutes on a CPU: used by the learnability
test (``tests/e2e/test_learnability.py``) to show that a non-text kind is learned above its chance rate.

Run: ``python -m openvivqa_jax.main --config configs/synthetic/mlpag_regions_tiny.py --workdir runs/tiny_regions``.
"""

import ml_collections

from openvivqa_jax.config_files import load_config

#: ``generator.REGION_FEATURE_DIM``: 8 class one-hot + 4 x 4 pooled RGB (a test checks the two agree).
REGION_DIM = 56


def get_config() -> ml_collections.ConfigDict:
    """Returns the tiny MLPAG config on oracle region features."""
    c = load_config("../tiny.py", relative_to=__file__)
    c.data.builder_config = "tiny_regions"
    c.model.vision.kind = "region"
    c.model.vision.num_regions = 24  # a scene has at most 14 objects + 3 signboards + a street sign + a banner
    c.model.vision.region_dim = REGION_DIM
    c.model.question_in_memory = True
    # With the tiny tokenizer (400 pieces) tiny.py's 12 steps cut 80.6% of the synthetic answers (an object's
    # colour is the answer's last word); 20 cut 6.1% (measured on 3,000 tiny pictures).
    c.model.max_answer_len = 20
    c.model.question_over_image = True
    return c
