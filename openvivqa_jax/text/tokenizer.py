"""SentencePiece tokenizer: training on the train split only, loading from the workdir.

DESIGN §4: a unigram model trained on the *normalized* train split (questions, answers and OCR
tokens), with ``byte_fallback=True`` (no unknown pieces, every Vietnamese character survives),
``character_coverage=1.0`` and the ``identity`` normalization rule (our normalizer has run already).
Special ids are fixed: pad 0, unk 1, bos 2, eos 3.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Iterable, Sequence

import sentencepiece as spm
from absl import logging

__all__ = ["PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID", "Tokenizer", "train_sentencepiece"]

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
_NUM_BYTE_PIECES = 256
_NUM_SPECIAL = 4


def train_sentencepiece(
    sentences: Iterable[str],
    model_path: str,
    vocab_size: int,
    max_sentences: int = 2_000_000,
) -> "Tokenizer":
    """Trains a unigram SentencePiece model and writes ``model_path``.

    Args:
      sentences: normalized strings from the train split only (never dev/test: the reference code
        built its vocabulary from the test split, a defect not to repeat).
      model_path: destination file (``<workdir>/spm.model``); parent folders are created.
      vocab_size: upper bound on the number of pieces (specials and the 256 byte pieces included).
        Small corpora get fewer pieces (``hard_vocab_limit=False``); a bound below what the corpus's
        distinct characters need is raised to that minimum, with a warning.
      max_sentences: cap on the sentences read.

    Returns:
      The loaded :class:`Tokenizer`.

    Raises:
      ValueError: if ``sentences`` is empty or ``vocab_size`` cannot hold the byte pieces.
    """
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
    os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus[:max_sentences]),
        model_writer=proto,
        model_type="unigram",
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
    tmp = model_path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(proto.getvalue())
    os.replace(tmp, model_path)
    tok = Tokenizer(model_path)
    logging.info("Trained SentencePiece on %d sentences: %d pieces -> %s", len(corpus), tok.vocab_size, model_path)
    return tok


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
        """Decodes piece ids to text; special ids are skipped."""
        return self._sp.decode([int(i) for i in ids if int(i) >= _NUM_SPECIAL])

    def id_to_piece(self, i: int) -> str:
        """The piece string of id ``i``."""
        return self._sp.id_to_piece(int(i))

    def __reduce__(self):
        return (Tokenizer, (self.model_path,))
