"""Counts in Vietnamese text: number words, which numbers are counts, and the count an answer gives.

The rules of the OpenViVQA annotation guideline's "Quantities" row (paper Table 1: quantities in words, not
above ten) need to know which numbers in a question or answer are counts (``có ba người``) and which are
prices, times, ages or labels (``hai mươi nghìn đồng``, ``số 5``, ``ba giờ``). The same rules give the count a
counting question's answer states, which the glimpses' count loss trains on
(:func:`answer_count`). Words are syllables of the normalized text (``normalize_text``), punctuation left out.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from openvivqa_jax.text.normalize import normalize_text

__all__ = ["COUNT_NOUNS", "NUMBER_WORDS", "ENGLISH_NUMBER_WORDS", "number_value", "count_question", "quantities",
           "english_answer_count", "answer_count",
           "syllables", "is_punctuation"]

#: Classifiers and nouns that a count directly precedes (``ba người``, ``hai chiếc xe``).
COUNT_NOUNS = frozenset({
    "người", "cái", "chiếc", "con", "quả", "trái", "cây", "tờ", "cuốn", "quyển", "ngôi", "tòa", "căn", "bức",
    "tấm", "chai", "lon", "ly", "cốc", "tách", "bát", "chén", "tô", "đĩa", "dĩa", "đôi", "bó", "ổ", "viên",
    "miếng", "lát", "chú", "cô", "bạn", "em", "ông", "bà", "anh", "chị", "cậu", "đứa", "cháu", "bé", "lá", "hộp",
    "gói", "túi", "bao", "thùng", "chậu", "bông", "đóa", "khẩu", "cặp", "bộ", "tầng", "lầu", "món", "loại",
    "chữ", "dòng", "biển", "bảng", "cửa", "xe", "gian", "sạp", "quầy", "nhà", "bàn", "ghế", "thanh", "cục",
    "hình", "ô", "cột", "vật", "đèn", "bình", "lọ", "hũ", "cuộn", "sợi", "mảnh", "hạt", "cành",
})

#: Vietnamese number words and their roles in :func:`number_value`.
NUMBER_WORDS: dict[str, int] = {
    "một": 1, "mốt": 1, "hai": 2, "ba": 3, "bốn": 4, "tư": 4, "năm": 5, "lăm": 5, "sáu": 6, "bảy": 7, "bẩy": 7,
    "tám": 8, "chín": 9, "mười": 10, "mươi": -10, "chục": -10, "linh": 0, "lẻ": 0, "trăm": -100, "nghìn": -1000,
    "ngàn": -1000, "triệu": -1_000_000,
}

#: English number words of :func:`english_answer_count` (answers to ``how many`` questions).
ENGLISH_NUMBER_WORDS: dict[str, int] = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}

#: Words after a number that make it a measure, time or price rather than a count.
_NOT_COUNT_AFTER = frozenset({
    "đồng", "vnđ", "vnd", "k", "nghìn", "ngàn", "triệu", "giờ", "phút", "giây", "ngày", "tháng", "năm", "tuổi",
    "km", "m", "cm", "mm", "kg", "g", "lít", "l", "ml", "độ", "phần", "%", "h",
})
#: Words before a number that make it a label (house, kiosk, room number, a date), not a count.
_LABEL_BEFORE = frozenset({
    "số", "thứ", "ngày", "tháng", "năm", "lúc", "đường", "phố", "hẻm", "ngõ", "kiốt", "ki-ốt", "phòng", "sạp",
    "quầy", "tầng", "lầu", "bàn", "xe", "tuyến", "mã", "kênh", "lớp", "khu", "lô", "nhà", "quận", "phường",
    "hotline", "đt", "sđt",
})
#: Question words asking for a count, and words that make such a question ask for something else.
_COUNT_QUESTION = frozenset({"bao nhiêu", "mấy"})
_NOT_COUNT_QUESTION = frozenset({"tiền", "giá", "đồng", "giờ", "tuổi", "năm", "số", "ngày", "tháng", "phần", "lúc"})

#: Words before ``chục``/``trăm``/... that make a vague count of tens or more (``hàng chục``, ``vài trăm``).
_VAGUE_BEFORE = frozenset({"hàng", "vài", "mấy", "nhiều", "dăm"})


_DIGITS_RE = re.compile(r"^\d+$")


def number_value(words: Sequence[str]) -> int:
    """The value of a run of Vietnamese number words (:data:`NUMBER_WORDS`).

    ``["ba"]`` -> 3, ``["mười", "một"]`` -> 11, ``["hai", "mươi", "lăm"]`` -> 25, ``["một", "trăm", "linh",
    "năm"]`` -> 105, ``["hai", "nghìn"]`` -> 2000; ``["hàng", "chục"]``-style vague counts give the multiplier
    (``["chục"]`` -> 10).

    Raises:
      KeyError: a word is not a number word.
    """
    total = hundreds = current = 0
    for w in words:
        v = NUMBER_WORDS[w]
        if v == 10:  # mười
            current += 10
        elif v == -10:  # mươi / chục: the units so far are tens
            current = max(current, 1) * 10
        elif v == -100:
            hundreds = max(current, 1) * 100
            current = 0
        elif v in (-1000, -1_000_000):
            total += max(hundreds + current, 1) * -v
            hundreds = current = 0
        else:
            current += v
    return total + hundreds + current


def count_question(question_tokens: Sequence[str]) -> bool:
    """Whether a question's syllables ask for a count: ``bao nhiêu`` or ``mấy``, and no word of a price, time,
    age or label (``giá``, ``giờ``, ``tuổi``, ``số``, ...)."""
    text = " ".join(question_tokens)
    asks_count = any(f" {w} " in f" {text} " for w in _COUNT_QUESTION)
    return asks_count and not any(t in _NOT_COUNT_QUESTION for t in question_tokens)


def quantities(tokens: Sequence[str], count_question: bool) -> list[tuple[str, int, str]]:
    """Counts in a syllable list: ``[(kind "digits" | "words", value, the words)]``.

    A count is a pure-digit token or a maximal run of number words that is directly followed by a
    :data:`COUNT_NOUNS` word, or (answers to a ``bao nhiêu`` / ``mấy`` question that asks for no price, time or
    age) is not followed by a measure/price/time word; a number right after a label word (``số``, ``đường``,
    ``sạp``, ...) is a label, not a count. A vague count (``hàng chục``, ``vài trăm``) is valued at twice its
    multiplier.
    """
    out = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if _DIGITS_RE.match(t):
            kind, j = "digits", i + 1
        elif t in NUMBER_WORDS and NUMBER_WORDS[t] != 0 and t not in ("mươi", "lăm", "mốt", "tư"):
            j = i + 1
            while j < len(tokens) and tokens[j] in NUMBER_WORDS:
                j += 1
            kind = "words"
        else:
            i += 1
            continue
        before = tokens[i - 1] if i else ""
        after = tokens[j] if j < len(tokens) else ""
        run = tokens[i:j]
        if before not in _LABEL_BEFORE and (after in COUNT_NOUNS or (count_question and after not in _NOT_COUNT_AFTER
                                                                        and not (after and _DIGITS_RE.match(after)))):
            value = int(t) if kind == "digits" else number_value(run)
            if kind == "words" and before in _VAGUE_BEFORE and NUMBER_WORDS[run[0]] < 0:
                value *= 2  # "vài chục" (a few tens) is at least twenty
            out.append((kind, value, " ".join(run)))
        i = j
    return out


def english_answer_count(question_tokens: Sequence[str], answer_tokens: Sequence[str]) -> int | None:
    """The count an English answer gives to a ``how many`` question (the tokens of :func:`syllables`), or None:
    the answer's one number, digits or a word of :data:`ENGLISH_NUMBER_WORDS` (``two``, ``2 cats``, ``there are
    three``); none or several numbers, a count below 1, or a question that does not ask ``how many``: None."""
    if " how many " not in f" {' '.join(question_tokens)} ":
        return None
    found = [int(t) if _DIGITS_RE.match(t) else ENGLISH_NUMBER_WORDS[t] for t in answer_tokens
             if _DIGITS_RE.match(t) or t in ENGLISH_NUMBER_WORDS]
    return found[0] if len(found) == 1 and found[0] >= 1 else None


def answer_count(question: str, answer: str) -> int | None:
    """The count an answer gives to a counting question, or None.

    The question must ask for a count (:func:`count_question`: ``bao nhiêu`` or ``mấy``, not of a price, time,
    age or label; the rules of ``openvivqa_jax.analysis.guideline.rule_quantities``), and the answer must hold
    exactly one count (:func:`quantities`: number words or digits before a count noun, ``có ba người`` -> 3);
    answers with none (``không có``) or several (``hai người và một chiếc xe``) give None, as do counts
    below 1. An English ``how many`` question counts by :func:`english_answer_count` (``two`` -> 2).
    """
    q_toks = syllables(question)
    if not count_question(q_toks):
        return english_answer_count(q_toks, syllables(answer))
    found = quantities(syllables(answer), True)
    if len(found) != 1 or found[0][1] < 1:
        return None
    return int(found[0][1])



def is_punctuation(token: str) -> bool:
    """Whether every character of ``token`` is Unicode punctuation (P*) or a symbol (S*)."""
    return bool(token) and all(unicodedata.category(ch)[0] in "PS" for ch in token)


def syllables(text: str) -> list[str]:
    """The syllables of ``text``: whitespace tokens of :func:`normalize_text` that are not punctuation.

    ``"Cửa tiệm này tên gì?"`` -> ``["cửa", "tiệm", "này", "tên", "gì"]``; ``"20.000đ"`` -> ``["20,000",
    "đồng"]``. This is the paper's token count for Vietnamese without word segmentation (§3.3.1 counts
    "tokens"; §3.3.2 word-segments with VnCoreNLP first, which this does not).
    """
    return [t for t in normalize_text(text).split() if not is_punctuation(t)]
