"""MLPAG (the OpenViVQA paper's generator, §4.3) on ViVQA (Tran et al., PACLIC 2021), scored with exact match.

Usage (ViVQA's train.csv/test.csv and the COCO 2014 images in ``~/data/vivqa``, see
``tfds_builders/vivqa``)::

    python -m openvivqa_jax.main --config configs/vivqa/mlpag.py --workdir runs/vivqa_mlpag \
        --config.data.manual_dir=~/data/vivqa

ViVQA ships ``train`` and ``test`` only, so the dev split for model selection is a held-out tail of train:
``train[:90%]`` / ``train[90%:]`` (by question; COCO images may appear on both sides). Answers are
short phrases (one reference each), so the headline metric is exact match ("EM", SQuAD-style
normalization: ViVQA's accuracy), with F1, BLEU, ROUGE-L and CIDEr alongside; the best checkpoint is
chosen by EM. (VQA accuracy is not used: with one reference its min(n/3, 1) rule caps at 1/3.)

The builder's ``default`` config reads OCR from ``manual_dir/ocr.json`` if present and otherwise gives no
OCR tokens (ViVQA's questions are about objects, colours, counts and places); with
``--config.data.builder_config=tesseract`` Tesseract runs at build time. Model and optimisation settings
are configs/openvivqa/mlpag.py's ``images`` variant (the paper's sizes; grid features from a CNN over the
COCO image).
"""

import ml_collections

from openvivqa_jax.config_files import config_module, load_config

common = config_module("../common.py", relative_to=__file__)
#: The metrics computed at every evaluation (names of :mod:`openvivqa_jax.evaluation`).
VIVQA_METRICS = ("EM", "F1", "BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr")


def vivqa_data(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Points ``c`` at ViVQA: builder, splits, metrics and best metric (shared by the ViVQA configs)."""
    # data.manual_dir is required: --config.data.manual_dir=<folder with train.csv, test.csv, train2014/, val2014/>
    common.use_dataset(c.data, "vivqa", train_split=common.HELD_OUT_TRAIN, eval_split=common.HELD_OUT_DEV)
    c.train.best_metric = "EM"
    c.eval.metrics = VIVQA_METRICS
    c.eval.ocr_ablation = False
    c.eval.answer_rules = "vietnamese"  # no English article or number-word rules on Vietnamese answers
    return c


def get_config() -> ml_collections.ConfigDict:
    """Returns the ViVQA MLPAG config."""
    c = vivqa_data(load_config("../openvivqa/mlpag.py", "images", relative_to=__file__))
    c.model.name = "mlpag"
    c.model.max_answer_len = 10  # ViVQA answers are 1-4 words
    return c
