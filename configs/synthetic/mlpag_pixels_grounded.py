"""MLPAG from pixels with the grounded config's training: the pixel counterpart of
``mlpag_regions_grounded.py``, with the default config's CNN instead of the oracle detector's regions.

Changes to ``configs/default.py``, each taken from the grounded region config:

* 12,000 training pictures: ``synthetic_openvivqa/large_clean_regions`` (its pixels only; the region features
  it also stores are not read by the CNN), the same validation and test pictures as ``default_clean``;
* the question grounded in the image: ``model.question_over_image`` and ``model.question_in_memory``;
* more object questions per batch: ``data.train_kind_weights``;
* 12,000 steps, dev evaluations every 1,000 (greedy) with exact match per kind in ``metrics.jsonl`` and
  TensorBoard (``dev/kind/<kind>/exact_match``).

It learns the colour, side and number of the vehicles on the road, and copies more unseen shop names than the
default job, but not those of the umbrellas, people and stools on the pavement (docs/results.md, "Seeing from
pixels"). About 67 minutes on two CPU cores.

Run: ``python -m openvivqa_jax.main --config configs/synthetic/mlpag_pixels_grounded.py --workdir runs/pixels``
"""

import ml_collections

from openvivqa_jax.config_files import config_module

default = config_module("../default.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the pixel MLPAG config trained like the grounded region config (12,000 pictures, 12,000 steps)."""
    c = default.get_config()
    c.data.builder_config = "large_clean_regions"
    c.data.train_kind_weights = "colour=4,count=3,position=2,shop_count=2"
    c.model.question_over_image = True
    c.model.question_in_memory = True
    c.train.num_train_steps = 12000
    c.train.eval_every_steps = 1000
    c.eval.select_decoding = "greedy"
    return c
