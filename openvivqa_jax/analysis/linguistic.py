"""Linguistic level of a text (word, phrase or sentence): a heuristic stand-in for the paper's LLS.

The paper (§3.3.2, Figure 7, Table 4) word-segments Vietnamese with VnCoreNLP, parses it with PhoNLP and
calls a text a *word* when it is one word-segmented token, a *sentence* when its root is a verb with a
``sub`` (subject) dependent, and a *phrase* otherwise. No PyPI package ships a Vietnamese dependency parser
inside itself (PhoNLP, VnCoreNLP's wrappers, underthesea, Stanza and Trankit all download their models at run
time; pyvi ships a word segmenter and a POS tagger but no parser), so this module uses closed-class words
instead of a parse. On the syllables of :func:`openvivqa_jax.analysis.records.syllables`:

1. **word**: exactly one syllable. (Multi-syllable words such as ``xe đạp`` are phrases here; the paper's
   word segmentation would call them words, so this undercounts words.)
2. **sentence**: a subject followed by a predicate, recognised by one of

   a. a predicate marker (:data:`PREDICATE_MARKERS`: the copula ``là``, ``có``, the aspect markers ``đang``,
      ``đã``, ``sẽ``, ``vừa``, ``sắp``, the passive ``được``/``bị``, the negators ``không``/``chưa``, and
      ``đều``, ``cũng``, ``vẫn``) at position >= 1 whose preceding words (the subject) do not start with a
      preposition or conjunction (:data:`NON_SUBJECT_STARTS`): ``đây là tỉnh vĩnh long``,
      ``món ăn có giá 20,000 đồng``; but ``có một người đàn ông`` (no subject) and ``ở bên trái là ...``
      are not;
   b. a demonstrative (:data:`DEMONSTRATIVES`: ``này``, ``đó``, ``kia``, ``ấy``) closing a subject noun phrase
      and followed by more words: ``cửa tiệm này tên mộc``, ``quán này làm bánh xèo theo kiểu nhật bản``;
   c. a pronoun subject (:data:`PRONOUN_SUBJECTS`) as the first word, followed by more words:
      ``đó là ...``, ``họ đang ăn``.
3. **phrase**: everything else.

Gap: a sentence whose verb carries no marker and whose subject has no demonstrative
(``người bên trái mặc áo màu đỏ``) is counted as a phrase, and a noun phrase containing ``có`` after a noun
(``cửa hàng có biển hiệu màu đỏ``, read as a sentence here) may go the other way. The number of dependencies
and the tree height of the paper's Table 3 need a parser and are not computed.
"""

from __future__ import annotations

from collections.abc import Sequence

from openvivqa_jax.analysis.records import syllables

__all__ = [
    "LEVELS",
    "PREDICATE_MARKERS",
    "NON_SUBJECT_STARTS",
    "DEMONSTRATIVES",
    "PRONOUN_SUBJECTS",
    "level_of_tokens",
    "linguistic_level",
]

#: The three levels, in the paper's order (Table 4 columns).
LEVELS = ("word", "phrase", "sentence")

#: Words that mark a predicate when a subject precedes them (copula, existential/possessive, aspect, passive,
#: negation, adverbs that only precede predicates).
PREDICATE_MARKERS = frozenset({
    "là", "có", "đang", "đã", "sẽ", "vừa", "sắp", "được", "bị", "không", "chưa", "đều", "cũng", "vẫn",
})

#: First words that make the words before a marker a modifier, not a subject (prepositions, locatives,
#: conjunctions).
NON_SUBJECT_STARTS = frozenset({
    "ở", "trên", "trong", "dưới", "bên", "cạnh", "phía", "tại", "của", "từ", "đến", "tới", "với", "cho", "về",
    "vì", "để", "khi", "lúc", "sau", "trước", "giữa", "gần", "ngoài", "và", "hoặc", "hay", "nhưng", "bằng",
    "theo", "như", "không", "chưa", "có", "là",
})

#: Demonstratives that close a subject noun phrase (``cửa hàng này``).
DEMONSTRATIVES = frozenset({"này", "đó", "kia", "ấy", "nọ"})

#: Pronouns that are a subject when they open the text.
PRONOUN_SUBJECTS = frozenset({"đây", "đó", "kia", "nó", "họ", "tôi", "chúng", "mọi"})


def level_of_tokens(tokens: Sequence[str]) -> str:
    """The level (``"word"``, ``"phrase"`` or ``"sentence"``) of a syllable list; rules in the module doc.

    Args:
      tokens: syllables, ``(num_syllables,)``, lowercase, without punctuation tokens.
    """
    if len(tokens) <= 1:
        return "word"
    for i, tok in enumerate(tokens):
        if i >= 1 and tok in PREDICATE_MARKERS and tokens[0] not in NON_SUBJECT_STARTS:
            return "sentence"
        if 1 <= i < len(tokens) - 1 and tok in DEMONSTRATIVES and tokens[0] not in NON_SUBJECT_STARTS:
            return "sentence"
    if tokens[0] in PRONOUN_SUBJECTS:
        return "sentence"
    return "phrase"


def linguistic_level(text: str) -> str:
    """The level of a text (normalized and split into syllables first; see the module doc).

    ``"đèn"`` -> word; ``"đường tạ hiện"`` -> phrase; ``"đây là tỉnh vĩnh long"`` -> sentence.
    """
    return level_of_tokens(syllables(text))
