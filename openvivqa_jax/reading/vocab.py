"""Syllable tokens for the DrQA and QANet readers: a word vocabulary, its characters, and the match forms of a
syllable.

**Tokens.** Vietnamese writes one syllable per space-separated word; the paper's DrQA and QANet embed these
syllables (ViQuAD §5.3, word embeddings of Vi et al. 2019). :class:`WordTokenizer` maps every whitespace token of
a normalized text (:func:`~openvivqa_jax.text.normalize.normalize_text`: NFC, lowercase, one tone-mark
convention, punctuation spaced) to one id: the train split's words seen at least ``min_count`` times, the rest
``<unk>`` (their characters still reach the character CNN, and their forms the exact-match features). It has the
interface of the SentencePiece :class:`~openvivqa_jax.text.tokenizer.Tokenizer` that the reader's features use
(``encode``, ``encode_with_offsets``, ``id_to_piece``, ``vocab_size``, special ids pad 0, unk 1, bos 2, eos 3),
so passages keep their character offsets exactly as with pieces (:mod:`.features`).

**Characters.** Each token's characters (its first :data:`MAX_WORD_CHARS`) as ids of the train split's
characters (0 padding, 1 unknown).

**Match forms** (DrQA's exact-match features, Chen et al. 2017 §3.1: original, lowercase and lemma forms): the
builder stores questions normalized (lowercase), so the forms compared are the normalized syllable, the syllable
without its tone mark (:func:`strip_tones`: ``hòa`` -> ``hoa``, the vowel letters ``â ê ô ơ ư ă`` kept) and the
syllable without any diacritic (:func:`fold_diacritics`: ``đường`` -> ``duong``), which catch a question that
writes a name another way.

File: ``<workdir>/words.json`` ``{"words": [...], "chars": [...], "min_count": n}`` (ids in list order).
"""

from __future__ import annotations

import collections
import functools
import json
import os
import unicodedata
from collections.abc import Iterable

from openvivqa_jax import jsonio
from openvivqa_jax.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

__all__ = ["WordTokenizer", "train_word_tokenizer", "strip_tones", "fold_diacritics", "MAX_WORD_CHARS",
           "SPECIALS"]

#: The first ids: pad 0, unk 1, bos 2, eos 3 (the SentencePiece tokenizer's).
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
#: Characters of a token kept for the character CNN (longer Vietnamese syllables have 7).
MAX_WORD_CHARS = 16
#: Vietnamese tone marks as combining characters (grave, acute, tilde, hook above, dot below).
_TONES = frozenset("\u0300\u0301\u0303\u0309\u0323")


@functools.lru_cache(maxsize=1 << 18)
def strip_tones(word: str) -> str:
    """``word`` without its Vietnamese tone marks (NFD, the five tone combining marks dropped, NFC);
    ``"hòa"`` -> ``"hoa"``, ``"thuỷ"`` -> ``"thuy"``, ``"người"`` -> ``"ngươi"``."""
    return unicodedata.normalize("NFC", "".join(c for c in unicodedata.normalize("NFD", word) if c not in _TONES))


@functools.lru_cache(maxsize=1 << 18)
def fold_diacritics(word: str) -> str:
    """``word`` without any diacritic (every combining mark dropped, ``đ`` -> ``d``); ``"đường"`` ->
    ``"duong"``."""
    s = "".join(c for c in unicodedata.normalize("NFD", word) if not unicodedata.category(c).startswith("M"))
    return s.replace("đ", "d").replace("Đ", "D")


class WordTokenizer:
    """Whitespace tokens of normalized text as word ids (module doc).

    Attributes:
      words: ``(V,)`` the token of each id (specials first); chars: the characters (ids from 2);
      vocab_size: ``V``; num_chars: character ids ``C`` (padding 0 and unknown 1 included);
      pad_id, unk_id, bos_id, eos_id: 0, 1, 2, 3; path: the file read (None when built in memory).
    """

    kind = "words"

    def __init__(self, words: list[str], chars: list[str], min_count: int = 1, path: str | None = None):
        self.words = list(SPECIALS) + [w for w in words if w not in SPECIALS]
        self.chars = list(chars)
        self.min_count = int(min_count)
        self.path = path
        self._ids = {w: i for i, w in enumerate(self.words)}
        self._char_ids = {c: i + 2 for i, c in enumerate(self.chars)}
        self.vocab_size = len(self.words)
        self.num_chars = len(self.chars) + 2
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    @classmethod
    def load(cls, path: str) -> "WordTokenizer":
        """Reads ``words.json`` (module doc).

        Raises:
          ValueError: the file is not such a JSON object (names the file).
        """
        raw = jsonio.read_json(path, error=ValueError)
        try:
            return cls(list(raw["words"]), list(raw["chars"]), int(raw.get("min_count", 1)), path)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"{path} is not a word vocabulary (words.json with 'words' and 'chars'): {e}") from None

    def save(self, path: str) -> None:
        """Writes ``words.json`` atomically (a temporary file renamed over it)."""
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"words": self.words, "chars": self.chars, "min_count": self.min_count}, f, ensure_ascii=False)
        os.replace(tmp, path)
        self.path = path

    def encode(self, text: str) -> tuple[int, ...]:
        """Ids of the whitespace tokens of ``text`` (``<unk>`` for words not in the vocabulary)."""
        return tuple(self._ids.get(w, UNK_ID) for w in text.split())

    @functools.lru_cache(maxsize=200_000)
    def encode_with_offsets(self, text: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """:meth:`encode` and each token's characters ``text[starts[k]:ends[k]]``: ``(ids, starts, ends)``."""
        ids, starts, ends = [], [], []
        i, n = 0, len(text)
        while i < n:
            if text[i].isspace():
                i += 1
                continue
            j = i
            while j < n and not text[j].isspace():
                j += 1
            ids.append(self._ids.get(text[i:j], UNK_ID))
            starts.append(i)
            ends.append(j)
            i = j
        return tuple(ids), tuple(starts), tuple(ends)

    def id_to_piece(self, i: int) -> str:
        """The word of id ``i`` (the specials' names for 0-3)."""
        return self.words[int(i)]

    @functools.lru_cache(maxsize=1 << 18)
    def char_ids(self, word: str) -> tuple[int, ...]:
        """The character ids of ``word``'s first :data:`MAX_WORD_CHARS` characters (1 for unknown ones)."""
        return tuple(self._char_ids.get(c, 1) for c in word[:MAX_WORD_CHARS])

    def __reduce__(self):
        return (WordTokenizer, (self.words[len(SPECIALS):], self.chars, self.min_count, self.path))


def train_word_tokenizer(sentences: Iterable[str], path: str, *, min_count: int = 1,
                         max_words: int = 0) -> WordTokenizer:
    """Builds the vocabulary of the normalized ``sentences`` (the train split only) and writes it to ``path``.

    Args:
      sentences: normalized texts (passages and questions).
      path: ``<workdir>/words.json``.
      min_count: words seen fewer times are ``<unk>``.
      max_words: keep at most this many of the most frequent words (0: all).

    Returns:
      The :class:`WordTokenizer`, words by decreasing count (ties alphabetically), characters sorted.

    Raises:
      ValueError: no word in ``sentences``.
    """
    counts: collections.Counter = collections.Counter()
    chars: set[str] = set()
    for s in sentences:
        toks = s.split()
        counts.update(toks)
        for t in toks:
            chars.update(t)
    if not counts:
        raise ValueError("train_word_tokenizer: no word in the train split")
    words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    if max_words:
        words = words[:max_words]
    tok = WordTokenizer(words, sorted(chars), min_count)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tok.save(path)
    return tok
