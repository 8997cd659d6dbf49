"""SAAA on the embedded synthetic OpenViVQA set (Kazemi & Elqursh 2017; small sizes for CPU minutes).

configs/synthetic/base.py with the model swapped: a classifier over the top ``num_answers`` training answers
(set ``model.num_answers = len(AnswerList)``), trained with softmax cross-entropy on soft scores. Widths and
``num_answers``: configs/common.py ``synthetic``.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic SAAA config."""
    c = common.synthetic("saaa")
    m = c.model
    m.num_glimpses = 2
    m.classifier_loss = "softmax"
    return c
