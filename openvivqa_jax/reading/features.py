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

**Token features** (DrQA's exact match, Chen et al. 2017 §3.1; :data:`NUM_TOKEN_FEATURES` per position): every
token has a *key*, the whitespace token of its normalized word that holds it (for a piece, the syllable it is part
of). A passage token gets ``[key in question, tone-stripped key in question, diacritic-free key in question,
original word capitalized]`` (:mod:`.vocab` match forms); a question token the first three against the passage;
keys without a letter or digit (punctuation) never match. Each position's key also has an id into a table of its
characters (:attr:`Windows.key_chars`) when the tokenizer has characters (:class:`.vocab.WordTokenizer`).

**Layout of other tokenizers.** The specials are the tokenizer's ``bos_id`` / ``eos_id`` / ``pad_id``, and the
question and passage are joined by its ``pair_separator`` (default ``(eos_id,)``; RoBERTa's ``</s></s>``), so
a pretrained checkpoint's tokenizer (:mod:`.pretrained`) lays out its own pair format.

Arrays (:class:`Windows`): ``(windows, max_seq_len)`` int32 ids/segments, bool masks; ``(windows,)`` labels;
``(windows, max_seq_len, NUM_TOKEN_FEATURES)`` uint8 token features.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from openvivqa_jax.reading.vocab import MAX_WORD_CHARS, fold_diacritics, strip_tones
from openvivqa_jax.text.normalize import normalize_text
from openvivqa_jax.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer

__all__ = ["split_words", "PassageTokens", "tokenize_passage", "question_tokens", "char_span_to_tokens",
           "span_text", "match_features", "Windows", "make_windows", "NUM_TOKEN_FEATURES"]

#: Token features per position (module doc): exact, tone-stripped and diacritic-free match, capitalized.
NUM_TOKEN_FEATURES = 4


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
      keys: ``(pieces,)`` the normalized syllable each piece is part of (module doc).
      capital: ``(pieces,)`` bool, the piece's original word starts with an upper-case letter.
    """

    ids: np.ndarray
    char_start: np.ndarray
    char_end: np.ndarray
    text: str
    keys: tuple = ()
    capital: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.ids.shape[0])


_TOKEN_RE = re.compile(r"\S+")


def _keys(text: str, starts) -> tuple[str, ...]:
    """The whitespace token of ``text`` holding each offset of ``starts`` (an offset on a space: the next
    token)."""
    spans = [(m.start(), m.end()) for m in _TOKEN_RE.finditer(text)]
    out = []
    for s in starts:
        out.append(next((text[a:b] for a, b in spans if b > s), text[spans[-1][0]:] if spans else ""))
    return tuple(out)


def _normalize_word(tokenizer, word: str) -> str:
    # A pretrained checkpoint's tokenizer reads its own form of the text (cased); the others the project's.
    fn = getattr(tokenizer, "normalize_word", None)
    return fn(word) if fn is not None else normalize_text(word)


@functools.lru_cache(maxsize=1 << 16)
def _word_pieces(tokenizer: Tokenizer, word: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...],
                                                           tuple[str, ...]]:
    """``(ids, starts, ends, keys)`` of one original word, offsets relative to the word (module doc)."""
    norm = _normalize_word(tokenizer, word)
    if not norm:
        return (), (), (), ()
    ids, starts, ends = tokenizer.encode_with_offsets(norm)
    # Keys are in the project's normalized form (what the questions are), also for a cased tokenizer's text.
    key_text = normalize_text(word)
    if len(key_text) == len(norm):
        keys = _keys(key_text, starts)
    else:
        keys = (key_text.split()[0] if key_text else "",) * len(ids)
    if len(norm) == len(word):
        return ids, starts, ends, keys
    return ids, (0,) * len(ids), (len(word),) * len(ids), keys


def question_tokens(tokenizer, question: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The ids of the (normalized) ``question`` and each one's key (module doc)."""
    ids, starts, _ = tokenizer.encode_with_offsets(question)
    return tuple(ids), _keys(question, starts)


def tokenize_passage(tokenizer: Tokenizer, text: str) -> PassageTokens:
    """Pieces of ``text`` with their original character spans (module doc).

    The ids are the pieces of each normalized word in turn; they equal the encoding of
    ``normalize_text(text)`` except where the whole-text normalization joins words (a price ``20 000 đ``).
    """
    ids: list[int] = []
    cs: list[int] = []
    ce: list[int] = []
    keys: list[str] = []
    cap: list[bool] = []
    for s, e in split_words(text):
        w_ids, w_s, w_e, w_k = _word_pieces(tokenizer, text[s:e])
        last = e - s - 1
        upper = text[s].isupper()
        for i, a, b, k in zip(w_ids, w_s, w_e, w_k):
            ids.append(i)
            keys.append(k)
            cap.append(upper)
            # Offsets are relative to the word; a piece of no character of its own (the dummy prefix "▁"
            # before byte pieces) takes the character where it stands.
            cs.append(s + min(a, last))
            ce.append(s + max(min(b, e - s), min(a, last) + 1))
    return PassageTokens(np.asarray(ids, np.int32), np.asarray(cs, np.int32), np.asarray(ce, np.int32), text,
                         tuple(keys), np.asarray(cap, bool))


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


def _has_word_char(key: str) -> bool:
    return any(c.isalnum() for c in key)


def _forms(keys) -> tuple[set, set, set]:
    """The exact, tone-stripped and diacritic-free forms of ``keys`` that hold a letter or digit."""
    ks = [k for k in keys if _has_word_char(k)]
    return set(ks), {strip_tones(k) for k in ks}, {fold_diacritics(k) for k in ks}


def match_features(keys, other_forms: tuple[set, set, set], capital=None) -> np.ndarray:
    """``(len(keys), NUM_TOKEN_FEATURES)`` uint8 features of tokens with ``keys`` against the other side's forms
    (:func:`_forms`; module doc): exact, tone-stripped and diacritic-free match, and ``capital``."""
    exact, tone, fold = other_forms
    out = np.zeros((len(keys), NUM_TOKEN_FEATURES), np.uint8)
    for k, key in enumerate(keys):
        if _has_word_char(key):
            out[k, 0] = key in exact
            out[k, 1] = strip_tones(key) in tone
            out[k, 2] = fold_diacritics(key) in fold
    if capital is not None:
        out[:, 3] = capital
    return out


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
      token_features: ``(windows, max_seq_len, NUM_TOKEN_FEATURES)`` uint8 (module doc).
      key_ids: ``(windows, max_seq_len)`` int32 row of each position's key in ``key_chars`` (0: no key).
      key_chars: ``(keys, MAX_WORD_CHARS)`` int32 character ids of each key, or None when the tokenizer has no
        characters.
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
    token_features: np.ndarray | None = None
    key_ids: np.ndarray | None = None
    key_chars: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The model inputs and labels of windows ``idx`` ``(batch,)``: the arrays of the class doc, with
        ``token_features`` as float32 and ``char_ids`` ``(batch, max_seq_len, MAX_WORD_CHARS)`` int32 when there
        are characters."""
        out = {k: getattr(self, k)[idx] for k in ("input_ids", "segment_ids", "input_mask", "passage_mask",
                                                  "start_positions", "end_positions")}
        if self.token_features is not None:
            out["token_features"] = self.token_features[idx].astype(np.float32)
        if self.key_chars is not None:
            out["char_ids"] = self.key_chars[self.key_ids[idx]]
        return out


def _specials(tokenizer) -> tuple[int, int, int, tuple[int, ...]]:
    bos, eos = getattr(tokenizer, "bos_id", BOS_ID), getattr(tokenizer, "eos_id", EOS_ID)
    return bos, eos, getattr(tokenizer, "pad_id", PAD_ID), tuple(getattr(tokenizer, "pair_separator", (eos,)))


def make_windows(tokenizer: Tokenizer, records: Sequence[dict], *, max_seq_len: int, max_question_len: int,
                 doc_stride: int, train: bool) -> Windows:
    """Tokenizes a split's questions and passages into :class:`Windows`.

    Args:
      tokenizer: the SentencePiece model, a :class:`.vocab.WordTokenizer`, or a checkpoint's tokenizer (module
        doc, layout).
      records: per question ``{"question": normalized str, "passage": original str, "answer_starts": [int],
        "answer_ends": [int]}`` (character offsets into ``passage``; the builder checks them).
      max_seq_len: sequence length ``L`` (pieces, specials included).
      max_question_len: question pieces kept (the rest cut and counted).
      doc_stride: pieces between window starts.
      train: keep only windows holding the first answer, with its labels.

    Raises:
      ValueError: ``max_seq_len`` leaves no room for passage pieces, or ``doc_stride`` < 1.
    """
    bos, eos, pad, sep = _specials(tokenizer)
    room = max_seq_len - min(max_question_len, max_seq_len) - 2 - len(sep)
    if room < 1:
        raise ValueError(f"max_seq_len={max_seq_len} leaves no room for the passage after a question of "
                         f"{max_question_len} pieces and {2 + len(sep)} special pieces")
    if doc_stride < 1:
        raise ValueError(f"doc_stride={doc_stride} must be >= 1")
    rows: list[tuple] = []
    passages: list[PassageTokens] = []
    counts = {"questions": len(records), "windows": 0, "questions_truncated": 0, "answers_outside_windows": 0,
              "answers_without_pieces": 0}
    cache: dict[str, tuple] = {}
    for ei, rec in enumerate(records):
        q_ids, q_keys = question_tokens(tokenizer, rec["question"])
        if len(q_ids) > max_question_len:
            counts["questions_truncated"] += 1
            q_ids, q_keys = q_ids[:max_question_len], q_keys[:max_question_len]
        text = rec["passage"]
        if text not in cache:
            pt = tokenize_passage(tokenizer, text)
            cache[text] = (pt, _forms(pt.keys))
        ptoks, p_forms = cache[text]
        passages.append(ptoks)
        span = None
        if train:
            starts, ends = list(rec.get("answer_starts", [])), list(rec.get("answer_ends", []))
            span = char_span_to_tokens(ptoks, starts[0], ends[0]) if starts else None
            if span is None:
                counts["answers_without_pieces"] += 1
                continue
        q_feats = match_features(q_keys, p_forms)
        p_feats = match_features(ptoks.keys, _forms(q_keys), ptoks.capital)
        room_q = max_seq_len - len(q_ids) - 2 - len(sep)
        n = len(ptoks)
        kept = False
        w0 = 0
        while True:  # BERT's run_squad.py windows: every doc_stride pieces until one reaches the end
            w1 = min(n, w0 + room_q)
            offset = len(q_ids) + 1 + len(sep) - w0
            row = (q_ids, q_keys, q_feats, ptoks, p_feats, w0, w1, ei, offset)
            if not train:
                rows.append(row + (-1, -1))
            elif w0 <= span[0] and span[1] < w1:
                rows.append(row + (span[0] + offset, span[1] + offset))
                kept = True
            if w1 >= n:
                break
            w0 += min(doc_stride, room_q)
        if train and not kept:
            counts["answers_outside_windows"] += 1
    counts["windows"] = len(rows)
    return _assemble(tokenizer, rows, passages, counts, max_seq_len, (bos, eos, pad, sep))


def _assemble(tokenizer, rows: list[tuple], passages: list, counts: dict, max_seq_len: int,
              specials: tuple) -> Windows:
    """The :class:`Windows` arrays of ``rows`` ``(q_ids, q_keys, q_feats, ptoks, p_feats, w0, w1, example,
    offset, start, end)``."""
    bos, eos, pad, sep = specials
    m = len(rows)
    ids = np.full((m, max_seq_len), pad, np.int32)
    seg = np.zeros((m, max_seq_len), np.int32)
    mask = np.zeros((m, max_seq_len), bool)
    pmask = np.zeros((m, max_seq_len), bool)
    tfeat = np.zeros((m, max_seq_len, NUM_TOKEN_FEATURES), np.uint8)
    chars = hasattr(tokenizer, "char_ids")
    key_index: dict[str, int] = {"": 0}
    key_ids = np.zeros((m, max_seq_len), np.int32) if chars else None
    for r, (q, qk, qf, pt, pf, w0, w1, *_) in enumerate(rows):
        p0 = len(q) + 1 + len(sep)
        seq = [bos, *q, *sep, *pt.ids[w0:w1].tolist(), eos]
        ids[r, :len(seq)] = seq
        mask[r, :len(seq)] = True
        seg[r, p0:len(seq)] = 1
        pmask[r, p0:p0 + (w1 - w0)] = True
        tfeat[r, 1:1 + len(q)] = qf
        tfeat[r, p0:p0 + (w1 - w0)] = pf[w0:w1]
        if chars:
            for k, key in enumerate(qk):
                key_ids[r, 1 + k] = key_index.setdefault(key, len(key_index))
            for k, key in enumerate(pt.keys[w0:w1]):
                key_ids[r, p0 + k] = key_index.setdefault(key, len(key_index))
    key_chars = None
    if chars:
        key_chars = np.zeros((len(key_index), MAX_WORD_CHARS), np.int32)
        for key, i in key_index.items():
            c = tokenizer.char_ids(key)
            key_chars[i, :len(c)] = c
    col = lambda k: np.asarray([row[k] for row in rows], np.int32).reshape(m)  # noqa: E731
    return Windows(ids, seg, mask, pmask, col(9), col(10), col(7), col(8), passages, counts, tfeat, key_ids,
                   key_chars)
