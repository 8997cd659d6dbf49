"""M4C at paper sizes on the real OpenViVQA dataset (Hu et al. 2020; paper §5.1; docs/design.md §6).

``--config configs/openvivqa/m4c.py[:images|cnn|features|benchmark]``; usage, variants and the settings shared
with configs/openvivqa/mlpag.py: configs/common.py.

M4C's own recipe (Hu et al. §4): Adam 1e-4 with linear warmup over 1,000 steps, x0.1 at 14k and 19k of 24k
steps, batch 128, gradient clipping 0.25, 12 decoding steps, multi-label BCE. In the variants ``images``,
``features`` and ``benchmark`` the text encoder is BERT-like with 12 layers but trained from scratch.

Variants ``images_bert`` and ``features_bert``: the question encoder is a pretrained BERT checkpoint, as in M4C
(``model.text_encoder.kind = "bert"``; models/bert.py, docs/pretrained.md), fine-tuned, its first 12 layers
as the OpenViVQA authors' M4C (Hu et al. took the first 3 of BERT-base: ``--config.model.text_encoder.num_layers=3``).
The papers' checkpoints: Hu et al. used ``bert-base-uncased`` (English); the OpenViVQA paper does not name its
BERT. For Vietnamese use a cased multilingual BERT, ``google-bert/bert-base-multilingual-cased`` (the uncased one
strips tone marks), or PhoBERT, ``vinai/phobert-base`` (RoBERTa; needs word-segmented text). Users download the
folder themselves (https://huggingface.co/google-bert/bert-base-multilingual-cased: config.json,
model.safetensors, vocab.txt or tokenizer.json) and pass it with
``--config.model.text_encoder.path=<folder>``; without it one warning line says the encoder is trained from
scratch.
"""

import ml_collections

from openvivqa_jax.config_files import config_module

common = config_module("../common.py", relative_to=__file__)
#: The shared variants, and ``<variant>_bert`` with the pretrained BERT question encoder.
VARIANTS = common.OPENVIVQA_VARIANTS + ("images_bert", "features_bert")


def get_config(variant: str = "images") -> ml_collections.ConfigDict:
    """Returns the paper-size M4C config for ``variant`` (ValueError for an unknown one)."""
    common.check_variant(variant, VARIANTS)
    bert = variant.endswith("_bert")
    variant = variant.removesuffix("_bert")
    c = common.openvivqa_paper("m4c", variant, d_model=768, num_heads=12, ffn_dim=3072)
    m = c.model
    m.num_text_layers = 12
    if bert:
        m.text_encoder.kind = "bert"
        m.text_encoder.num_layers = 12  # the OpenViVQA authors' 12-layer BERT; M4C's own: 3
    m.num_mmt_layers = 4
    # Recompute the text and MMT blocks in the backward pass: about a third less training memory at the
    # benchmark shapes for about the same speed (benchmarks/README.md).
    m.remat = True
    if variant != "benchmark":
        m.max_answer_len = 12  # M4C's 12 decoding steps
    t = c.train
    if variant != "benchmark":
        t.batch_size = 128
    t.optimizer = "adam"
    t.b1, t.b2 = 0.9, 0.999  # PyTorch's Adam defaults, as M4C's code (MMF) uses
    t.schedule = "m4c"
    t.learning_rate = 1e-4
    t.warmup_steps = 1_000
    t.warmup_factor = 0.2
    t.decay_steps = (14_000, 19_000)
    t.decay_factor = 0.1
    t.num_train_steps = 24_000
    t.grad_clip_norm = 0.25
    t.loss = "bce"
    return c
