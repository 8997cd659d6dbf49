"""Input sanitization for the metrics (docs/design.md §9: "Inputs are sanitized first").

Every prediction and reference goes through :func:`sanitize_text` before any metric sees it:

1. ``|||`` is removed. It is the field separator of the Meteor 1.5 jar's ``-stdio`` protocol
   (``SCORE ||| ref 1 ||| ref 2 ||| hypothesis``); inside a string it would desynchronise the jar's
   answers from our questions. pycocoevalcap's wrapper removes it from the hypothesis only; we
   remove it from every string.
2. C0/C1 control characters other than line breaks (``\\x00``, ``\\x1b``, ...) become spaces.
3. :func:`openvivqa_jax.text.normalize.normalize_text` (NFC, lowercase, one tone-mark
   convention, every line break — ``\\n``, ``\\r``, U+2028, U+2029, U+0085 — to a space, prices,
   spaced punctuation, collapsed whitespace). After it a string is a sequence of tokens separated by
   single ASCII spaces, which is what the reference toolkit's scorers split on.
4. ``|||`` is removed once more (normalization spaces punctuation, so it cannot reappear, but the
   invariant "no ``|||`` reaches the jar" is checked rather than assumed).
5. Over-long strings are capped at :data:`MAX_TOKENS` whitespace tokens (default 256). VQA answers
   are a few words long (OpenViVQA answers average under 10 tokens); a runaway decoder or a pasted
   document would otherwise make ROUGE-L's LCS quadratic and Meteor's aligner slow. Every cap is
   counted and reported in the result's ``notes``.

Source: docs/design.md §4 (normalization) and §9 (sanitization); the separator rule follows
pycocoevalcap 1.2 ``meteor/meteor.py`` ``_stat``.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata

from openvivqa_jax.text.normalize import LINE_BREAKS, normalize_text

__all__ = ["MAX_TOKENS", "METEOR_SEPARATOR", "SanitizeStats", "remove_control_characters", "sanitize_text"]

#: Whitespace tokens kept from one string; longer strings are truncated (and counted).
MAX_TOKENS = 256

#: Field separator of the Meteor 1.5 ``-stdio`` protocol; never allowed inside a string.
METEOR_SEPARATOR = "|||"

_CONTROL_RE = re.compile(
    "["
    + "".join(
        re.escape(chr(c))
        for c in list(range(0x00, 0x20)) + list(range(0x7F, 0xA0))
        if chr(c) not in LINE_BREAKS and unicodedata.category(chr(c)) == "Cc"
    )
    + "]"
)


@dataclasses.dataclass
class SanitizeStats:
    """Counts of what sanitization changed, reported in the result's ``notes``.

    Attributes:
      capped: strings truncated to ``max_tokens`` tokens.
      separators: strings from which ``|||`` was removed.
      control_chars: strings in which control characters were replaced by spaces.
      capped_ids: question ids whose prediction or references were capped (first few kept).
      separator_ids: question ids whose strings contained ``|||`` (first few kept).
    """

    capped: int = 0
    separators: int = 0
    control_chars: int = 0
    capped_ids: list[str] = dataclasses.field(default_factory=list)
    separator_ids: list[str] = dataclasses.field(default_factory=list)

    def note_id(self, ids: list[str], qid: str, limit: int = 5) -> None:
        """Remembers ``qid`` in ``ids`` (at most ``limit`` distinct ids are kept for messages)."""
        if len(ids) < limit and qid not in ids:
            ids.append(qid)


def remove_control_characters(text: str) -> str:
    """Step 2 alone: C0/C1 control characters other than line breaks become spaces."""
    return _CONTROL_RE.sub(" ", text)


def sanitize_text(
    text: str, *, max_tokens: int = MAX_TOKENS, stats: SanitizeStats | None = None, qid: str = ""
) -> str:
    """Returns the metric-ready form of one prediction or reference string.

    Args:
      text: the raw string (any Unicode, any line breaks, NFC or NFD, old or new tone marks).
      max_tokens: the number of whitespace tokens kept; more are truncated. Must be >= 1.
      stats: if given, updated with what was changed (for the result's notes).
      qid: the question id, only used to name the record in ``stats``.

    Returns:
      Normalized text: tokens separated by single ASCII spaces, no ``|||``, at most ``max_tokens``
      tokens. The empty string stays empty.

    Raises:
      TypeError: if ``text`` is not a ``str`` (the message names the question id).
      ValueError: if ``max_tokens`` < 1.
    """
    if not isinstance(text, str):
        raise TypeError(f"question {qid!r}: expected a string, got {type(text).__name__}: {text!r}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if METEOR_SEPARATOR in text:
        text = text.replace(METEOR_SEPARATOR, " ")
        if stats is not None:
            stats.separators += 1
            stats.note_id(stats.separator_ids, qid)
    if _CONTROL_RE.search(text):
        text = _CONTROL_RE.sub(" ", text)
        if stats is not None:
            stats.control_chars += 1
    text = normalize_text(text)
    if METEOR_SEPARATOR in text:  # cannot happen after space_punctuation; kept as an invariant
        text = " ".join(text.replace(METEOR_SEPARATOR, " ").split())
    tokens = text.split(" ")
    if len(tokens) > max_tokens:
        text = " ".join(tokens[:max_tokens])
        if stats is not None:
            stats.capped += 1
            stats.note_id(stats.capped_ids, qid)
    return text
