"""openvivqa_jax: open-ended Vietnamese visual question answering in JAX/Flax.

Models (FST, QuMLAG, MLPAG and the baselines SAAA, MCAN, LoRRA, M4C), a transformer answer decoder
with a dynamic pointer network over OCR tokens, a sharded jitted train loop, jitted greedy and beam
search, TFDS builders and metrics matched to the reference toolkits.
"""

__version__ = "0.1.0"
