"""VQA accuracy, the official VQA/TextVQA evaluation rule (Antol et al. 2015; ``vqaEval.py``).

For a question with human answers ``a_1..a_m`` (m = 10 in VQA v2 and TextVQA) and prediction ``p``::

    acc = mean over j of min(1, #{k != j : a_k == p} / 3)

i.e. every answer is left out once and the prediction is scored against the other m - 1 answers
("min(#humans that said it / 3, 1)" averaged over the 10 choose 9 subsets). With 10 answers, 3, 2
and 1 agreeing answers give 0.9, 0.6 and 0.3; 4 or more give 1.

Answers are compared after :func:`~openvivqa_jax.evaluation.sanitize.sanitize_text`, which takes
the place of the official English ``processPunctuation``/``processDigitArticle`` (article and
number-word rules do not apply to Vietnamese).

The rule is defined for the 10 answers of VQA/TextVQA. Questions with fewer than
:data:`MIN_ANSWERS` references (OpenViVQA and ViVQA have one, ST-VQA one or two) would be capped
below 1 by the leave-one-out rule even for a perfect answer, so for them the score is exact match
with any reference (1 or 0); the evaluator counts them in its notes.

Arrays: ``(items,)`` per-question scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MIN_ANSWERS", "vqa_accuracy"]

#: References needed for the leave-one-out rule; fewer fall back to exact match.
MIN_ANSWERS = 10


def vqa_accuracy(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[np.ndarray, int]:
    """Per-question VQA accuracy.

    Args:
      hyps: ``items`` sanitized predictions.
      refs: ``items`` non-empty lists of sanitized references.

    Returns:
      ``((items,) float64 in [0, 1], number of questions scored by the exact-match fallback)``.
    """
    out = np.zeros((len(hyps),), np.float64)
    fallback = 0
    for i, (hyp, answers) in enumerate(zip(hyps, refs)):
        m = len(answers)
        if m < MIN_ANSWERS:
            fallback += 1
            out[i] = 1.0 if hyp in answers else 0.0
            continue
        matches = sum(1 for a in answers if a == hyp)
        # Leaving out a matching answer leaves matches - 1 agreeing; leaving out another leaves matches.
        acc = matches * min(1.0, (matches - 1) / 3.0) + (m - matches) * min(1.0, matches / 3.0)
        out[i] = acc / m
    return out, fallback
