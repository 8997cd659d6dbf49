"""Tiny experiment for tests and smoke runs: MLPAG on the ``tiny`` synthetic set (seconds on a CPU)."""

import ml_collections

from openvivqa_jax.config_files import load_config


def get_config() -> ml_collections.ConfigDict:
    """Returns the tiny config (configs/synthetic/base.py shrunk)."""
    c = load_config("synthetic/base.py", relative_to=__file__)
    c.data.builder_config = "tiny"
    c.data.image_size = (64, 48)
    c.data.num_threads = 1
    c.tokenizer.vocab_size = 400
    m = c.model
    m.d_model = 32
    m.num_heads = 2
    m.ffn_dim = 64
    m.num_fusion_layers = 1
    m.num_decoder_layers = 1
    m.max_answer_len = 12
    m.num_ocr = 16
    m.vision.cnn_channels = (8, 16, 32)
    t = c.train
    t.batch_size = 8
    t.num_train_steps = 20
    t.log_every_steps = 5
    t.checkpoint_every_steps = 5
    t.eval_every_steps = 10
    t.warmup_steps = 10
    c.eval.batch_size = 8
    c.eval.beam_size = 2
    c.eval.num_examples_to_print = 2
    return c
