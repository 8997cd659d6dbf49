"""The polarity of a yes/no question and of its answer, by English and Vietnamese negation rules.

A yes/no question's answer is the existence of what it names, flipped once for each negation the question
carries: *is there a red shape?* is answered *yes* when a red shape is present, *is there no red shape?* when none
is. A learner that has to find both the negation and what the words name in the picture faces the answer as the
exclusive-or of the two, and either alone tells it nothing about the answer; learners from scratch memorize their
training pictures long before they find both. These rules give the negation without learning it.

Negation cues (:func:`negation_cues`), per word of the question (lower-cased, words and punctuation split):

* English: *no*, *not*, *never*, *none*, *nor*, *cannot*, *nothing*, *nobody*, *neither*, and a word ending in
  *n't* (*isn't*, *doesn't*);
* Vietnamese: *chẳng*, *chả*, *đừng*, *chưa* and *không*, except where these are the question's particle rather
  than a negation: *không* or *chưa* followed by the end of the question, a question mark or a comma (*có hình
  màu đỏ nào không ?*, *..., đúng không ?*, *đã ăn chưa?*); and *không* as the first syllable of a compound noun
  (*không gian* space, *không khí* air, *không quân* air force, *không trung* mid-air, *không phận* airspace,
  *không lưu* air traffic, *không ảnh* aerial photograph).

The rules do not find a negation's scope: *how many people do not walk?* has a cue, as does *is the man who does not
wear a tie on the left?*, where the negation is in a relative clause and does not flip the answer. Use them for
a question's polarity, not to parse it.

Answer polarity (:func:`answer_polarity`): +1 for an affirming answer (*yes*, *có*, *đúng*, *phải*, *vâng*,
*true*), -1 for a denying one (*no*, *không*, *sai*, *chưa*, *false*), 0 for any other; case and final punctuation
are ignored. A Vietnamese tag question (*không có hình đỏ nào, đúng không?*) is answered *đúng* when its statement
holds, so its affirming answer, like *có* and *yes*, says the question's (negated) statement is true.

Absence answers (:data:`NOTHING`): the first word of an answer that says nothing is there, to *what is left of
the circle?*: *nothing*, *none*, *không* (*không có gì*). Side words (:data:`RELATION_WORDS`): *left*, *right*,
*above*, *below*, *trái*, *phải*, *trên*, *dưới*; the thing such a question names follows its side word.

Comparison words, for questions about two named things (*are there more circles than squares?*, *are the circle
and the square the same colour?*, *có nhiều hình tròn hơn hình vuông không?*, *hình tròn và hình vuông có cùng
màu không?*): a word of :data:`COMPARISON_SPLIT` (*than*, *and*, *hơn*, *và*) ends the first thing's words and
begins the second's, and a word of :data:`REVERSING` (*fewer*, *less*, *different*, *ít*, *khác*) turns the
comparison round (*fewer* is *more* with the two swapped, *different colours* is *not the same colour*). A word
of :data:`COMPARISON_END` (*same*, *different*, *cùng*, *khác*, *giống*) ends the second thing's words: what
follows it (*colour*, *màu không*) names no thing. Like the
negation, the direction of a comparison is an exclusive-or with what the words name when it is learned from the
answers alone, so it is read by rule.
"""

from __future__ import annotations

import re

from openvivqa_jax.text.language import detect_language

__all__ = ["negation_cues", "polarity", "answer_polarity", "AFFIRMING", "DENYING", "NEGATION_EN",
           "NEGATION_VI", "KHONG_COMPOUNDS", "COMPARISON_SPLIT", "COMPARISON_END", "REVERSING", "NOTHING",
           "RELATION_WORDS"]

#: English negation words; a word ending in ``n't`` is one too.
NEGATION_EN = frozenset({"no", "not", "never", "none", "nor", "cannot", "nothing", "nobody", "neither"})
#: Vietnamese negation words; ``không`` and ``chưa`` are the question particle before ``?``, ``,`` or the end.
NEGATION_VI = frozenset({"không", "chẳng", "chả", "đừng", "chưa"})
#: Second syllables after which ``không`` begins a compound noun (space, air, air force, mid-air, airspace, air
#: traffic, aerial photograph), not a negation.
KHONG_COMPOUNDS = frozenset({"gian", "khí", "quân", "trung", "phận", "lưu", "ảnh"})
#: Answers that affirm the question's statement, and answers that deny it.
AFFIRMING = frozenset({"yes", "có", "đúng", "phải", "vâng", "true"})
DENYING = frozenset({"no", "không", "sai", "chưa", "false"})
#: First words of an answer saying that nothing is there (module doc).
NOTHING = frozenset({"nothing", "none", "không"})
#: Words between the two things a comparison names (module doc).
COMPARISON_SPLIT = frozenset({"than", "and", "hơn", "và"})
#: Words after the second thing of an attribute comparison, which end its words (module doc).
COMPARISON_END = frozenset({"same", "different", "cùng", "khác", "giống"})
#: Words that turn a comparison round: fewer / less for more, different for the same (module doc).
REVERSING = frozenset({"fewer", "less", "different", "ít", "khác"})
#: Side words after which a relation question names its thing (*left of the red circle*, *bên trái hình tròn*).
RELATION_WORDS = frozenset({"left", "right", "above", "below", "trái", "phải", "trên", "dưới"})

_TOKENS = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")
_PARTICLE_FOLLOWERS = frozenset({"?", ",", "!", "."})


def _words(question: str) -> list[str]:
    return [t.replace("’", "'") for t in _TOKENS.findall(question.lower())]


def negation_cues(question: str, language: str | None = None) -> list[int]:
    """Positions (in the question's lower-cased word and punctuation tokens) of its negation cues (module doc).

    ``language``: ``"en"`` or ``"vi"`` applies that language's rules only; ``None`` detects the language
    (:func:`openvivqa_jax.text.language.detect_language`) and applies both sets when it is undetermined. Another
    language has no cues (an empty list).
    """
    language = language or detect_language(question) or "both"
    words = _words(question)
    cues = []
    for i, w in enumerate(words):
        after = words[i + 1] if i + 1 < len(words) else None
        if language in ("en", "both") and (w in NEGATION_EN or w.endswith("n't")):
            cues.append(i)
        elif language in ("vi", "both") and w in NEGATION_VI:
            particle = w in ("không", "chưa") and (after is None or after in _PARTICLE_FOLLOWERS)
            compound = w == "không" and after in KHONG_COMPOUNDS
            if not particle and not compound:
                cues.append(i)
    return cues


def polarity(question: str, language: str | None = None) -> int:
    """+1 for a question without negation, -1 for one negated an odd number of times (its cues, module doc)."""
    return -1 if len(negation_cues(question, language)) % 2 else 1


def answer_polarity(answer: str) -> int:
    """+1 for an affirming answer, -1 for a denying one, 0 for any other (module doc); case, surrounding spaces and
    a final ``.``, ``!`` or ``?`` are ignored."""
    a = answer.strip().lower().rstrip(".!?").strip()
    return 1 if a in AFFIRMING else -1 if a in DENYING else 0
