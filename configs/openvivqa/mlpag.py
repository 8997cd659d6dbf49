"""MLPAG at the paper's sizes on the real OpenViVQA dataset (paper §4.3, §5; docs/design.md §6).

Usage (the dataset downloaded to ``~/data/openvivqa``, see ``tfds_builders/openvivqa``)::

    python -m openvivqa_jax.main --config configs/openvivqa/mlpag.py --workdir runs/mlpag \
        --config.data.manual_dir=~/data/openvivqa

Variants (``--config configs/openvivqa/mlpag.py:<variant>``):

* ``images`` (default): images + tesseract OCR at build time; a CNN backbone gives grid features.
* ``features``: the authors' pre-extracted per-image feature files (region features 2048-d + boxes,
  scene-text tokens), i.e. the paper's setting.
* ``benchmark``: ``features`` at docs/design.md §10's benchmark shapes (50 regions of 1024-d, 50 OCR tokens with
  det 256 / rec 256 / fastText 300 features, question 20, answer 20, vocabulary 4,000, batch 64).
"""

import ml_collections

from openvivqa_jax.config_files import load_config


#: ``--config configs/openvivqa/mlpag.py:<variant>``.
VARIANTS = ("images", "features", "benchmark")


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size MLPAG config; ``variant`` is ``images``, ``features`` or ``benchmark``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected 'images', 'features' or 'benchmark'")
    c = load_config("../default.py", relative_to=__file__)
    c.data.builder = "openvivqa"
    c.data.builder_config = "default" if variant == "images" else "features"
    # c.data.manual_dir is required: --config.data.manual_dir=<folder with the release JSON + images>
    c.data.train_split = "train"
    c.data.eval_split = "dev"
    c.data.test_split = "test"
    c.data.image_size = (384, 288)
    c.data.max_ocr_pieces = 8

    c.tokenizer.vocab_size = 4000

    m = c.model
    m.name = "mlpag"
    m.d_model = 512
    m.num_heads = 8
    m.ffn_dim = 2048
    m.dropout = 0.1
    m.num_fusion_layers = 4
    m.num_decoder_layers = 3
    m.max_question_len = 20
    m.max_answer_len = 20
    m.num_ocr = 50
    if variant == "images":
        m.vision.kind = "cnn"
        m.vision.cnn_channels = (64, 128, 256, 512, 512)
    else:
        m.vision.kind = "region"
        m.vision.num_regions = 50
        m.vision.region_dim = 2048
        m.ocr_features = ("pieces", "phoc", "appearance")
        if variant == "benchmark":
            m.vision.region_dim = 1024
            m.ocr_extra_features = {"ocr_det": 256, "ocr_rec": 256, "ocr_fasttext": 300}

    t = c.train
    t.batch_size = 64
    t.num_train_steps = 60_000
    t.schedule = "noam"
    t.lr_scale = 1.0
    t.warmup_steps = 10_000
    t.b1, t.b2 = 0.9, 0.98
    t.grad_clip_norm = 0.0
    t.eval_every_steps = 2_000
    t.checkpoint_every_steps = 1_000
    t.patience = 5
    t.best_metric = "CIDEr"

    c.eval.beam_size = 3
    c.eval.alpha = 0.0
    c.eval.ocr_ablation = False
    return c
