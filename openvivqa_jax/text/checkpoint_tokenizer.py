"""The tokenizer of a Hugging Face BERT / PhoBERT checkpoint folder, for the question fed to a pretrained encoder.

A pretrained encoder must see the ids its own tokenizer makes, so the question gets a second encoding besides
the SentencePiece pieces of the answer vocabulary (:mod:`openvivqa_jax.text.tokenizer`). The folder's files decide
which (first match):

* ``tokenizer.json``: read with the ``tokenizers`` library (any fast tokenizer: BERT's WordPiece, XLM-R's
  unigram, ...), special tokens added by its post-processor.
* ``vocab.txt`` + ``bpe.codes``: PhoBERT's fairseq BPE (Nguyen & Nguyen 2020; HF ``PhobertTokenizer``): words split
  on whitespace, BPE merges by rank with ``</w>`` at the word end, continuation marked ``@@``; ids from
  ``vocab.txt`` after ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3; ``<s> ... </s>`` around the question.
  **PhoBERT was pretrained on word-segmented text** (VnCoreNLP's RDRSegmenter joins the syllables of a word with
  ``_``: ``học_sinh``). The project's text is syllables; a dataset whose questions are not segmented feeds
  PhoBERT syllables it saw only inside segmented words, so segment the text before building the dataset
  (segmentation is not done here).
* ``vocab.txt`` alone: BERT's WordPiece via ``tokenizers``' ``BertWordPieceTokenizer``, lowercasing and accent
  stripping as ``tokenizer_config.json``'s ``do_lower_case`` / ``strip_accents`` say (HF's default
  ``do_lower_case`` is True). Accent stripping removes Vietnamese tone marks: use a cased checkpoint
  (``bert-base-multilingual-cased``).

Questions arrive normalized (lowercase, NFC) and are encoded as ``[CLS] q [SEP]`` / ``<s> q </s>``, cut to the
question length (the last id then stays the closing special token).
"""

from __future__ import annotations

import functools
import os
import re

import numpy as np

from openvivqa_jax import jsonio
from openvivqa_jax.models.bert import BertCheckpointError, read_bert_settings, text_encoder_folder

__all__ = ["CheckpointTokenizer", "load_checkpoint_tokenizer", "question_tokenizer", "PhobertBpe"]


class PhobertBpe:
    """PhoBERT's BPE (module doc), a re-implementation of HF ``PhobertTokenizer`` (``bpe`` and ``_tokenize``).

    Args:
      vocab_path: fairseq ``vocab.txt`` (``token count`` per line); bpe_path: ``bpe.codes`` (``a b count``).

    Raises:
      BertCheckpointError: an unreadable or malformed file (names it and the line).
    """

    SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")

    def __init__(self, vocab_path: str, bpe_path: str):
        self.encoder = {t: i for i, t in enumerate(self.SPECIALS)}
        for n, line in enumerate(_read_lines(vocab_path), 1):
            parts = line.rsplit(" ", 1)
            if not parts[0]:
                raise BertCheckpointError(f"{vocab_path} line {n}: empty token")
            self.encoder.setdefault(parts[0], len(self.encoder))
        ranks = {}
        for n, line in enumerate(_read_lines(bpe_path), 1):
            parts = line.split()
            if len(parts) < 2:
                raise BertCheckpointError(f"{bpe_path} line {n}: expected 'a b count', got {line!r}")
            ranks.setdefault((parts[0], parts[1]), len(ranks))
        self.ranks = ranks
        self.unk_id, self.pad_id, self.bos_id, self.eos_id = 3, 1, 0, 2

    def bpe(self, token: str) -> list[str]:
        """The BPE pieces of one whitespace-free ``token`` (non-final pieces end with ``@@``)."""
        word = tuple(token[:-1]) + (token[-1] + "</w>",)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
        pieces = [w + "@@" for w in word[:-1]] + [word[-1][: -len("</w>")]]
        return [p for p in pieces if p]

    def tokenize(self, text: str) -> list[str]:
        """Pieces of ``text``, word by word."""
        return [p for w in re.findall(r"\S+", text) for p in self.bpe(w)]

    def encode(self, text: str) -> list[int]:
        """``<s> pieces </s>`` ids (unknown pieces: ``<unk>``)."""
        return [self.bos_id] + [self.encoder.get(p, self.unk_id) for p in self.tokenize(text)] + [self.eos_id]

    @property
    def vocab_size(self) -> int:
        """The number of ids of ``vocab.txt`` (specials included)."""
        return len(self.encoder)


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise BertCheckpointError(f"cannot read {path}: {e}") from None


class CheckpointTokenizer:
    """Question ids for a pretrained encoder (module doc).

    Attributes:
      folder: the checkpoint folder; kind: ``"tokenizer.json"``, ``"phobert_bpe"`` or ``"wordpiece"``;
      vocab_size: ids are in ``[0, vocab_size)``; pad_id: the padding id.
    """

    def __init__(self, folder: str):
        """Reads the tokenizer files of ``folder``.

        Raises:
          BertCheckpointError: no tokenizer file, or an unreadable one.
        """
        self.folder = folder = os.path.expanduser(folder)
        tj, vocab, codes = (os.path.join(folder, n) for n in ("tokenizer.json", "vocab.txt", "bpe.codes"))
        cfg = {}
        tc = os.path.join(folder, "tokenizer_config.json")
        if os.path.isfile(tc):
            cfg = jsonio.read_json(tc, error=BertCheckpointError)
        if os.path.isfile(tj):
            from tokenizers import Tokenizer  # heavy (Hugging Face tokenizers): only for such a checkpoint

            try:
                self._tok = Tokenizer.from_file(tj)
            except Exception as e:  # noqa: BLE001 -- the Rust library raises a plain Exception for a bad file
                raise BertCheckpointError(f"{tj} is not a tokenizers file: {str(e).splitlines()[0]}") from None
            self.kind = "tokenizer.json"
            self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
            pad = cfg.get("pad_token") or next((t for t in ("[PAD]", "<pad>") if self._tok.token_to_id(t) is not None),
                                               None)
            if isinstance(pad, dict):
                pad = pad.get("content")
            self.pad_id = int(self._tok.token_to_id(pad)) if pad and self._tok.token_to_id(pad) is not None else 0
        elif os.path.isfile(vocab) and os.path.isfile(codes):
            self._tok = PhobertBpe(vocab, codes)
            self.kind = "phobert_bpe"
            self.vocab_size = self._tok.vocab_size
            self.pad_id = self._tok.pad_id
        elif os.path.isfile(vocab):
            from tokenizers import BertWordPieceTokenizer  # heavy: only for a WordPiece checkpoint

            lower = bool(cfg.get("do_lower_case", True))
            strip = cfg.get("strip_accents")
            self._tok = BertWordPieceTokenizer(vocab, lowercase=lower, strip_accents=lower if strip is None else strip,
                                               clean_text=True, handle_chinese_chars=True)
            self.kind = "wordpiece"
            self.vocab_size = self._tok.get_vocab_size()
            self.pad_id = int(self._tok.token_to_id("[PAD]") or 0)
        else:
            raise BertCheckpointError(f"no tokenizer in {folder}: expected tokenizer.json, vocab.txt (WordPiece), or "
                                      "vocab.txt with bpe.codes (PhoBERT)")

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` with the checkpoint's special tokens."""
        if self.kind == "phobert_bpe":
            return self._tok.encode(text)
        return list(self._tok.encode(text).ids)

    def encode_padded(self, text: str, length: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """``(ids (length,) int32, mask (length,) bool, truncated)``; a cut keeps the final special token."""
        ids = self.encode(text)
        truncated = len(ids) > length
        if truncated:
            ids = ids[: length - 1] + ids[-1:]
        out = np.full((length,), self.pad_id, np.int32)
        out[: len(ids)] = ids
        return out, np.arange(length) < len(ids), truncated


def load_checkpoint_tokenizer(folder: str, vocab_size: int | None = None) -> CheckpointTokenizer:
    """The :class:`CheckpointTokenizer` of ``folder``, checked against the encoder's ``vocab_size``
    (``config.json``).

    Raises:
      BertCheckpointError: no or a bad tokenizer file, or a tokenizer with more ids than the embedding has rows.
    """
    tok = CheckpointTokenizer(folder)
    if vocab_size is not None and tok.vocab_size > vocab_size:
        raise BertCheckpointError(f"{folder}: the tokenizer ({tok.kind}) has {tok.vocab_size} ids but config.json's "
                                  f"vocab_size is {vocab_size}: tokenizer and weights are of different checkpoints")
    return tok


@functools.lru_cache(maxsize=4)
def _cached(folder: str) -> CheckpointTokenizer:
    return load_checkpoint_tokenizer(folder, read_bert_settings(folder).vocab_size)


def question_tokenizer(model_cfg) -> CheckpointTokenizer | None:
    """The tokenizer of ``model.text_encoder``'s checkpoint when the model uses a pretrained text encoder
    (:func:`openvivqa_jax.models.bert.text_encoder_folder`), read once per process; None otherwise.

    Raises:
      BertCheckpointError: see :func:`load_checkpoint_tokenizer` (checked against ``config.json``'s
        ``vocab_size``).
    """
    folder = text_encoder_folder(model_cfg)
    return None if folder is None else _cached(folder)
