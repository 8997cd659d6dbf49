"""models/layers.py split into attention, dropout and CNN modules: one object per name, old import path kept."""

from __future__ import annotations


def test_layers_reexports_the_split_modules():
    from openvivqa_jax.models import attention, cnn, dropout, layers

    for module, names in ((attention, ("NEG_INF", "ATTENTION_IMPLS", "set_attention_impl", "MultiHeadAttention", "dense")),
                          (dropout, ("Dropout", "dropout_bit_width")),
                          (cnn, ("SmallCNN", "grid_boxes", "box_overlap_weights", "masked_mean"))):
        for name in names:
            assert getattr(layers, name) is getattr(module, name), name
            assert name in layers.__all__ and name in module.__all__
    for name in ("FeedForward", "EncoderBlock", "CrossBlock", "DecoderLayer", "layer_norm", "call_block"):
        assert getattr(layers, name).__module__ == "openvivqa_jax.models.layers"
