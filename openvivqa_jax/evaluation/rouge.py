"""ROUGE-L exactly as pycocoevalcap 1.2 computes it (``rouge/rouge.py``).

Definition (Lin 2004, with the MS-COCO toolkit's choices):

- tokens: ``str.split(" ")`` of the sanitized strings;
- for each reference: ``P = LCS / len(hyp)``, ``R = LCS / len(ref)`` (LCS = longest common
  subsequence of tokens);
- ``P_max`` and ``R_max`` are maximized **separately** over the references;
- ``ROUGE-L = (1 + beta**2) P_max R_max / (R_max + beta**2 P_max)`` with beta = 1.2, and 0 when either
  maximum is 0;
- corpus score = mean over questions.

The LCS length comes from rapidfuzz's ``LCSseq`` (bit-parallel C++, any hashable tokens), so a
question costs microseconds; the arithmetic is the toolkit's, in its order.

Arrays: ``(items,)`` per-question scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rapidfuzz.distance import LCSseq

__all__ = ["BETA", "rouge_l"]

#: Recall weight of ROUGE-L's F-measure (pycocoevalcap ``Rouge.beta``).
BETA = 1.2


def rouge_l(hyps: Sequence[str], refs: Sequence[Sequence[str]], beta: float = BETA) -> np.ndarray:
    """Per-question ROUGE-L.

    Args:
      hyps: ``items`` sanitized hypotheses.
      refs: ``items`` non-empty lists of sanitized references.
      beta: F-measure recall weight.

    Returns:
      ``(items,)`` float64 in [0, 1]; an empty hypothesis scores 0.
    """
    out = np.zeros((len(hyps),), np.float64)
    b2 = beta**2
    for i, (hyp, item_refs) in enumerate(zip(hyps, refs)):
        token_c = hyp.split(" ")
        prec_max = rec_max = 0.0
        for ref in item_refs:
            token_r = ref.split(" ")
            lcs = LCSseq.similarity(token_r, token_c) if hyp else 0
            prec_max = max(prec_max, lcs / float(len(token_c)))
            rec_max = max(rec_max, lcs / float(len(token_r)))
        if prec_max != 0 and rec_max != 0:
            out[i] = ((1 + b2) * prec_max * rec_max) / float(rec_max + b2 * prec_max)
    return out
