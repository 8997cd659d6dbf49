"""The main job (``configs/default.py``: class-free region proposals, the grounded training, the word–region
loss, 4,000 steps) without the OCR tokens' ``box_grid`` feature, the named shop (its text and region tokens) and
the question in the decoder, with the grounded config's kind weights (``colour=4,count=3,position=2,shop_count=2``):
the proposals config as first measured.

Without the box's learned 2-D position embedding the pointer network copies unseen shop names less often from
region inputs (77-81% against 90%; docs/results.md, "Seeing without a detector"); kept to reproduce those rows.

Run: ``python -m openvivqa_jax.main --config configs/synthetic/mlpag_proposals.py --workdir runs/proposals``.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

default = config_module("../default.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the main job's config with the OCR tokens' features of the zoo (PHOC and appearance), the
    grounded config's kind weights, no region counter and no named-shop token or OCR self-attention."""
    c = default.get_config()
    c.model.ocr_features = ("phoc", "appearance")
    c.model.named_text_token = False
    c.model.ocr_self_attention = 0
    c.model.named_region_token = False
    c.model.named_match = "any"
    c.model.question_to_decoder = False
    c.data.train_kind_weights = "colour=4,count=3,position=2,shop_count=2"
    c.model.counter.weight = 0.0
    return c
