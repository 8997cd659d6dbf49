"""M4C on TextVQA 0.5.1 (Singh et al., CVPR 2019) with M4C's own recipe (Hu et al., CVPR 2020, §4), scored
with VQA accuracy.

Usage (the TextVQA release and the Rosetta OCR files downloaded to ``~/data/textvqa``, see
``tfds_builders/textvqa``)::

    python -m openvivqa_jax.main --config configs/textvqa/m4c.py --workdir runs/textvqa_m4c \
        --config.data.manual_dir=~/data/textvqa

Splits: ``train``, ``val`` (model selection, best checkpoint by VQA accuracy), ``test`` (answers withheld:
decoded and written to ``eval/test_predictions.json`` for the EvalAI server; its metrics are empty).
Each question has 10 answers; one is drawn per visit as the training target (M4C trains on all of them with
soft scores; the BCE loss here sees one per step). OCR: the Rosetta tokens and boxes shipped with the
release (the builder's only source), up to 50 per image, with M4C's 604-d PHOC.

M4C's recipe: Adam 1e-4 (betas 0.9/0.999), the ``m4c`` schedule (linear warmup over 1,000 steps, x0.1 at
14k and 19k of 24k steps), batch 128, gradient clipping 0.25, 12 decoding steps, multi-label BCE, d_model
768, 12 heads, 4 multimodal layers, a 3-layer text encoder (M4C uses BERT-base's first 3 layers; ours is
trained from scratch). The visual stream is a CNN over the image (the builder keeps images, not Faster
R-CNN features). Metrics: VQA accuracy (the official leave-one-out rule) plus ANLS, BLEU, ROUGE-L, CIDEr.
"""

import ml_collections

from openvivqa_jax.config_files import config_module, load_config

common = config_module("../common.py", relative_to=__file__)


def get_config() -> ml_collections.ConfigDict:
    """Returns the TextVQA M4C config (configs/stvqa/m4c.py's model and recipe, TextVQA's data and metric)."""
    c = load_config("../stvqa/m4c.py", "task3", relative_to=__file__)
    # data.manual_dir is required: --config.data.manual_dir=<folder with TextVQA_0.5.1_*.json, Rosetta files, images>
    common.use_dataset(c.data, "textvqa", eval_split="val")
    c.data.decode_dictionary = "none"  # TextVQA has no answer dictionaries
    c.train.best_metric = "VQA-accuracy"
    c.eval.metrics = ("VQA-accuracy", "ANLS", "BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr")
    c.eval.answer_rules = "english"  # the official VQA answer processing, as EvalAI/MMF score TextVQA
    c.eval.text_mode = "official"  # VQA accuracy as EvalAI/MMF, ANLS as the RRC script, BLEU.. as pycocoevalcap
    return c
