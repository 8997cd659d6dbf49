"""MLPAG on the embedded synthetic set with fastText vectors, as the paper's MLPAG (§4.3): the question pieces'
embeddings start from fastText and every OCR token gets its 300-d fastText vector (``ocr_fasttext``) beside PHOC
and appearance. configs/synthetic/base.py otherwise.

``--config configs/synthetic/mlpag_fasttext.py --config.model.fasttext.path=<vectors .bin or .vec>``; without the
path one warning line says the question embeddings start random and the OCR fastText features are zero. For the
synthetic set, ``python -m openvivqa_jax.text.fasttext_train --config configs/synthetic/base.py --out <file>.bin``
trains a stand-in for cc.vi.300.bin on the train split (docs/pretrained.md).
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the synthetic MLPAG config with fastText question and OCR-token vectors."""
    c = common.synthetic("mlpag")
    m = c.model
    m.question_embedding = "fasttext"
    m.word_dim = 300
    m.ocr_extra_features = {"ocr_fasttext": 300}
    return c
