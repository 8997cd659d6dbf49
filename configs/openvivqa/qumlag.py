"""QuMLAG at paper sizes on the real OpenViVQA dataset (paper §4.2; docs/design.md §6).

``--config configs/openvivqa/qumlag.py[:images|cnn|features|benchmark]``; usage, variants and the settings shared
with configs/openvivqa/mlpag.py: configs/common.py.

``images`` and ``features``: the question embedding starts from fastText vectors (§4.2) when
``--config.model.fasttext.path=<cc.vi.300.bin>`` is given (docs/pretrained.md); without it one warning line says
the embeddings start random.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)
VARIANTS = common.OPENVIVQA_VARIANTS


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size QuMLAG config for ``variant`` (ValueError for an unknown one)."""
    c = common.openvivqa_paper("qumlag", variant)
    m = c.model
    m.num_fusion_layers = 3  # SA units on the question; SA + GA units on the image (docs/design.md §10: 3+3)
    m.num_decoder_layers = 3
    return c
