"""MLPAG from pixels with the grounded config's training: the pixel counterpart of
``mlpag_regions_grounded.py``, with a pixel CNN instead of the oracle detector's regions.

Changes to ``configs/default.py``: a finer grid, and the grounded region config's training.

* a 16x12 grid of 8-pixel cells: three stride-2 stages (``model.vision.cnn_channels``) instead of four, so a
  6-pixel stool keeps most of its colour in its cell (``benchmarks/vision_probe.py``: 83% of held-out objects'
  colours against 51% at 8x6);
* 12,000 training pictures: ``synthetic_openvivqa/large_clean_regions`` (its pixels only; the region features
  it also stores are not read by the CNN), the same validation and test pictures as ``default_clean``;
* the question grounded in the image: ``model.question_over_image`` and ``model.question_in_memory``;
* more object questions per batch: ``data.train_kind_weights``;
* 12,000 steps, dev evaluations every 1,000 (greedy) with exact match per kind in ``metrics.jsonl`` and
  TensorBoard (``dev/kind/<kind>/exact_match``).

Seed 0, test: object colour 95.6%, side 97.0%, count 43.2%, unseen shop names copied 90.4%, text-QA CIDEr
8.802 (docs/results.md, "Seeing from pixels"). Object colour and side stay at the question-only prior for
8,000 steps and are learned between 8,000 and 11,000. About 85 minutes on two CPU cores.

Run: ``python -m openvivqa_jax.main --config configs/synthetic/mlpag_pixels_grounded.py --workdir runs/pixels``
"""

import ml_collections

from openvivqa_jax.config_files import config_module

default = config_module("../default.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the pixel MLPAG config with a 16x12 grid, trained like the grounded region config (12,000
    pictures, 12,000 steps)."""
    c = default.get_config()
    c.model.vision.cnn_channels = (32, 64, 128)
    c.data.builder_config = "large_clean_regions"
    c.data.train_kind_weights = "colour=4,count=3,position=2,shop_count=2"
    c.model.question_over_image = True
    c.model.question_in_memory = True
    c.train.num_train_steps = 12000
    c.train.eval_every_steps = 1000
    c.eval.select_decoding = "greedy"
    return c
