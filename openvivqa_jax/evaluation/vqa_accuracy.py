"""VQA accuracy, the official VQA/TextVQA evaluation rule (Antol et al. 2015; ``vqaEval.py``).

For a question with human answers ``a_1..a_m`` (m = 10 in VQA v2 and TextVQA) and prediction ``p``::

    acc = mean over j of min(1, #{k != j : a_k == p} / 3)

i.e. every answer is left out once and the prediction is scored against the other m - 1 answers
("min(#humans that said it / 3, 1)" averaged over the 10 choose 9 subsets). With 10 answers, 3, 2
and 1 agreeing answers give 0.9, 0.6 and 0.3; 4 or more give 1.

Answer processing, chosen per dataset (config ``eval.answer_rules``, CLI ``--answer_rules``):

- ``"vietnamese"`` (OpenViVQA, ViVQA, the synthetic set): answers are compared after
  :func:`~openvivqa_jax.evaluation.sanitize.sanitize_text` (NFC, lowercase, one tone-mark convention,
  prices, spaced punctuation). English article and number-word rules do not apply to Vietnamese (``an``
  is a word, ``một`` is not written ``1`` by annotators consistently).
- ``"english"`` (TextVQA, ST-VQA): :func:`english_answer`, the official VQA evaluation's answer
  processing (``processPunctuation`` and ``processDigitArticle`` of ``vqaEval.py``; the same rule as
  the EvalAI answer processor that MMF applies to TextVQA): line breaks and tabs to spaces; lowercase;
  ``,`` and ``?`` deleted and ``'s`` split off; each punctuation mark of ``; / [ ] " { } ( ) = + \\ _ -
  > < @ ` , ? !`` deleted when it touches a space or the text holds a digit-comma-digit group, otherwise
  replaced by a space; a period not followed by a digit deleted (the first 32 of them, as the official script's
  ``re.sub(..., re.UNICODE)`` passes the flag as the count: :data:`MAX_PERIODS_DELETED`); number words ``none``, ``zero`` ..
  ``ten`` to digits; the articles ``a``, ``an``, ``the`` dropped; contractions written without their
  apostrophe (``dont``, ``isnt``, ``youre``) given it back. One deviation: ``vqaEval.py`` applies the
  processing only when the ten answers disagree; we apply it always, as EvalAI/MMF do (otherwise ``5.``
  scores 0 against ten ``5``).

The rule is defined for the 10 answers of VQA/TextVQA. Questions with fewer than
:data:`MIN_ANSWERS` references (OpenViVQA and ViVQA have one, ST-VQA one or two) would be capped
below 1 by the leave-one-out rule even for a perfect answer, so for them the score is exact match
with any reference (1 or 0); the evaluator counts them in its notes.

Arrays: ``(items,)`` per-question scores.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import numpy as np

__all__ = ["ANSWER_RULES", "MIN_ANSWERS", "english_answer", "vqa_accuracy"]

#: Answer-processing conventions (module doc).
ANSWER_RULES = ("vietnamese", "english")

#: References needed for the leave-one-out rule; fewer fall back to exact match.
MIN_ANSWERS = 10

_PUNCTUATION = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!")
_COMMA_IN_NUMBER = re.compile(r"(\d)(,)(\d)")
# vqaEval.py's periodStrip pattern, "(?!<=\d)(\.)(?!\d)": its first group is a (vacuous) negative lookahead,
# not a lookbehind, so in effect a period is deleted unless a digit follows it ("5." -> "5", "2.5" kept).
_PERIOD = re.compile(r"\.(?!\d)")
#: At most this many such periods are deleted per answer, as in the official scripts: ``vqaEval.py`` calls
#: ``periodStrip.sub("", outText, re.UNICODE)``, where ``re.UNICODE`` (= 32) lands in the ``count`` argument, and
#: EvalAI's answer processor (MMF's TextVQA evaluation) copies that call. We keep the limit so that scores stay the
#: official ones; it only matters for an answer with more than 32 periods.
MAX_PERIODS_DELETED = int(re.UNICODE)
_NUMBER_WORDS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
                 "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
_ARTICLES = frozenset(["a", "an", "the"])
# English contractions in their written form; every spelling with one or more apostrophes missing maps to it.
_CONTRACTIONS_WRITTEN = """ain't aren't can't could've couldn't couldn't've didn't doesn't don't hadn't hadn't've hasn't
haven't he'd he'd've he's how'd how'll how's i'd i'd've i'm i've isn't it'd it'd've it'll let's ma'am mightn't
mightn't've might've mustn't must've needn't not've o'clock oughtn't 'ow's'at shan't she'd she'd've she'll she's
should've shouldn't shouldn't've somebody'd somebody'd've somebody'll somebody's someone'd someone'd've someone'll
someone's something'd something'd've something'll that's there'd there'd've there're there's they'd they'd've
they'll they're they've 'twas wasn't we'd we'd've we're we've weren't what'll what're what's what've when's where'd
where's where've who'd who'd've who'll who're who's who've why'll why're why's won't would've wouldn't wouldn't've
y'all y'all'll y'all'd've you'd you'd've you'll you're you've""".split()
# Apostrophe-less spellings that are English words keep their meaning ("its", "well", "ill", ...).
_NOT_CONTRACTIONS = frozenset(["hell", "ill", "its", "id", "were", "well", "wed", "shell", "shed", "lets", "whore"])


def _contraction_table() -> dict[str, str]:
    """Spelling with one or more apostrophes missing -> the written contraction."""
    table: dict[str, str] = {}
    for written in _CONTRACTIONS_WRITTEN:
        parts = written.split("'")
        for keep in itertools.product((False, True), repeat=len(parts) - 1):
            if all(keep):
                continue
            form = parts[0] + "".join(("'" if k else "") + p for k, p in zip(keep, parts[1:]))
            if form and form not in _NOT_CONTRACTIONS:
                table.setdefault(form, written)
    return table


_CONTRACTIONS = _contraction_table()


def english_answer(text: str) -> str:
    """The official VQA evaluation's processing of one answer (module doc, ``"english"`` rules).

    ``"Two."`` → ``"2"``, ``"a stop sign"`` → ``"stop sign"``, ``"dont know"`` → ``"don't know"``.

    Args:
      text: a raw answer (prediction or reference).

    Returns:
      The processed answer: words separated by single spaces.
    """
    text = " ".join(text.replace("\n", " ").replace("\t", " ").split())
    text = text.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    out = text
    has_number_comma = _COMMA_IN_NUMBER.search(text) is not None
    for p in _PUNCTUATION:
        if (p + " " in text or " " + p in text) or has_number_comma:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    out = _PERIOD.sub("", out, count=MAX_PERIODS_DELETED)
    words = []
    for w in out.split():
        w = _NUMBER_WORDS.get(w, w)
        if w not in _ARTICLES:
            words.append(_CONTRACTIONS.get(w, w))
    return " ".join(words)


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
