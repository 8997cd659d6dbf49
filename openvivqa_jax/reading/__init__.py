"""Extractive reading comprehension (ViQuAD, SQuAD v1.1 style): a span reader over ``[question; passage]``.

- :mod:`.features`: passages tokenized with the character offsets of every piece in the original text
  (Vietnamese normalization runs per word, so offsets survive it), question/passage windows and span labels.
- :mod:`.spans`: span decoding with a maximum answer length (BERT's SQuAD rule: best ``start <= end``).
- :mod:`.model`: the span reader (a transformer encoder, start and end pointers over the passage tokens).
- :mod:`.train`: training and evaluation through ``python -m openvivqa_jax.main`` (config ``task="reading"``).
"""

from __future__ import annotations

__all__ = ["ReadingError"]

from openvivqa_jax.errors import UserError


class ReadingError(UserError, ValueError):
    """A reading-task config or input that cannot be used (one line naming the field or record)."""
