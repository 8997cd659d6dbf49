"""SentencePiece tokenizer: training on the train split only, loading from the workdir.

A BPE model (``model_type="bpe"``, the default) trained on the *normalized* train split (questions,
answers and OCR tokens), with ``byte_fallback=True`` (no unknown pieces: an unseen character becomes
its UTF-8 byte pieces), ``character_coverage=1.0`` and the ``identity`` normalization rule (our
normalizer has run already). Special ids are fixed: pad 0, unk 1, bos 2, eos 3.

Why BPE and not SentencePiece's unigram model: the unigram trainer seeds its pieces from a suffix array
over whole sentences, where a substring is a candidate only if at least two different characters
follow it somewhere. With whitespace splitting ``▁`` can only start a piece, so a syllable that never
ends a sentence and never starts a longer word (``màu``, ``mặc``, ``phía`` in "người mặc áo màu trắng
nằm ở phía nào ?") never becomes a piece, however large ``vocab_size`` is. BPE merges the most frequent
pairs inside each word, so every frequent syllable ends up whole. Measured on the synthetic train
split (6,019 questions, vocab 1,000): unigram 16.6 pieces per question, 21.6% of questions cut at 20
pieces, 46% of the 196 syllables seen 20+ times single pieces; BPE 8.0 pieces, 0% cut, 100% single
(docs/results.md). ``model_type="unigram"`` remains for reproducing older workdirs.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import unicodedata
from collections.abc import Iterable, Sequence

import sentencepiece as spm
from absl import logging

from openvivqa_jax import outputs

__all__ = ["PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID", "MODEL_TYPES", "DecodeNotes", "Tokenizer", "clean_decoded_text",
           "train_sentencepiece"]

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
_NUM_BYTE_PIECES = 256
_NUM_SPECIAL = 4
#: SentencePiece model types :func:`train_sentencepiece` accepts (config ``tokenizer.model_type``).
MODEL_TYPES = ("bpe", "unigram")


def train_sentencepiece(
    sentences: Iterable[str],
    model_path: str,
    vocab_size: int,
    max_sentences: int = 2_000_000,
    model_type: str = "bpe",
) -> "Tokenizer":
    """Trains a SentencePiece model (BPE by default; see the module doc) and writes ``model_path``.

    Args:
      sentences: normalized strings from the train split only (never dev/test: the reference code
        built its vocabulary from the test split, a defect not to repeat).
      model_path: destination file (``<workdir>/spm.model``); parent folders are created.
      vocab_size: upper bound on the number of pieces (specials and the 256 byte pieces included).
        Small corpora get fewer pieces (``hard_vocab_limit=False``); a bound below what the corpus's
        distinct characters need is raised to that minimum, with a warning.
      max_sentences: cap on the sentences read.
      model_type: ``"bpe"`` (default) or ``"unigram"`` (see the module doc for why not unigram).

    Returns:
      The loaded :class:`Tokenizer`.

    Raises:
      ValueError: if ``sentences`` is empty, ``vocab_size`` cannot hold the byte pieces, or
        ``model_type`` is not one of :data:`MODEL_TYPES`.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"tokenizer.model_type must be one of {MODEL_TYPES}, got {model_type!r}")
    if vocab_size <= _NUM_BYTE_PIECES + _NUM_SPECIAL:
        raise ValueError(
            f"vocab_size={vocab_size} must exceed {_NUM_BYTE_PIECES + _NUM_SPECIAL} "
            "(256 byte-fallback pieces + 4 specials)"
        )
    corpus = [s for s in sentences if s.strip()]
    if not corpus:
        raise ValueError("train_sentencepiece: no non-empty sentence in the train split")
    # With character_coverage=1.0 every distinct character is a piece besides the 256 byte pieces and
    # the specials; SentencePiece refuses a smaller vocabulary, so raise the bound (logged, not silent).
    required = len(set("".join(corpus)) - {" "}) + _NUM_BYTE_PIECES + _NUM_SPECIAL + 1
    if vocab_size < required:
        logging.warning("tokenizer.vocab_size=%d is below the %d pieces this corpus needs (%d distinct characters "
                        "+ 256 bytes + specials); using %d", vocab_size, required, required - 261, required)
        vocab_size = required
    corpus = corpus[:max_sentences]
    os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_writer=proto,
        model_type=model_type,
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=True,
        split_digits=False,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        num_threads=max(1, min(4, os.cpu_count() or 1)),
        minloglevel=2,
    )
    outputs.write_bytes(model_path, proto.getvalue())
    tok = Tokenizer(model_path)
    logging.info("Trained SentencePiece (%s) on %d sentences: %d pieces -> %s", model_type, len(corpus),
                 tok.vocab_size, model_path)
    if tok.vocab_size < vocab_size:  # hard_vocab_limit=False: a small corpus gives fewer pieces than asked
        logging.warning("tokenizer.vocab_size=%d, but the %d training sentences give only %d pieces: the model's "
                        "vocabulary has %d entries (a small or smoke-run train split; the bound is an upper one)",
                        vocab_size, len(corpus), tok.vocab_size, tok.vocab_size)
    return tok


@dataclasses.dataclass
class DecodeNotes:
    """What decoding ids to text dropped (reported in the metrics file's notes).

    Attributes:
      dropped_bytes: bytes of byte-fallback runs that were not complete UTF-8 characters (a decode that
        stopped inside a character, or a copy step in the middle of one), plus control characters and
        U+FFFD removed from the text.
      unknown_pieces: unknown-piece ids (``UNK_ID``; SentencePiece prints them ``⁇``) skipped.
    """

    dropped_bytes: int = 0
    unknown_pieces: int = 0

    def add(self, other: "DecodeNotes") -> None:
        """Adds ``other``'s counts to these."""
        self.dropped_bytes += other.dropped_bytes
        self.unknown_pieces += other.unknown_pieces

    def __bool__(self) -> bool:
        return bool(self.dropped_bytes or self.unknown_pieces)


def clean_decoded_text(text: str) -> tuple[str, int]:
    """Removes control characters (category ``Cc``) and U+FFFD from decoded text.

    Returns:
      ``(text, removed)``: the text without them and the number of UTF-8 bytes removed.
    """
    removed = 0
    out = []
    for ch in text:
        if ch == "\ufffd" or unicodedata.category(ch) == "Cc":
            removed += len(ch.encode("utf-8"))
        else:
            out.append(ch)
    return ("".join(out) if removed else text), removed


def _utf8_complete(buf: bytes) -> tuple[str, int]:
    """Decodes a byte-fallback run, dropping every byte that is not part of a complete UTF-8 character.

    Returns:
      ``(text, dropped_bytes)``.
    """
    text = buf.decode("utf-8", errors="ignore")
    return text, len(buf) - len(text.encode("utf-8"))


class Tokenizer:
    """A loaded SentencePiece model with cached encoding.

    Attributes:
      vocab_size: number of pieces ``V``; ids are in ``[0, V)``.
      pad_id, bos_id, eos_id, unk_id: special ids (0, 2, 3, 1).
    """

    def __init__(self, model_path: str):
        """Loads ``model_path``.

        Raises:
          FileNotFoundError: if the file does not exist.
          ValueError: if the file is not a SentencePiece model.
        """
        if not os.path.exists(model_path):
            raise FileNotFoundError(f"SentencePiece model not found: {model_path}")
        self.model_path = model_path
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.load(model_path)
        except (OSError, RuntimeError) as e:
            raise ValueError(f"{model_path} is not a SentencePiece model: {e}") from e
        self.vocab_size = int(self._sp.get_piece_size())
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
        self.encode = functools.lru_cache(maxsize=200_000)(self._encode)

    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self._sp.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        """Decodes piece ids to text (see :meth:`decode_with_notes`; what was dropped is logged)."""
        text, notes = self.decode_with_notes(ids)
        if notes:
            logging.warning("Tokenizer.decode: %s", notes)
        return text

    def decode_with_notes(self, ids: Sequence[int]) -> tuple[str, DecodeNotes]:
        """Decodes piece ids ``(steps,)`` to text, never emitting U+FFFD or control characters.

        Pad, BOS and EOS ids are skipped; unknown ids are skipped and counted. Runs of byte-fallback pieces
        (``<0xE1><0xBB><0x8D>``) are decoded as UTF-8; bytes that do not form a complete character (a run
        cut by the end of the decode, or by an unknown piece) are dropped and counted, where SentencePiece
        itself would emit U+FFFD. For valid input the text equals SentencePiece's ``decode``.

        Returns:
          ``(text, notes)``.
        """
        notes = DecodeNotes()
        parts: list[str] = []
        run = bytearray()

        def flush() -> None:
            if run:
                text, dropped = _utf8_complete(bytes(run))
                parts.append(text)
                notes.dropped_bytes += dropped
                run.clear()

        for i in ids:
            i = int(i)
            if i < 0 or i >= self.vocab_size:
                raise ValueError(f"piece id {i} is outside the vocabulary [0, {self.vocab_size}) of {self.model_path}")
            if i == self.unk_id:
                flush()
                notes.unknown_pieces += 1
            elif i < _NUM_SPECIAL:
                continue
            elif self._sp.is_byte(i):
                run.append(int(self._sp.id_to_piece(i)[3:5], 16))
            else:
                flush()
                parts.append(self._sp.id_to_piece(i).replace("\u2581", " "))
        flush()
        text = "".join(parts)
        if text.startswith(" "):  # SentencePiece's dummy prefix
            text = text[1:]
        text, removed = clean_decoded_text(text)
        notes.dropped_bytes += removed
        return text, notes

    def encode_with_offsets(self, text: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Encodes ``text`` and says which characters of ``text`` each piece covers.

        The ids equal :meth:`encode`'s. Offsets are character (code point) indices into ``text``, from
        SentencePiece's byte offsets (``return_type="proto"``: ``begin``/``end`` per piece). The byte-fallback
        pieces of one character share that character's span (SentencePiece gives all but the last an empty
        byte range); the dummy-prefix piece ``▁`` of a space covers that space.

        Returns:
          ``(ids, starts, ends)``, each ``(pieces,)``: piece ``k`` covers ``text[starts[k]:ends[k]]``,
          ``starts[k] < ends[k]`` whenever ``text`` is not empty.
        """
        return self._encode_offsets(text)

    @functools.lru_cache(maxsize=200_000)
    def _encode_offsets(self, text: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        proto = self._sp.encode(text, return_type="proto")
        # byte offset -> character index (the character that byte belongs to), plus the end.
        char_of = []
        for ci, ch in enumerate(text):
            char_of.extend([ci] * len(ch.encode("utf-8")))
        char_of.append(len(text))
        ids, starts, ends = [], [], []
        for piece in proto.pieces:
            b = min(piece.begin, len(char_of) - 1)
            e = min(piece.end, len(char_of) - 1)
            s, t = char_of[b], char_of[e] if e > b else char_of[b] + 1
            if e > b and char_of[e - 1] >= t:  # an end inside a character: round up to its end
                t = char_of[e - 1] + 1
            ids.append(int(piece.id))
            starts.append(min(s, len(text)))
            ends.append(min(max(t, s + 1), len(text)) if text else 0)
        return tuple(ids), tuple(starts), tuple(ends)

    def id_to_piece(self, i: int) -> str:
        """The piece string of id ``i``."""
        return self._sp.id_to_piece(int(i))

    def __reduce__(self):
        return (Tokenizer, (self.model_path,))
