"""fastText word vectors from the user's files: Facebook's ``.bin`` (with subword n-grams) and the ``.vec`` text.

OpenViVQA §4.2-4.3 embed question tokens (QuMLAG, MLPAG) and scene-text tokens (MLPAG's ``ocr_fasttext``,
300-d) with FastText (Bojanowski et al. 2017); the published Vietnamese vectors are ``cc.vi.300.bin`` /
``cc.vi.300.vec`` (Grave et al. 2018, https://fasttext.cc/docs/en/crawl-vectors.html). Users download them; nothing
here downloads anything.

Formats (read with gensim, :func:`gensim.models.fasttext.load_facebook_vectors` and
:meth:`gensim.models.KeyedVectors.load_word2vec_format`):

* ``.bin`` (Facebook's binary model): the vector of a word is fastText's ``getWordVector``: the mean of the rows
  of its subwords in the input matrix, i.e. the word's own row (in-vocabulary words only) and one row per
  character n-gram of ``"<" + word + ">"`` with ``minn <= n <= maxn`` characters, the row being
  ``nwords + fnv1a(ngram) % bucket``, with fastText's FNV-1a 32-bit hash over the n-gram's UTF-8 bytes (each byte
  sign-extended, as fastText's ``int8_t`` cast does). So an out-of-vocabulary word, an OCR misreading such as
  ``phỏ`` for ``phở``, gets a vector from the n-grams it shares with known words.
* ``.vec`` (text: a ``count dim`` header, then ``word v_1 ... v_dim`` per line): whole-word vectors only. A
  word not in the file gets the **zero vector** and ``found = False`` (callers choose their own fallback from
  ``found``: the question embedding keeps its random initialization for such rows).

Words are looked up as given: callers pass the project's normalized text (:func:`~openvivqa_jax.text.normalize.
normalize_text`: NFC, lowercase), syllable by syllable as the paper tokenizes Vietnamese. A token holding several
syllables (an OCR token ``hà nội``) gets the mean of its syllables' vectors (:meth:`WordVectors.token_vectors`).

How the vectors meet SentencePiece pieces (:func:`piece_words`, :func:`piece_vectors`): the models' question
inputs are SentencePiece BPE pieces, and the BPE model makes every frequent syllable one piece (``▁màu``;
:mod:`openvivqa_jax.text.tokenizer`), so row ``i`` of the piece embedding table starts as the fastText vector of
piece ``i``'s text without the word-start mark ``▁``: for a whole-syllable piece that is the syllable's vector,
exactly the paper's lookup. A piece that is part of a rare syllable (``ngh``) gets its text's vector too, which a
``.bin`` computes from the same n-grams fastText uses for word parts; specials and byte-fallback pieces stand for
no text and keep the random initialization. Spreading a word's vector over its pieces instead would give every
piece of a word the same row whatever word it occurs in, since the table is indexed by piece, not by word.
"""

from __future__ import annotations

import functools
import logging as std_logging
import os
from collections.abc import Sequence

import numpy as np
from absl import logging

from openvivqa_jax.errors import UserError

__all__ = ["WordVectorsError", "WordVectors", "open_word_vectors", "load_word_vectors", "piece_words",
           "piece_vectors", "FORMATS"]

#: File name endings and the format each is read as.
FORMATS = {".bin": "bin", ".vec": "vec", ".txt": "vec"}
#: The SentencePiece word-start mark.
_WORD_START = "\u2581"


class WordVectorsError(UserError, ValueError):
    """A word-vector file that is missing, of an unknown format, unreadable, or of the wrong width (one line,
    naming the file)."""


class WordVectors:
    """A loaded fastText file.

    Attributes:
      path: the file; kind: ``"bin"`` (subword n-grams) or ``"vec"`` (whole words only); dim: vector width;
      num_words: the file's vocabulary size; subwords: whether out-of-vocabulary words get n-gram vectors.
    """

    def __init__(self, path: str):
        """Reads ``path`` (format from its ending, :data:`FORMATS`).

        Raises:
          WordVectorsError: the file is missing, its ending is not one of :data:`FORMATS`, or it is not a file of
            that format.
        """
        path = os.path.expanduser(path)
        if not os.path.isfile(path):
            raise WordVectorsError(f"fastText vectors not found: {path} (download e.g. cc.vi.300.bin from "
                                   "https://fasttext.cc/docs/en/crawl-vectors.html; nothing is downloaded here)")
        ending = os.path.splitext(path)[1].lower()
        if ending not in FORMATS:
            raise WordVectorsError(f"{path}: unknown word-vector format {ending!r}; expected one of "
                                   f"{sorted(FORMATS)} (fastText .bin or .vec text)")
        self.path = path
        self.kind = FORMATS[ending]
        from gensim.models import KeyedVectors  # heavy: only when a vectors file is opened
        from gensim.models.fasttext import load_facebook_vectors

        # gensim logs its loading steps at INFO through the root logger; keep its warnings only.
        std_logging.getLogger("gensim").setLevel(max(std_logging.WARNING, std_logging.getLogger("gensim").level))
        try:
            if self.kind == "bin":
                self._kv = load_facebook_vectors(path)
            else:
                self._kv = KeyedVectors.load_word2vec_format(path, binary=False)
        except Exception as e:  # noqa: BLE001 -- gensim raises assorted errors for a bad file; one line here
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise WordVectorsError(f"{path} is not a fastText .{self.kind} file: {type(e).__name__}: {msg}") from None
        self.dim = int(self._kv.vector_size)
        self.num_words = len(self._kv.key_to_index)
        self.subwords = self.kind == "bin"
        logging.info("Read fastText %s vectors %s: %d words, dim %d%s", self.kind, path, self.num_words, self.dim,
                     f", {self._kv.bucket} n-gram buckets, n = {self._kv.min_n}..{self._kv.max_n}"
                     if self.subwords else "")

    def __reduce__(self):
        return (open_word_vectors, (self.path,))

    def in_vocabulary(self, words: Sequence[str]) -> np.ndarray:
        """``(len(words),)`` bool: the word is in the file's vocabulary (not only its n-grams)."""
        return np.array([w in self._kv.key_to_index for w in words], bool)

    def lookup(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Vectors of ``words`` (see the module doc for how each format computes them).

        Returns:
          ``(vectors (len(words), dim) float32, found (len(words),) bool)``; ``found`` is False (and the row
          zero) for an empty word, a ``.vec`` word not in the file, and a ``.bin`` word none of whose n-grams
          exists (possible only when ``maxn == 0``).
        """
        out = np.zeros((len(words), self.dim), np.float32)
        found = np.zeros((len(words),), bool)
        for i, w in enumerate(words):
            if not w:
                continue
            if w in self._kv.key_to_index:
                out[i] = self._kv.get_vector(w)
                found[i] = True
            elif self.subwords:
                v = self._kv.get_vector(w)
                if np.any(v):
                    out[i] = v
                    found[i] = True
        return out, found

    def token_vectors(self, tokens: Sequence[str], num_slots: int) -> np.ndarray:
        """Scene-text token features (MLPAG's ``ocr_fasttext``): the vector of each token, a token of several
        syllables getting the mean of its syllables' found vectors.

        Args:
          tokens: OCR token texts (normalized), ``(n,)``; tokens beyond ``num_slots`` are not used.
          num_slots: ``N``, the OCR slots of a batch row.

        Returns:
          ``(num_slots, dim)`` float32; padding slots and tokens with no found syllable are zero.
        """
        out = np.zeros((num_slots, self.dim), np.float32)
        for i, t in enumerate(tokens[:num_slots]):
            vecs, found = self._token_syllables(t)
            if found.any():
                out[i] = vecs[found].mean(0)
        return out

    @functools.lru_cache(maxsize=100_000)
    def _token_syllables(self, token: str) -> tuple[np.ndarray, np.ndarray]:
        return self.lookup(token.split())


@functools.lru_cache(maxsize=2)
def open_word_vectors(path: str) -> WordVectors:
    """The :class:`WordVectors` of ``path``, read once per process (the model and the preprocessing share it).

    Raises:
      WordVectorsError: see :class:`WordVectors`.
    """
    return WordVectors(path)


def load_word_vectors(path: str, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """fastText vectors of ``words`` from the ``.bin`` or ``.vec`` file ``path`` (module doc).

    Args:
      path: the file (``~`` expanded).
      words: the words (normalized text, one syllable each as the paper tokenizes), ``(n,)``.

    Returns:
      ``(vectors (n, dim) float32, found (n,) bool)``: zero rows where ``found`` is False (:meth:`WordVectors.
      lookup`).

    Raises:
      WordVectorsError: a missing, unknown or unreadable file.
    """
    return open_word_vectors(os.path.expanduser(path)).lookup(list(words))


def piece_words(tokenizer) -> list[str]:
    """The text each SentencePiece piece stands for, ``(V,)``: the piece without its word-start mark ``▁``;
    ``""`` for the special pieces (pad, unk, BOS, EOS), byte-fallback pieces and the bare ``▁``.

    Args:
      tokenizer: an :class:`~openvivqa_jax.text.tokenizer.Tokenizer` (or anything with ``vocab_size``,
        ``id_to_piece`` and an ``is_byte``-capable ``_sp``).
    """
    sp = getattr(tokenizer, "_sp", None)
    words = []
    for i in range(tokenizer.vocab_size):
        piece = tokenizer.id_to_piece(i)
        special = i < 4 or (sp is not None and (sp.is_byte(i) or sp.is_control(i) or sp.is_unknown(i)))
        words.append("" if special else piece.replace(_WORD_START, ""))
    return words


def piece_vectors(path: str, tokenizer, dim: int | None = None,
                  width_field: str = "model.word_dim") -> tuple[np.ndarray, np.ndarray]:
    """The initial piece embedding table from fastText (module doc: row ``i`` is the vector of piece ``i``'s
    text).

    Args:
      path: the ``.bin`` / ``.vec`` file.
      tokenizer: the run's SentencePiece tokenizer (``V`` pieces).
      dim: the embedding width the model expects (``model.word_dim``), or None for any.
      width_field: the config field that sets that width, named in the error.

    Returns:
      ``(vectors (V, dim) float32, found (V,) bool)``.

    Raises:
      WordVectorsError: a bad file, or a file whose width is not ``dim`` (names the config field to change).
    """
    wv = open_word_vectors(os.path.expanduser(path))
    if dim is not None and wv.dim != dim:
        raise WordVectorsError(f"{wv.path} has {wv.dim}-d vectors but the model's word embedding is {dim}-d; "
                               f"set {width_field}={wv.dim}, or use vectors of width {dim} (python -m "
                               f"openvivqa_jax.text.fasttext_train --dim {dim})")
    words = piece_words(tokenizer)
    vectors, found = wv.lookup(words)
    n_text = sum(1 for w in words if w)
    logging.info("fastText piece vectors from %s: %d of %d text pieces found (%d in the file's vocabulary); the "
                 "others keep their random initialization", wv.path, int(found.sum()), n_text,
                 int(wv.in_vocabulary([w for w in words if w]).sum()))
    return vectors, found
