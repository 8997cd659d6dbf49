"""Passage tokens with character offsets, question/passage windows and span labels for the span reader.

**Why per word.** :func:`~openvivqa_jax.text.normalize.normalize_text` changes lengths (NFD → NFC, ``20.000đ``
→ ``20,000 đồng``, spaces around punctuation), so pieces of the normalized passage cannot be mapped back to
the original by position. Here the original passage is cut into *words* (:func:`split_words`: runs of
letters, digits and combining marks, with ``.``/``,`` between digits kept inside; every other non-space
character alone), each word is normalized on its own and encoded with the SentencePiece model. Each piece
then covers:

- its own characters of the word, when the normalized word is as long as the original (lowercasing, the
  tone-mark convention ``hoà`` → ``hòa``: characters correspond one to one), from the tokenizer's offsets
  (:meth:`~openvivqa_jax.text.tokenizer.Tokenizer.encode_with_offsets`);
- the whole word otherwise (an NFD word, a price rewritten).

A predicted span of pieces ``[i, j]`` is the original text ``passage[char_start[i]:char_end[j]]``
(:func:`span_text`), never a decode of pieces. Words that normalize to nothing (format characters) get no
piece.

**Windows** (BERT's ``doc_stride``, Devlin et al. 2019, run_squad.py): the sequence is
``[BOS] question [EOS] passage-window [EOS]`` padded to ``max_seq_len``; a passage longer than the room left
is cut into windows starting every ``doc_stride`` pieces. Training keeps the windows that hold the whole
first answer (DrQA/QANet train on the passage that holds it); evaluation scores every window and keeps the
best span over them.

Arrays (:class:`Windows`): ``(windows, max_seq_len)`` int32 ids/segments, bool masks; ``(windows,)`` labels.
"""

from __future__ import annotations

import dataclasses
import functools
import unicodedata
from collections.abc import Sequence

import numpy as np

from openvivqa_jax.text.normalize import normalize_text
from openvivqa_jax.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer

__all__ = ["split_words", "PassageTokens", "tokenize_passage", "char_span_to_tokens", "span_text", "Windows",
           "make_windows"]


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or unicodedata.category(ch).startswith("M")


def split_words(text: str) -> list[tuple[int, int]]:
    """The words of ``text`` as character spans ``[(start, end), ...]`` in order (module doc).

    A word is a maximal run of letters, digits and combining marks (an NFD ``à`` is one word character pair),
    where a ``.`` or ``,`` between two digits stays inside (``3,8%`` → ``3,8`` and ``%``; ``20.000đ`` one word);
    every other character that is not whitespace or a format character (Unicode ``Cf``) is a word by itself.
    """
    spans: list[tuple[int, int]] = []
    n, i = len(text), 0
    while i < n:
        ch = text[i]
        if ch.isspace() or unicodedata.category(ch) == "Cf":
            i += 1
            continue
        if not _is_word_char(ch):
            spans.append((i, i + 1))
            i += 1
            continue
        j = i + 1
        while j < n:
            c = text[j]
            if _is_word_char(c):
                j += 1
            elif c in ".," and j + 1 < n and text[j - 1].isdigit() and text[j + 1].isdigit():
                j += 1
            else:
                break
        spans.append((i, j))
        i = j
    return spans


@dataclasses.dataclass(frozen=True)
class PassageTokens:
    """A passage's pieces and the original characters each covers.

    Attributes:
      ids: ``(pieces,)`` int32 piece ids.
      char_start, char_end: ``(pieces,)`` int32; piece ``k`` covers ``text[char_start[k]:char_end[k]]``.
      text: the original passage.
    """

    ids: np.ndarray
    char_start: np.ndarray
    char_end: np.ndarray
    text: str

    def __len__(self) -> int:
        return int(self.ids.shape[0])


@functools.lru_cache(maxsize=1 << 16)
def _word_pieces(tokenizer: Tokenizer, word: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``(ids, starts, ends)`` of one original word, offsets relative to the word (module doc)."""
    norm = normalize_text(word)
    if not norm:
        return (), (), ()
    ids, starts, ends = tokenizer.encode_with_offsets(norm)
    if len(norm) == len(word):
        return ids, starts, ends
    return ids, (0,) * len(ids), (len(word),) * len(ids)


def tokenize_passage(tokenizer: Tokenizer, text: str) -> PassageTokens:
    """Pieces of ``text`` with their original character spans (module doc).

    The ids are the pieces of each normalized word in turn; they equal the encoding of
    ``normalize_text(text)`` except where the whole-text normalization joins words (a price ``20 000 đ``).
    """
    ids: list[int] = []
    cs: list[int] = []
    ce: list[int] = []
    for s, e in split_words(text):
        w_ids, w_s, w_e = _word_pieces(tokenizer, text[s:e])
        last = e - s - 1
        for i, a, b in zip(w_ids, w_s, w_e):
            ids.append(i)
            # Offsets are relative to the word; a piece of no character of its own (the dummy prefix "▁"
            # before byte pieces) takes the character where it stands.
            cs.append(s + min(a, last))
            ce.append(s + max(min(b, e - s), min(a, last) + 1))
    return PassageTokens(np.asarray(ids, np.int32), np.asarray(cs, np.int32), np.asarray(ce, np.int32), text)


def char_span_to_tokens(tokens: PassageTokens, start: int, end: int) -> tuple[int, int] | None:
    """The pieces covering the characters ``[start, end)`` of the passage: ``(first, last)`` inclusive.

    ``first`` is the first piece ending after ``start``, ``last`` the last piece starting before ``end``
    (SQuAD's character-to-token rule of BERT's run_squad.py). None when no piece lies in the span.
    """
    inside = np.flatnonzero((tokens.char_end > start) & (tokens.char_start < end))
    if inside.size == 0:
        return None
    return int(inside[0]), int(inside[-1])


def span_text(tokens: PassageTokens, first: int, last: int) -> tuple[str, int, int]:
    """The original passage text of pieces ``[first, last]``: ``(text, char_start, char_end)``."""
    s, e = int(tokens.char_start[first]), int(tokens.char_end[last])
    return tokens.text[s:e], s, e


@dataclasses.dataclass
class Windows:
    """Question/passage windows of a split (module doc).

    Attributes:
      input_ids, segment_ids: ``(windows, max_seq_len)`` int32; segment 0 question, 1 passage.
      input_mask: ``(windows, max_seq_len)`` bool, real tokens.
      passage_mask: ``(windows, max_seq_len)`` bool, the passage tokens a span may start or end on.
      start_positions, end_positions: ``(windows,)`` int32 sequence positions of the first answer's first and
        last piece (-1 where the window does not hold it, e.g. at evaluation).
      example: ``(windows,)`` int32 index of the window's question in the split.
      offset: ``(windows,)`` int32: sequence position ``p`` of a passage token is passage piece
        ``p - offset``.
      passages: per question, its :class:`PassageTokens`.
      counts: ``questions``, ``windows``, ``questions_truncated`` (question cut at ``max_question_len``),
        ``answers_outside_windows`` (training: the first answer fits no window; the question is not trained on),
        ``answers_without_pieces``.
    """

    input_ids: np.ndarray
    segment_ids: np.ndarray
    input_mask: np.ndarray
    passage_mask: np.ndarray
    start_positions: np.ndarray
    end_positions: np.ndarray
    example: np.ndarray
    offset: np.ndarray
    passages: list
    counts: dict

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The model inputs and labels of windows ``idx`` ``(batch,)``."""
        return {k: getattr(self, k)[idx] for k in ("input_ids", "segment_ids", "input_mask", "passage_mask",
                                                   "start_positions", "end_positions")}


def make_windows(tokenizer: Tokenizer, records: Sequence[dict], *, max_seq_len: int, max_question_len: int,
                 doc_stride: int, train: bool) -> Windows:
    """Tokenizes a split's questions and passages into :class:`Windows`.

    Args:
      tokenizer: the SentencePiece model.
      records: per question ``{"question": normalized str, "passage": original str, "answer_starts": [int],
        "answer_ends": [int]}`` (character offsets into ``passage``; the builder checks them).
      max_seq_len: sequence length ``L`` (pieces, specials included).
      max_question_len: question pieces kept (the rest cut and counted).
      doc_stride: pieces between window starts.
      train: keep only windows holding the first answer, with its labels.

    Raises:
      ValueError: ``max_seq_len`` leaves no room for passage pieces, or ``doc_stride`` < 1.
    """
    room = max_seq_len - min(max_question_len, max_seq_len) - 3
    if room < 1:
        raise ValueError(f"max_seq_len={max_seq_len} leaves no room for the passage after a question of "
                         f"{max_question_len} pieces and 3 special pieces")
    if doc_stride < 1:
        raise ValueError(f"doc_stride={doc_stride} must be >= 1")
    rows: list[tuple] = []
    passages: list[PassageTokens] = []
    counts = {"questions": len(records), "windows": 0, "questions_truncated": 0, "answers_outside_windows": 0,
              "answers_without_pieces": 0}
    cache: dict[str, PassageTokens] = {}
    for ei, rec in enumerate(records):
        q_ids = list(tokenizer.encode(rec["question"]))
        if len(q_ids) > max_question_len:
            counts["questions_truncated"] += 1
            q_ids = q_ids[:max_question_len]
        text = rec["passage"]
        if text not in cache:
            cache[text] = tokenize_passage(tokenizer, text)
        ptoks = cache[text]
        passages.append(ptoks)
        span = None
        if train:
            starts, ends = list(rec.get("answer_starts", [])), list(rec.get("answer_ends", []))
            span = char_span_to_tokens(ptoks, starts[0], ends[0]) if starts else None
            if span is None:
                counts["answers_without_pieces"] += 1
                continue
        room_q = max_seq_len - len(q_ids) - 3
        n = len(ptoks)
        kept = False
        w0 = 0
        while True:  # BERT's run_squad.py windows: every doc_stride pieces until one reaches the end
            w1 = min(n, w0 + room_q)
            offset = len(q_ids) + 2 - w0
            if not train:
                rows.append((q_ids, ptoks.ids[w0:w1], -1, -1, ei, offset))
            elif w0 <= span[0] and span[1] < w1:
                rows.append((q_ids, ptoks.ids[w0:w1], span[0] + offset, span[1] + offset, ei, offset))
                kept = True
            if w1 >= n:
                break
            w0 += min(doc_stride, room_q)
        if train and not kept:
            counts["answers_outside_windows"] += 1
    m = len(rows)
    ids = np.full((m, max_seq_len), PAD_ID, np.int32)
    seg = np.zeros((m, max_seq_len), np.int32)
    mask = np.zeros((m, max_seq_len), bool)
    pmask = np.zeros((m, max_seq_len), bool)
    for r, (q, p, _, _, _, _) in enumerate(rows):
        seq = [BOS_ID, *q, EOS_ID, *p.tolist(), EOS_ID]
        ids[r, :len(seq)] = seq
        mask[r, :len(seq)] = True
        seg[r, len(q) + 2:len(seq)] = 1
        pmask[r, len(q) + 2:len(q) + 2 + len(p)] = True
    counts["windows"] = m
    col = lambda k: np.asarray([row[k] for row in rows], np.int32).reshape(m)  # noqa: E731
    return Windows(ids, seg, mask, pmask, col(2), col(3), col(4), col(5), passages, counts)
