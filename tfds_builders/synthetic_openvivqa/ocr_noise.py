"""OCR noise of the synthetic OpenViVQA generator: dropped tokens, one-character substitutions (a
recognition error) and box jitter, applied deterministically from the image's noise stream.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from openvivqa_jax.text.normalize import normalize_text

__all__ = ["apply_ocr_noise"]

_VI_LETTERS = ("abcdeghiklmnopqrstuvxyăâđêôơư"
               "àáảãạằắẳẵặầấẩẫậèéẻẽẹềếểễệìíỉĩịòóỏõọồốổỗộờớởỡợùúủũụừứửữựỳýỷỹỵ")


def apply_ocr_noise(tokens: Sequence[str], boxes: np.ndarray, rng: np.random.Generator, drop_prob: float,
                    sub_prob: float, box_jitter: float) -> tuple[list[str], np.ndarray, dict[str, int]]:
    """Simulates recognition errors on ground-truth OCR.

    Args:
        tokens: normalized tokens, length ``num_ocr``.
        boxes: ``(num_ocr, 4)`` float xyxy in [0, 1].
        rng: the image's noise generator (stream 1 of :func:`image_rng`).
        drop_prob: probability a token is removed.
        sub_prob: probability a token gets one character substituted (letter by letter, digit by digit).
        box_jitter: Gaussian std of each coordinate as a fraction of the box width/height.

    Returns:
        (tokens, ``(num_kept, 4)`` float32 boxes, counters ``{"dropped", "substituted"}``). Every random draw
        is made for every token whatever the probabilities, so results depend only on the seed.

    Raises:
        ValueError: if a probability is outside [0, 1], the jitter is negative, or shapes disagree.
    """
    for name, p in (("ocr_drop_prob", drop_prob), ("ocr_sub_prob", sub_prob)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"synthetic_openvivqa: {name}={p} is not a probability")
    if box_jitter < 0:
        raise ValueError(f"synthetic_openvivqa: ocr_box_jitter={box_jitter} must be >= 0")
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    if len(tokens) != len(boxes):
        raise ValueError(f"synthetic_openvivqa: {len(tokens)} OCR tokens but {len(boxes)} boxes")
    out_t, out_b = [], []
    stats = {"dropped": 0, "substituted": 0}
    for tok, box in zip(tokens, boxes):
        u_drop, u_sub, u_pos, u_chr = rng.random(4)
        noise = rng.normal(size=4)
        if u_drop < drop_prob:
            stats["dropped"] += 1
            continue
        if u_sub < sub_prob and tok:
            pos = int(u_pos * len(tok))
            ch = tok[pos]
            if ch.isdigit():
                pool = [d for d in "0123456789" if d != ch]
            elif ch.isalpha():
                pool = [c for c in _VI_LETTERS if c != ch]
            else:
                pool = []
            if pool:
                cand = normalize_text(tok[:pos] + pool[int(u_chr * len(pool))] + tok[pos + 1:])
                if cand and " " not in cand:
                    tok = cand
                    stats["substituted"] += 1
        if box_jitter > 0:
            bw, bh = box[2] - box[0], box[3] - box[1]
            box = box + noise * box_jitter * np.array([bw, bh, bw, bh])
            box = np.clip(box, 0.0, 1.0)
            x0, x1 = sorted((box[0], box[2]))
            y0, y1 = sorted((box[1], box[3]))
            eps = 1e-3
            if x1 - x0 < eps:
                x0, x1 = (min(x0, 1 - eps), min(x0, 1 - eps) + eps)
            if y1 - y0 < eps:
                y0, y1 = (min(y0, 1 - eps), min(y0, 1 - eps) + eps)
            box = np.array([x0, y0, x1, y1])
        out_t.append(tok)
        out_b.append(box)
    return out_t, np.asarray(out_b, np.float32).reshape(-1, 4), stats
