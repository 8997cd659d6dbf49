"""MLPAG on the oracle detector's region features, set up so that the non-text questions are learned: the
object's colour, its side and how many there are (docs/results.md, "Learning the grounding").

Three changes to ``mlpag_regions.py``, each measured there:

* more pictures: ``synthetic_openvivqa/large_clean_regions`` (12,000 training pictures, the same validation
  and test pictures as ``default_clean``); with 1,500 the 774 colour questions are memorized;
* the question grounded in the image: ``model.question_over_image`` and ``model.question_in_memory``;
* more object questions per batch: ``data.train_kind_weights`` shows every colour question 4 times per epoch,
  every count question 3 times and every side and shop-count question twice, so that the plateau before the
  grounding is learned (counted in questions of the kind) is passed inside the run's 6,000 steps;

and, as the main job (``configs/default.py``) has them, the region counter (``model.counter``: the count of the
regions a counting question names, trained on a stream of the training split's counting questions) and the OCR
tokens' box as a 2-D position embedding and their reading order (``box_grid``, ``order``).

Run: ``python -m openvivqa_jax.main --config configs/synthetic/mlpag_regions_grounded.py --workdir runs/grounded``
(builds the 12,000-picture set first, under 2 minutes on 2 cores; then about 15 minutes of training and scoring).
"""

import ml_collections

from openvivqa_jax.config_files import config_module

regions = config_module("mlpag_regions.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the grounded MLPAG config on the oracle detector's region features (12,000 pictures)."""
    c = regions.get_config()
    c.data.builder_config = "large_clean_regions"
    c.data.train_kind_weights = "colour=4,count=3,position=2,shop_count=2"
    c.model.question_over_image = True
    c.model.question_in_memory = True
    c.model.ocr_features = ("phoc", "appearance", "box_grid", "order")
    c.model.counter.weight = 1.0
    c.train.num_train_steps = 6000
    c.train.eval_every_steps = 1000
    return c
