"""MLPAG that sees from pixels with no detector: class-free region proposals (``model.vision.kind =
"proposals"``, ``openvivqa_jax/data/proposals.py``) give one memory slot per segment of the picture, with its
colours, shape, context and box, so it runs on any folder of photos and on ``predict``. Training is the grounded
config's (``mlpag_regions_grounded.py``: 12,000 training pictures, both grounding options, the kind weights)
with the word–region loss, for 4,000 steps.

Each picture's proposals are made once, by every core, into the model-ready records (``data.model_ready``).
Measured (docs/results.md, "Seeing without a detector"): object colour and side are learned from the pixels,
object count is not; shop names are copied less often than by the pixel-grid default.

Run: ``python -m openvivqa_jax.main --config configs/synthetic/mlpag_proposals.py --workdir runs/proposals``.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

grounded = config_module("mlpag_regions_grounded.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns MLPAG on class-free region proposals, trained as the grounded config with the word–region loss."""
    c = grounded.get_config()
    c.model.vision.kind = "proposals"
    c.model.vision.num_regions = 64  # a 128x96 scene has about 95 segments; the 64 largest keep 95-100% of objects
    c.model.vision.proposal_min_size = 8
    c.model.vision.proposal_scale = 400.0
    c.model.word_region_loss.weight = 1.0
    c.data.model_ready = True
    c.train.num_train_steps = 4000
    return c
