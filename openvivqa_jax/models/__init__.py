"""Flax NNX models: shared layers, encoders, fusion blocks, answer decoder, pointer network, zoo."""
