"""Pretrained encoders for the span reader from a Hugging Face folder: mBERT, XLM-R and PhoBERT, the paper's
pretrained rows (ViQuAD §5.2-5.3, Table 5), as ``model.encoder = "pretrained"`` with ``model.pretrained_path``.

The folder is the one M4C's question encoder reads (:mod:`openvivqa_jax.models.bert`): ``config.json``
(``model_type`` ``bert`` for mBERT, ``xlm-roberta`` / ``roberta`` for XLM-R and PhoBERT), ``model.safetensors``,
and the tokenizer (``tokenizer.json``; PhoBERT's ``vocab.txt`` + ``bpe.codes`` also,
:mod:`openvivqa_jax.text.checkpoint_tokenizer`). Nothing is downloaded.

- :class:`PretrainedEncoder`: every layer of the checkpoint (:class:`~openvivqa_jax.models.bert.BertEncoder`),
  fine-tuned under the span head. BERT reads the segment ids as token types; RoBERTa-style checkpoints
  (``type_vocab_size`` 1: XLM-R, PhoBERT) read one token type, and count positions from ``pad_token_id + 1``
  (HF ``create_position_ids_from_input_ids``, in ``BertEncoder``).
- :class:`CheckpointReaderTokenizer`: the checkpoint's ids with character offsets, in the pair layout of its
  family: ``[CLS] q [SEP] p [SEP]`` (BERT), ``<s> q </s></s> p </s>`` (RoBERTa, HF ``build_inputs_with_special_
  tokens``). The passage is read cased (NFC of each original word, :meth:`~CheckpointReaderTokenizer.
  normalize_word`); the question is the dataset's normalized (lowercase) text, as the builder stores it.
  PhoBERT was pretrained on word-segmented text (``học_sinh``); ViQuAD's text is syllables, which PhoBERT reads
  less well unless the dataset is segmented first.

Also the DrQA / QANet word vectors from the user's fastText file (:func:`initialize_word_vectors`).
"""

from __future__ import annotations

import unicodedata
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx

from openvivqa_jax.models.bert import BertCheckpointError, BertEncoder, BertSettings, load_hf_checkpoint, read_bert_settings
from openvivqa_jax.text.checkpoint_tokenizer import load_checkpoint_tokenizer
from openvivqa_jax.text.normalize import remove_format_characters

__all__ = ["PretrainedEncoder", "CheckpointReaderTokenizer", "pretrained_folder", "initialize_word_vectors",
           "WORD_EMBEDDING"]

_ROBERTA = ("roberta", "xlm-roberta", "camembert", "phobert")


def pretrained_folder(model_cfg) -> str:
    """``model.pretrained_path`` (``~`` expanded).

    Raises:
      BertCheckpointError: the field is not set (names the flag).
    """
    import os

    path = model_cfg.get("pretrained_path")
    if not path:
        raise BertCheckpointError("model.encoder='pretrained' needs the checkpoint folder: "
                                  "--config.model.pretrained_path=<folder with config.json, model.safetensors and "
                                  "tokenizer.json>")
    return os.path.expanduser(path)


class PretrainedEncoder(nnx.Module):
    """A checkpoint's encoder under the span head (module doc).

    Args:
      settings: ``config.json``'s architecture; folder: the checkpoint folder (weights read by
      :meth:`load_pretrained`).

    Attributes:
      out_dim: ``hidden_size``.
    """

    def __init__(self, settings: BertSettings, folder: str, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.bert = BertEncoder(settings, settings.num_hidden_layers, rngs=rngs, dtype=dtype)
        self.folder = folder
        self.one_type = settings.type_vocab_size <= 1
        self.out_dim = settings.hidden_size

    def load_pretrained(self) -> str:
        """Loads the folder's weights in place; returns the load report's one line.

        Raises:
          BertCheckpointError: unreadable weights, or a tensor missing or of another shape.
        """
        return load_hf_checkpoint(self.bert, self.folder).summary()

    def __call__(self, input_ids, segment_ids, input_mask, *, deterministic: bool = True,
                 rngs: nnx.Rngs | None = None) -> jax.Array:
        """``(B, L)`` ids, segments, mask -> ``(B, L, hidden_size)``."""
        tt = jnp.zeros_like(segment_ids) if self.one_type else segment_ids
        return self.bert(input_ids, input_mask, tt, deterministic=deterministic, rngs=rngs)


class CheckpointReaderTokenizer:
    """A checkpoint's tokenizer with character offsets and its pair layout (module doc).

    Attributes:
      vocab_size: ``config.json``'s; pad_id, bos_id, eos_id: ``[PAD]``/``<pad>``, ``[CLS]``/``<s>``,
      ``[SEP]``/``</s>``; pair_separator: the ids between question and passage; folder.

    Raises:
      BertCheckpointError: no or a bad tokenizer file, or one without the family's special tokens.
    """

    kind = "pretrained"

    def __init__(self, folder: str):
        settings = read_bert_settings(folder)
        self.folder = folder
        self._base = load_checkpoint_tokenizer(folder, settings.vocab_size)
        self.vocab_size = settings.vocab_size
        roberta = settings.model_type in _ROBERTA
        names = ("<s>", "</s>") if roberta else ("[CLS]", "[SEP]")
        if self._base.kind == "phobert_bpe":
            bpe = self._base._tok
            self.bos_id, self.eos_id = bpe.bos_id, bpe.eos_id
        else:
            ids = [self._base._tok.token_to_id(n) for n in names]
            if any(i is None for i in ids):
                raise BertCheckpointError(f"{folder}: the tokenizer has no {names[0]} / {names[1]} token, which a "
                                          f"{settings.model_type} checkpoint's inputs begin and end with")
            self.bos_id, self.eos_id = (int(i) for i in ids)
        self.pad_id = int(self._base.pad_id)
        self.unk_id = self.pad_id
        self.pair_separator = (self.eos_id, self.eos_id) if roberta else (self.eos_id,)

    @staticmethod
    def normalize_word(word: str) -> str:
        """The form a cased checkpoint reads: NFC without format characters (case and tone marks kept)."""
        return unicodedata.normalize("NFC", remove_format_characters(word))

    def encode_with_offsets(self, text: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Ids of ``text`` without special tokens and each one's characters ``text[starts[k]:ends[k]]``."""
        if self._base.kind == "phobert_bpe":
            return self._phobert(text)
        enc = self._base._tok.encode(text, add_special_tokens=False)
        ids, starts, ends = [], [], []
        for i, (s, e) in zip(enc.ids, enc.offsets):
            s = min(s, max(len(text) - 1, 0))
            ids.append(int(i))
            starts.append(s)
            ends.append(min(max(e, s + 1), len(text)))
        return tuple(ids), tuple(starts), tuple(ends)

    def _phobert(self, text: str):
        bpe = self._base._tok
        ids, starts, ends = [], [], []
        pos = 0
        for word in text.split():
            pos = text.index(word, pos)
            at = pos
            for piece in bpe.bpe(word):
                n = len(piece[:-2] if piece.endswith("@@") else piece)
                ids.append(bpe.encoder.get(piece, bpe.unk_id))
                starts.append(at)
                ends.append(at + max(n, 1))
                at += n
            pos += len(word)
        return tuple(ids), tuple(starts), tuple(ends)

    def encode(self, text: str) -> tuple[int, ...]:
        """The ids of :meth:`encode_with_offsets`."""
        return self.encode_with_offsets(text)[0]

    def id_to_piece(self, i: int) -> str:
        """The token of id ``i``."""
        if self._base.kind == "phobert_bpe":
            inv = {v: k for k, v in self._base._tok.encoder.items()}
            return inv.get(int(i), "")
        return self._base._tok.id_to_token(int(i)) or ""


#: The parameter path of a reader's word embedding (what ``model.fasttext.freeze`` keeps as loaded): DrQA's and
#: QANet's ``encoder/embed/embedding``, the transformer's ``encoder/embedding`` (not its position or segment ones).
WORD_EMBEDDING = r"(.*/)?encoder/(embed/)?embedding/embedding(/.*)?"


def _word_table(encoder):
    """The ``(V, width)`` word-embedding parameter of a reader's encoder, or None (a pretrained checkpoint)."""
    embed = getattr(encoder, "embed", None)
    if embed is not None:
        return embed.embedding.embedding
    table = getattr(encoder, "embedding", None)
    return table.embedding if isinstance(table, nnx.Embed) else None


def initialize_word_vectors(model, model_cfg, tokenizer) -> str | None:
    """Starts the word embedding of a DrQA, QANet or transformer reader from the fastText file
    ``model.fasttext.path`` (``.bin`` or ``.vec``, the user's or one trained on the train split by
    :mod:`openvivqa_jax.text.fasttext_train`; read by :func:`openvivqa_jax.text.word_vectors.piece_vectors`: row
    ``i`` is the vector of syllable ``i``; ViQuAD §5.3 uses such vectors). Syllables without a vector keep their
    random start, scaled to the vectors' spread. The vectors' width must be the embedding's: ``model.word_dim``
    (DrQA, QANet) or ``model.d_model`` (the transformer). Returns the line logged, or None when no file is set.

    Raises:
      ValueError: the file is set but the reader has no word embedding (a pretrained checkpoint).
      openvivqa_jax.text.word_vectors.WordVectorsError: a missing or bad file, or one whose width is not the
        embedding's.
    """
    from openvivqa_jax.models.pretrained import fasttext_path

    path = fasttext_path(model_cfg)
    if not path:
        return None
    table = _word_table(model.encoder)
    if table is None:
        raise ValueError(f"model.fasttext.path is set but the {model_cfg.encoder!r} reader has no word embedding "
                         "to start from it (the drqa, qanet and transformer readers have)")
    from openvivqa_jax.text.word_vectors import piece_vectors

    field = "model.word_dim" if getattr(model.encoder, "embed", None) is not None else "model.d_model"
    vectors, found = piece_vectors(path, tokenizer, dim=int(table.shape[1]), width_field=field)
    old = np.asarray(table[...])
    if found.any():
        old = old * (float(vectors[found].std()) / max(float(old.std()), 1e-12))
    table[...] = jnp.asarray(np.where(found[:, None], vectors, old), table[...].dtype)
    line = f"word embedding: {int(found.sum())} of {len(found)} syllables from fastText {path}"
    logging.info("%s", line)
    return line
