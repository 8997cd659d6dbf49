"""Pyramidal Histogram Of Characters (PHOC) for OCR tokens (Almazán et al. 2014; as used by M4C).

M4C's PHOC is 604-d: 36 characters (``a-z0-9``) at pyramid levels 2, 3, 4 and 5 (36 x 14 = 504)
plus the 50 most common English bigrams at level 2 (50 x 2 = 100).

Region rule (the reference ``cphoc`` rule): at level ``L`` a word of ``n`` characters is split into
``L`` equal regions of ``[0, 1]``; character ``k`` occupies ``[k/n, (k+1)/n]`` and sets the bit of
region ``r`` when its overlap with the region is at least half the character's length. A bigram at
``k`` occupies ``[k/n, (k+2)/n]`` and uses the same rule. Characters outside the alphabet are skipped.

The ``vietnamese`` alphabet extends M4C's with ``ă â đ ê ô ơ ư`` (43 characters) and uses 50 common
Vietnamese bigrams, giving 43 x 14 + 100 = 702 dims. Tone marks are folded before lookup
(``ố`` → ``ô``) so tones do not fragment the histogram. ``m4c`` reproduces M4C's 604-d layout
(Vietnamese letters folded to their base Latin letter).
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np

__all__ = ["PhocSpec", "get_phoc_spec", "phoc", "phoc_batch", "fold_tone"]

_M4C_BIGRAMS = (
    "th he in er an re es on st nt en at ed nd to or ea ti ar te ng al it as is "
    "ha et se ou of le sa ve ro ra ri hi ne me de co ta ec si ll so na li la el"
).split()
_VI_BIGRAMS = (
    "ng nh th ch tr ph kh gi qu an on en in un ay ai ao au oi ua ưo ươ iê uô "
    "ơi ưa ân âu ăn ơn ôn ên êu ac at ap ăt ơt ôt ưc ươ ia ha la ma na ta "
    "ho hà cô đi đa"
).split()
_M4C_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"
_VI_CHARS = "abcdefghijklmnopqrstuvwxyzăâđêôơư0123456789"
_UNIGRAM_LEVELS = (2, 3, 4, 5)
_BIGRAM_LEVELS = (2,)

_TONES = {"\u0300", "\u0301", "\u0309", "\u0303", "\u0323"}


@functools.lru_cache(maxsize=100_000)
def fold_tone(text: str) -> str:
    """Removes the five Vietnamese tone marks, keeping vowel quality marks (``ố`` → ``ô``)."""
    d = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", "".join(c for c in d if c not in _TONES))


def _fold_latin(text: str) -> str:
    text = fold_tone(text).replace("đ", "d")
    d = unicodedata.normalize("NFD", text)
    return "".join(c for c in d if not unicodedata.combining(c))


class PhocSpec:
    """A PHOC layout: alphabet, bigrams and levels.

    Attributes:
      name: ``"m4c"`` or ``"vietnamese"``.
      dim: descriptor length (604 for ``m4c``, 702 for ``vietnamese``).
    """

    def __init__(self, name: str, chars: str, bigrams: list[str]):
        self.name = name
        self.chars = chars
        self.char_index = {c: i for i, c in enumerate(chars)}
        # Deduplicate while keeping order, and pad to exactly 50 bigrams.
        seen: list[str] = []
        for b in bigrams:
            if b not in seen:
                seen.append(b)
        self.bigrams = seen[:50]
        if len(self.bigrams) != 50:
            raise ValueError(f"PHOC spec {name!r} needs 50 distinct bigrams, got {len(self.bigrams)}")
        self.bigram_index = {b: i for i, b in enumerate(self.bigrams)}
        self.dim = len(chars) * sum(_UNIGRAM_LEVELS) + len(self.bigrams) * sum(_BIGRAM_LEVELS)

    def prepare(self, word: str) -> str:
        """Lowercases and folds ``word`` into this alphabet's characters."""
        word = word.lower()
        return _fold_latin(word) if self.name == "m4c" else fold_tone(word)


_VI_BIGRAMS_FULL = _VI_BIGRAMS + ["ưu", "iu", "ui", "âm", "ăm", "em", "om", "im", "um", "ôi", "ưi", "êm"]


@functools.lru_cache(maxsize=None)
def get_phoc_spec(name: str) -> PhocSpec:
    """Returns the ``"m4c"`` (604-d) or ``"vietnamese"`` (702-d) layout.

    Raises:
      ValueError: for an unknown name.
    """
    if name == "m4c":
        return PhocSpec("m4c", _M4C_CHARS, _M4C_BIGRAMS)
    if name == "vietnamese":
        return PhocSpec("vietnamese", _VI_CHARS, _VI_BIGRAMS_FULL)
    raise ValueError(f"unknown PHOC alphabet {name!r}; expected 'm4c' or 'vietnamese'")


def _occupies(start: float, end: float, level: int) -> list[int]:
    size = end - start
    regions = []
    for r in range(level):
        lo, hi = r / level, (r + 1) / level
        overlap = min(end, hi) - max(start, lo)
        if overlap > 0 and overlap / size >= 0.5:
            regions.append(r)
    return regions


@functools.lru_cache(maxsize=200_000)
def _phoc_cached(word: str, name: str) -> bytes:
    spec = get_phoc_spec(name)
    w = spec.prepare(word)
    n = len(w)
    out = np.zeros((spec.dim,), np.float32)
    if n == 0:
        return out.tobytes()
    nc = len(spec.chars)
    offset = 0
    for level in _UNIGRAM_LEVELS:
        for k, ch in enumerate(w):
            ci = spec.char_index.get(ch)
            if ci is None:
                continue
            for r in _occupies(k / n, (k + 1) / n, level):
                out[offset + r * nc + ci] = 1.0
        offset += level * nc
    nb = len(spec.bigrams)
    for level in _BIGRAM_LEVELS:
        for k in range(n - 1):
            bi = spec.bigram_index.get(w[k : k + 2])
            if bi is None:
                continue
            for r in _occupies(k / n, (k + 2) / n, level):
                out[offset + r * nb + bi] = 1.0
        offset += level * nb
    return out.tobytes()


def phoc(word: str, alphabet: str = "vietnamese") -> np.ndarray:
    """PHOC descriptor of one word.

    Args:
      word: an OCR token (any case; tones are folded).
      alphabet: ``"vietnamese"`` (702-d) or ``"m4c"`` (604-d).

    Returns:
      ``(phoc_dim,)`` float32 of 0/1.
    """
    return np.frombuffer(_phoc_cached(word, alphabet), np.float32).copy()


def phoc_batch(words: list[str], num_slots: int, alphabet: str = "vietnamese") -> np.ndarray:
    """PHOC of up to ``num_slots`` words, zero rows for empty slots: ``(num_slots, phoc_dim)``."""
    spec = get_phoc_spec(alphabet)
    out = np.zeros((num_slots, spec.dim), np.float32)
    for i, w in enumerate(words[:num_slots]):
        out[i] = np.frombuffer(_phoc_cached(w, alphabet), np.float32)
    return out
