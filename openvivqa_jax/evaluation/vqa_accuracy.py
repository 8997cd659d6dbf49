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
- ``"english"`` (TextVQA, ST-VQA): :func:`english_answer`, the official answer processing of EvalAI's TextVQA and
  ST-VQA evaluation as MMF applies it (``EvalAIAnswerProcessor`` of ``mmf/utils/m4c_evaluators.py``, itself the
  ``processPunctuation`` and ``processDigitArticle`` of ``vqaEval.py``): lowercase; ``,`` and ``?`` deleted and
  ``'s`` split off; line breaks and tabs to spaces; each punctuation mark of ``; / [ ] " { } ( ) = + \\ _ - > < @
  ` , ? !`` deleted when it touches a space, otherwise replaced by a space; a period not followed by a digit
  deleted (the first 32 of them, as the official script's ``re.sub(..., re.UNICODE)`` passes the flag as the
  count: :data:`MAX_PERIODS_DELETED`); number words ``none``, ``zero`` .. ``ten`` to digits; the articles ``a``,
  ``an``, ``the`` dropped; contractions written without an apostrophe given it back from EvalAI's table
  (:data:`CONTRACTIONS`). ``vqaEval.py`` (VQA v1/v2) differs in two ways: it processes the answers only when
  the ten human answers disagree, and it neither lowercases nor splits ``'s`` before the punctuation step.

Questions and their answer counts: the rule is defined for the 10 answers of VQA/TextVQA (MMF's
``TextVQAAccuracyEvaluator`` asserts ten; ``vqaEval.py`` runs the same loop over however many there are).

- ``"official"`` (:func:`vqa_accuracy` with ``min_answers`` :data:`OFFICIAL_MIN_ANSWERS`, the evaluator's
  official text mode): the leave-one-out rule over all the answers of a question with 3 or more, on the
  English processing; exact match with any processed answer below 3 (ST-VQA's one or two answers: MMF's
  ``STVQAAccuracyEvaluator``, since the leave-one-out rule could not reach 1 there).
- the other text modes (``min_answers`` :data:`MIN_ANSWERS`): the leave-one-out rule with 10 or more answers,
  exact match with any reference below 10 (OpenViVQA and ViVQA have one answer); the evaluator counts them in
  its notes.

Arrays: ``(items,)`` per-question scores.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

__all__ = ["ANSWER_RULES", "MIN_ANSWERS", "OFFICIAL_MIN_ANSWERS", "CONTRACTIONS", "english_answer", "vqa_accuracy"]

#: Answer-processing conventions (module doc).
ANSWER_RULES = ("vietnamese", "english")

#: References needed for the leave-one-out rule in the Vietnamese-normalized and pycocoevalcap text modes; fewer
#: fall back to exact match.
MIN_ANSWERS = 10
#: The same in the official text mode: ST-VQA's one or two answers are scored by exact match (module doc).
OFFICIAL_MIN_ANSWERS = 3

_PUNCTUATION = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!")
# EvalAI's commaStrip, "(?<=\d)(\,)+(?=\d)": a digit-comma-digit group makes every punctuation mark deleted rather
# than spaced. The commas are already deleted when it is searched, so it never matches; kept to follow the script.
_COMMA_IN_NUMBER = re.compile(r"(?<=\d),+(?=\d)")
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
# English contractions in their written form; EvalAI's table maps spellings with one apostrophe missing to them.
_CONTRACTIONS_WRITTEN = """ain't aren't can't could've couldn't couldn't've didn't doesn't don't hadn't hadn't've hasn't
haven't he'd he'd've he's how'd how'll how's i'd isn't it'd it'd've it'll let's ma'am mightn't mightn't've might've mustn't
must've needn't not've o'clock oughtn't 'ow's'at shan't she'd she'd've she'll should've shouldn't shouldn't've somebody'd've
somebody'll somebody's someone'd someone'd've someone'll someone's something'd something'd've something'll that's
there'd there'd've there're there's they'd they'd've they'll they're they've 'twas wasn't we'd we'd've we're we've weren't
what'll what're what's what've when's where'd where's where've who'd who'd've who'll who're who's who've why'll
why're why's won't would've wouldn't wouldn't've y'all y'all'll y'all'd've you'd you'd've you'll you're
you've""".split()
# Apostrophe-less spellings that are English words keep their meaning ("its", "well", "ill", ...): EvalAI's table
# has no entry for them. Its entries for "I'm", "I've" and "I'd've" are capitalized and so never match a lowercased
# answer, and it has no entry "shes": those four are not in the written list above.
_NOT_CONTRACTIONS = frozenset(["hell", "ill", "its", "id", "were", "well", "wed", "shell", "shed", "lets", "whore"])


def _contraction_table() -> dict[str, str]:
    """EvalAI's table: every spelling of a written contraction with exactly one of its apostrophes missing ->
    the written form, except the words of :data:`_NOT_CONTRACTIONS`; and the written ``somebody'd``, which the
    table maps to ``somebodyd``."""
    table: dict[str, str] = {}
    for written in _CONTRACTIONS_WRITTEN:
        parts = written.split("'")
        for missing in range(len(parts) - 1):
            form = "".join(p + ("" if k == missing or k == len(parts) - 1 else "'") for k, p in enumerate(parts))
            if form not in _NOT_CONTRACTIONS:
                table.setdefault(form, written)
    table["somebody'd"] = "somebodyd"
    return table


#: Spelling -> replacement of the official contraction step (EvalAI's ``CONTRACTIONS``, as it acts on lowercased
#: words).
CONTRACTIONS = _contraction_table()


def english_answer(text: str) -> str:
    """The official processing of one answer: EvalAI's answer processor as MMF applies it (module doc).

    ``"Two."`` → ``"2"``, ``"a stop sign"`` → ``"stop sign"``, ``"dont know"`` → ``"don't know"``, ``"It's"`` →
    ``"it 's"``.

    Args:
      text: a raw answer (prediction or reference).

    Returns:
      The processed answer: words separated by single spaces.
    """
    text = text.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    text = text.replace("\n", " ").replace("\t", " ").strip()
    out = text
    has_number_comma = _COMMA_IN_NUMBER.search(text) is not None
    for p in _PUNCTUATION:
        if (p + " " in text or " " + p in text) or has_number_comma:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    out = _PERIOD.sub("", out, count=MAX_PERIODS_DELETED)
    words = []
    for w in out.lower().split():
        w = _NUMBER_WORDS.get(w, w)
        if w not in _ARTICLES:
            words.append(CONTRACTIONS.get(w, w))
    return " ".join(words)


def vqa_accuracy(hyps: Sequence[str], refs: Sequence[Sequence[str]],
                 min_answers: int = MIN_ANSWERS) -> tuple[np.ndarray, int]:
    """Per-question VQA accuracy.

    Args:
      hyps: ``items`` processed predictions.
      refs: ``items`` non-empty lists of processed references.
      min_answers: questions with fewer references are scored by exact match with any of them (module doc).

    Returns:
      ``((items,) float64 in [0, 1], number of questions scored by the exact-match fallback)``.
    """
    out = np.zeros((len(hyps),), np.float64)
    fallback = 0
    for i, (hyp, answers) in enumerate(zip(hyps, refs)):
        m = len(answers)
        if m < min_answers:
            fallback += 1
            out[i] = 1.0 if hyp in answers else 0.0
            continue
        matches = sum(1 for a in answers if a == hyp)
        # Leaving out a matching answer leaves matches - 1 agreeing; leaving out another leaves matches.
        acc = matches * min(1.0, (matches - 1) / 3.0) + (m - matches) * min(1.0, matches / 3.0)
        out[i] = acc / m
    return out, fallback
