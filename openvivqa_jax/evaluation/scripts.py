"""Scripts written without spaces between words: their text is tokenized per character for the general metrics.

BLEU, ROUGE-L, CIDEr-D, METEOR, WMDRel and SQuAD's F1 count whitespace tokens. Chinese, Japanese, Thai, Lao, Khmer
and Myanmar text has no spaces between words, so a whole answer is one token and a near miss (``提灯は3個`` against
``提灯は3個です``) scores 0 with every one of them. As the EVJVQA scorer does for Japanese
(:mod:`openvivqa_jax.evaluation.evjvqa`), such text is cut into characters: each character of these scripts
(with the combining marks that follow it: Thai vowel and tone marks) is one token, while a run of other
characters inside the same word (digits, Latin letters) stays one token: ``提灯は3個`` → ``提 灯 は 3 個``.

When to cut: a question whose ``language`` is one of :data:`SPACELESS_LANGUAGES` is cut; one with another
language (``vi``, ``en``) is not; a question without a language is cut when its prediction or a reference holds a
character of these scripts (detected from the text). The ``pycocoevalcap`` text mode never cuts (it reproduces the
original toolkit).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

__all__ = ["SPACELESS_LANGUAGES", "SPACELESS_RANGES", "has_spaceless", "split_spaceless", "applies"]

#: ISO 639-1 codes of languages written without spaces between words.
SPACELESS_LANGUAGES = frozenset({"ja", "zh", "th", "lo", "km", "my"})
#: Code point ranges of the scripts cut per character (CJK ideographs, kana, Thai, Lao, Khmer, Myanmar).
SPACELESS_RANGES = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width katakana
    (0x20000, 0x3134F),  # CJK extensions B-G
)
_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b in SPACELESS_RANGES)
_SPACELESS_RE = re.compile(f"[{_CLASS}]")


def has_spaceless(text: str) -> bool:
    """Whether ``text`` holds a character of :data:`SPACELESS_RANGES`."""
    return not text.isascii() and _SPACELESS_RE.search(text) is not None


def split_spaceless(text: str) -> str:
    """``text`` with every character of :data:`SPACELESS_RANGES` (and its combining marks) as its own token.

    ``"提灯は3個"`` → ``"提灯は3個"`` cut as ``"提 灯 は 3 個"``; ``"ราคา 20 บาท"`` → Thai letters one by one with
    their vowel marks attached; other words are unchanged. Tokens are joined by single spaces.
    """
    if not has_spaceless(text):
        return " ".join(text.split())
    out: list[str] = []
    for word in text.split():
        run = ""  # a run of other characters inside the word
        for ch in word:
            if unicodedata.category(ch).startswith("M") and out and not run and _SPACELESS_RE.match(out[-1][0]):
                out[-1] += ch  # a combining mark stays with its letter
            elif _SPACELESS_RE.match(ch):
                if run:
                    out.append(run)
                    run = ""
                out.append(ch)
            else:
                run += ch
        if run:
            out.append(run)
    return " ".join(out)


def applies(language: str | None, texts: Sequence[str]) -> bool:
    """Whether a question is cut per character: its language is spaceless, or it has none and one of ``texts``
    holds a spaceless-script character."""
    if language:
        return str(language).lower() in SPACELESS_LANGUAGES
    return any(has_spaceless(t) for t in texts)
