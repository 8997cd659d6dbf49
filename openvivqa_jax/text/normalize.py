"""Vietnamese text normalization applied to every string that enters the system.

Questions, answers, OCR tokens and predictions all pass through :func:`normalize_text`
before tokenization or scoring (docs/design.md §4; OpenViVQA paper §3.2.4, "setting the text to
lowercase, placing whitespaces between words and punctuation marks, and normalizing prices").

The steps, in order:

0. Format characters (Unicode category ``Cf``): the zero-width space U+200B becomes a space (it marks a
   word break); every other one (BOM U+FEFF, ZWNJ U+200C, ZWJ U+200D, soft hyphen U+00AD, word joiner
   U+2060, bidi marks, ...) is deleted. They are invisible, so ``"\ufeffcon mèo"`` is ``con mèo``.
1. Unicode NFKC (:func:`fold_compatibility`): NFC composition (NFD input from macOS file names or web forms
   becomes NFC) and the folding of compatibility characters to their plain forms: ligatures (``ﬁ`` → ``fi``,
   ``ﬀ`` → ``ff``, so an OCR token ``COﬀEE`` is the word ``coffee``), full-width letters, digits and punctuation
   (``ＡＢＣ１２３？`` → ``ABC123?``), half-width katakana, superscripts, circled and other compatibility
   digits (``²`` → ``2``, ``①`` → ``1``), no-break and other fixed-width spaces. Every Vietnamese letter has only a
   canonical decomposition, so NFKC leaves all 146 of them (12 vowels x 6 tones and ``đ``, both cases) exactly
   as NFC does; ``₫`` has no compatibility form and stays.
2. Lowercase; then the look-alikes of ``đ`` (``ð`` U+00F0 / ``Ð`` U+00D0, the Icelandic eth, and ``ɖ``
   U+0256 / ``Ɖ`` U+0189, the African D) become ``đ`` in every word whose other letters all belong to the
   Vietnamese alphabet (``ÐƯỜNG`` → ``đường``); a word with other letters (``það``) keeps them.
3. Every line break (``\\n``, ``\\r``, ``\\v``, ``\\f``, U+0085, U+2028, U+2029) and tab becomes a space.
4. One tone-mark convention for the ``oa``/``oe``/``uy`` syllables: the *classic* placement,
   where an open syllable carries the tone on the first vowel (``hòa``, ``khỏe``, ``thủy``) and a
   closed syllable on the second (``hoàng``, ``khuếch``). ``hoà`` and ``hòa`` both become ``hòa``.
5. Prices to ``#,### đồng`` (``20.000đ``, ``20 000 VND``, ``20k``, ``20.000₫``, ``₫ 20.000``, ``VND 20.000``
   → ``20,000 đồng``).
6. Whitespace around punctuation, except separators inside numbers (``20,000``, ``3.5``).
7. Collapse whitespace and strip.

The function is idempotent: ``normalize_text(normalize_text(s)) == normalize_text(s)``.
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = [
    "LINE_BREAKS",
    "remove_format_characters",
    "map_d_lookalikes",
    "fold_compatibility",
    "normalize_text",
    "normalize_tone_marks",
    "normalize_prices",
    "space_punctuation",
]

#: Characters treated as line breaks (all map to a single space).
LINE_BREAKS = "\n\r\v\f\x85\u2028\u2029\t"
_LINE_BREAK_RE = re.compile("[" + re.escape(LINE_BREAKS) + "]")

_ZERO_WIDTH_SPACE = "\u200b"
# Every format character (category Cf) of Unicode 15.0 (Python 3.12's database; a test checks the two
# agree). Written out as ranges because scanning the database at import costs 0.2 s of CLI start-up.
_FORMAT_RANGES = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_FORMAT_RE = re.compile("[" + _FORMAT_RANGES + "]")

#: Look-alikes of đ (after lowercasing): eth U+00F0 and African d U+0256.
_D_LOOKALIKES = "\u00f0\u0256"
_D_LOOKALIKE_CHAR_RE = re.compile("[" + _D_LOOKALIKES + "]")
_D_LOOKALIKE_WORD_RE = re.compile(r"[^\W\d_]*[" + _D_LOOKALIKES + r"][^\W\d_]*", re.UNICODE)
# Letters of the Vietnamese alphabet (lowercase, NFC), the Latin letters f j w z of loanwords included.
_VI_BASE = set("abcdefghijklmnopqrstuvwxyzđăâêôơư")


def _is_vietnamese_letter(ch: str) -> bool:
    base = unicodedata.normalize("NFD", ch)
    # Strip the five tone marks, then recompose the vowel marks (ă â ê ô ơ ư).
    base = unicodedata.normalize("NFC", "".join(c for c in base if c not in _TONE_MARKS))
    return base in _VI_BASE


def remove_format_characters(text: str) -> str:
    """Deletes Unicode format characters (category ``Cf``); the zero-width space becomes a space.

    ``"\ufeffcon mèo"`` → ``"con mèo"``, ``"xe\u200bmáy"`` → ``"xe máy"``, ``"cà\u00adphê"`` → ``"càphê"``.
    """
    if text.isascii():  # every format character is above U+00AC
        return text
    if _ZERO_WIDTH_SPACE in text:
        text = text.replace(_ZERO_WIDTH_SPACE, " ")
    return _FORMAT_RE.sub("", text)


def fold_compatibility(text: str) -> str:
    """Unicode NFKC: canonical composition plus the folding of compatibility characters (step 1 of the module doc).

    ``"ﬁsh"`` → ``"fish"``, ``"ＣＯＦＦＥＥ２"`` → ``"COFFEE2"``, ``"ｶﾌｪ"`` → ``"カフェ"``; Vietnamese letters are
    unchanged (``"Ở"`` → ``"Ở"``).
    """
    if text.isascii():
        return text
    return unicodedata.normalize("NFKC", text)


def map_d_lookalikes(text: str) -> str:
    """Maps ``ð``/``ɖ`` to ``đ`` in words that are otherwise written in the Vietnamese alphabet.

    Args:
      text: lowercase NFC text.

    Returns:
      The text; ``ðường`` → ``đường``, while a word holding a letter outside the Vietnamese alphabet
      (``það``, Icelandic) is unchanged.
    """

    def fix(m: re.Match) -> str:
        word = m.group(0)
        if all(ch in _D_LOOKALIKES or _is_vietnamese_letter(ch) for ch in word):
            return word.translate({0xF0: "đ", 0x256: "đ"})
        return word

    if not _D_LOOKALIKE_CHAR_RE.search(text):
        return text
    return _D_LOOKALIKE_WORD_RE.sub(fix, text)


# Combining tone marks (NFD): grave, acute, hook above, tilde, dot below.
_TONE_MARKS = {"\u0300", "\u0301", "\u0309", "\u0303", "\u0323"}
_WORD_RE = re.compile(r"\w+", re.UNICODE)
# A quick test for the syllables _move_tone can change: o/u (any tone) followed by a/e/y (any tone).
_O_FORMS = "oòóỏõọ"
_U_FORMS = "uùúủũụ"
_OPEN_PAIR_RE = re.compile(f"[{_O_FORMS}][aàáảãạeèéẻẽẹ]|[{_U_FORMS}][yỳýỷỹỵ]")
# (?<!\w): matches start only at word starts, so a word without a pair costs one pass, not one per letter.
_OPEN_PAIR_WORD_RE = re.compile(f"(?<!\\w)\\w*(?:[{_O_FORMS}][aàáảãạeèéẻẽẹ]|[{_U_FORMS}][yỳýỷỹỵ])\\w*")


@functools.lru_cache(maxsize=1 << 16)
def _move_tone(word: str) -> str:
    """Puts the tone of an open ``oa``/``oe``/``uy`` syllable on its first vowel.

    Args:
      word: one lowercase NFC word.

    Returns:
      The word in NFC with the classic tone placement. Words that are not an
      open ``oa``/``oe``/``uy`` syllable (``hoàng``, ``quý``, ``ngoài``) are returned unchanged.
    """
    decomposed = unicodedata.normalize("NFD", word)
    # Split into (base letter + non-tone marks, tone) clusters.
    clusters: list[list[str]] = []  # [base_with_marks, tone]
    for ch in decomposed:
        if unicodedata.combining(ch):
            if not clusters:
                return word
            if ch in _TONE_MARKS:
                clusters[-1][1] += ch
            else:
                clusters[-1][0] += ch
        else:
            clusters.append([ch, ""])
    if len(clusters) < 2:
        return word
    tones = [i for i, (_, t) in enumerate(clusters) if t]
    if len(tones) != 1:
        return word
    bases = "".join(b[0] for b, _ in clusters)  # plain base letters
    full_bases = [b for b, _ in clusters]
    # Last two clusters must be exactly o+a, o+e or u+y without other diacritics.
    pair = (full_bases[-2], full_bases[-1])
    if pair not in {("o", "a"), ("o", "e"), ("u", "y")}:
        return word
    # "qu" + y: the u is part of the consonant (quý), not the nucleus.
    if pair == ("u", "y") and len(bases) >= 3 and bases[-3] == "q":
        return word
    # The vowel before the pair must not be a vowel (e.g. "uoa" does not exist, but be safe).
    if len(bases) >= 3 and bases[-3] in "aeiouyăâêôơư":
        return word
    tone_pos = tones[0]
    first, second = len(clusters) - 2, len(clusters) - 1
    if tone_pos not in (first, second):
        return word
    tone = clusters[tone_pos][1]
    clusters[tone_pos][1] = ""
    clusters[first][1] = tone
    rebuilt = "".join(b + t for b, t in clusters)
    return unicodedata.normalize("NFC", rebuilt)


def normalize_tone_marks(text: str) -> str:
    """Applies the classic tone placement to every open ``oa``/``oe``/``uy`` syllable.

    ``hoà`` → ``hòa``, ``khoẻ`` → ``khỏe``, ``thuỷ`` → ``thủy``; ``hoàng``, ``quý`` unchanged.

    Args:
      text: lowercase NFC text.

    Returns:
      NFC text with one tone convention.
    """
    # Only words holding an "oa"/"oe"/"uy" pair (any tones) can change; the others are not visited.
    if not _OPEN_PAIR_RE.search(text):
        return text
    return _OPEN_PAIR_WORD_RE.sub(lambda m: _move_tone(m.group(0)), text)


# Price: digits with optional thousands groups (".", ",", " " separators) then a currency
# marker. "k"/"nghìn"/"ngàn" multiply by 1,000; "triệu" by 1,000,000.
_PRICE_RE = re.compile(
    r"(?<![\w.,])(\d{1,3}(?:[., ]\d{3})+|\d+)(?:[.,](\d{1,2}))?\s*"
    r"(vnđ|vnd|đồng|đ|d|₫|k|nghìn|ngàn|triệu)(?!\w)",
    re.UNICODE,
)
# A currency sign before the amount: "₫ 25.000", "₫25.000", "vnd 25.000".
_PREFIX_PRICE_RE = re.compile(
    r"(?<!\w)(₫|vnđ|vnd)\s*(\d{1,3}(?:[., ]\d{3})+|\d+)(?![\w.,]?\d)(?!\s*(?:vnđ|vnd|đồng|đ|₫)(?!\w))",
    re.UNICODE,
)
_DIGIT_RE = re.compile(r"\d")
_MULTIPLIER = {"k": 1_000, "nghìn": 1_000, "ngàn": 1_000, "triệu": 1_000_000}


def _format_price(match: re.Match) -> str:
    digits = re.sub(r"[., ]", "", match.group(1))
    frac = match.group(2)
    unit = match.group(3)
    # A bare "d" is only a currency marker directly after digits ("20000d").
    if unit == "d" and match.group(0)[len(match.group(1)) :].startswith(" "):
        return match.group(0)
    value = int(digits)
    mult = _MULTIPLIER.get(unit, 1)
    if frac and mult > 1:
        value = value * mult + int(frac.ljust(len(str(mult)) - 1, "0")[: len(str(mult)) - 1])
    else:
        value = value * mult
        if frac and mult == 1:
            # "20.50 đồng" is not a Vietnamese price format; keep the integer part.
            pass
    return f"{value:,} đồng"


def normalize_prices(text: str) -> str:
    """Rewrites prices to the ``#,### đồng`` form of the OpenViVQA validation step (§3.2.4).

    Examples: ``20.000đ``, ``20 000 vnđ``, ``20,000 VND``, ``20k``, ``20.000₫``, ``₫ 20.000``, ``vnd 20.000``,
    ``1,5 triệu`` → ``20,000 đồng`` (and ``1,500,000 đồng``). Numbers without a currency marker are unchanged.

    Args:
      text: lowercase NFC text.

    Returns:
      Text with normalized prices.
    """
    if not _DIGIT_RE.search(text):  # every price has a digit; most answers have none
        return text
    text = _PRICE_RE.sub(_format_price, text)
    return _PREFIX_PRICE_RE.sub(lambda m: f"{int(re.sub(r'[., ]', '', m.group(2))):,} đồng", text)


_PUNCT_CANDIDATE_RE = re.compile(r"[^\w\s]|_")


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith(("P", "S")) and ch not in "#"


def space_punctuation(text: str) -> str:
    """Puts spaces around punctuation and symbols, keeping number separators intact.

    ``,`` and ``.`` between two digits (``20,000``, ``3.5``) and ``#`` stay attached.

    Args:
      text: NFC text.

    Returns:
      Text with punctuation as separate whitespace-delimited tokens (not collapsed).
    """
    n = len(text)

    def spaced(m: re.Match) -> str:
        ch, i = m.group(0), m.start()
        if not _is_punct(ch):
            return ch
        if ch in ",." and 0 < i < n - 1 and text[i - 1].isdigit() and text[i + 1].isdigit():
            return ch
        return f" {ch} "

    # Every punctuation or symbol character is outside \w and \s except "_" (Pc): only those are visited.
    if not _PUNCT_CANDIDATE_RE.search(text):
        return text
    return _PUNCT_CANDIDATE_RE.sub(spaced, text)


def normalize_text(text: str, *, spaced_punctuation: bool = True) -> str:
    """Normalizes one string (question, answer, OCR token or prediction); see the module doc.

    Results are cached (the last 65,536 distinct strings): answers repeat across questions and splits.

    Args:
      text: any Python string. ``None`` is rejected.
      spaced_punctuation: step 6 (spaces around punctuation). False keeps punctuation where it was
        written, for rules that delete it (SQuAD's EM/F1: ``don't`` → ``dont``, not ``don t``).

    Returns:
      The normalized string; whitespace-tokenizing it gives the metric tokens.

    Raises:
      TypeError: if ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"normalize_text expects str, got {type(text).__name__}: {text!r}")
    return _normalize(text, spaced_punctuation)


@functools.lru_cache(maxsize=1 << 16)
def _normalize(text: str, spaced_punctuation: bool) -> str:
    """The steps of the module doc, in order (uncached body of :func:`normalize_text`)."""
    text = remove_format_characters(text)
    text = fold_compatibility(text)
    text = map_d_lookalikes(text.lower())
    text = _LINE_BREAK_RE.sub(" ", text)
    text = normalize_tone_marks(text)
    text = normalize_prices(text)
    if spaced_punctuation:
        text = space_punctuation(text)
    return " ".join(text.split())
