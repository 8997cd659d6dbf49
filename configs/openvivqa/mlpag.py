"""MLPAG at the paper's sizes on the real OpenViVQA dataset (paper §4.3, §5; docs/design.md §6).

``--config configs/openvivqa/mlpag.py[:images|cnn|features|benchmark]``; usage and variants: configs/common.py.
In ``images``, ``cnn`` and ``features`` the question and OCR tokens start from fastText vectors as in the paper:
pass ``--config.model.fasttext.path=<cc.vi.300.bin>`` (docs/pretrained.md); ``benchmark`` keeps docs/design.md §10's
shapes (learned question embeddings).
The other configs/openvivqa/*.py start from this file's data, tokenizer, training and evaluation settings.
"""

import ml_collections

from openvivqa_jax.config_files import config_module, load_config

common = config_module("../common.py", relative_to=__file__)
VARIANTS = common.OPENVIVQA_VARIANTS


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size MLPAG config for ``variant`` (ValueError for an unknown one)."""
    common.check_variant(variant, VARIANTS)
    c = load_config("../synthetic/base.py", relative_to=__file__)
    c.data.builder = "openvivqa"
    c.data.builder_config = "default" if variant in ("images", "cnn") else "features"
    # c.data.manual_dir is required: --config.data.manual_dir=<folder with the release JSON + images>
    c.data.train_split = "train"
    c.data.eval_split = "dev"
    c.data.test_split = "test"
    c.data.image_size = (384, 288)
    c.data.max_ocr_pieces = 8
    # Paper-size photos: decoding and resizing per visit costs ~24 ms of CPU per image, far more than a GPU step
    # leaves; the one-time model-ready records keep the host ahead (docs/input_pipeline.md).
    c.data.model_ready = True

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
    m.vision.pixel_features = 0  # the synthetic default's pooled cell pixels are not part of the paper models
    if variant == "images":
        # The main job's way of seeing without a detector (configs/default.py): class-free region proposals from
        # the pixels, and each OCR token's box as a learned 2-D position embedding and its reading order as well.
        m.vision.kind = "proposals"
        m.vision.num_regions = 100
        m.vision.proposal_min_size = 64  # the synthetic default's 8 pixels at 128x96, scaled to 384x288
        m.ocr_features = ("phoc", "appearance", "box_grid", "order")
        m.counter.weight = 1.0  # and its way of counting them: the region counter (docs/results.md, "The main job")
    elif variant == "cnn":
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
    if variant != "benchmark":
        # §4.3: question tokens and scene-text tokens embedded with FastText (300-d), from the user's cc.vi.300.bin
        # (--config.model.fasttext.path=...; docs/pretrained.md). Without the path one warning line says so and the
        # question embeddings start random, the OCR tokens' fastText features zero.
        m.question_embedding = "fasttext"
        m.word_dim = 300
        m.ocr_extra_features = {"ocr_fasttext": 300}

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
    # Model selection every 2,000 steps decodes dev greedily; the final dev and test scores use beam 3. By FLOPs a
    # dev pass is ~1% of 2,000 training steps, but on a GPU beam search is bound by its 20 sequential steps per
    # batch of 3 x 64 hypotheses; estimated above 10% of training time (docs/input_pipeline.md).
    c.eval.select_decoding = "greedy"
    c.eval.alpha = 0.0
    c.eval.ocr_ablation = False
    return c
