"""Extractive reading comprehension (ViQuAD, SQuAD v1.1 style): a span reader over ``[question; passage]``.

Laid out as every task of the package (config, model, loop, evaluation), run through
``python -m openvivqa_jax.main`` (config ``task="reading"``):

- :mod:`.config`: the reading fields of the config, checked when a run starts.
- :mod:`.features`: passages tokenized with the character offsets of every piece in the original text
  (Vietnamese normalization runs per word, so offsets survive it), question/passage windows and span labels;
  :mod:`.data`: a split's questions, the run's tokenizer and the windows of the config.
- :mod:`.spans`: span decoding with a maximum answer length (BERT's SQuAD rule: best ``start <= end``).
- :mod:`.model`: the span reader (a transformer encoder, start and end pointers over the passage tokens).
- :mod:`.train`: the train loop; :mod:`.evals`: the evaluation it calls down into, and ``--mode evaluate``.
"""

from __future__ import annotations

__all__ = ["ReadingError"]

from openvivqa_jax.errors import UserError


class ReadingError(UserError, ValueError):
    """A reading-task config or input that cannot be used (one line naming the field or record)."""
