"""The span reader's inputs, read by its train loop and its evaluation alike: a split's questions from the built
dataset, the run's tokenizer, the question/passage windows, and the checked config's dataset and tokenizer together
(:func:`setup`).

The tokenizer (:func:`load_tokenizer`) is chosen by the config: ``tokenizer.model_type`` ``bpe`` / ``unigram``
(SentencePiece pieces, ``<workdir>/spm.model``) or ``words`` (syllables, ``<workdir>/words.json``,
:mod:`.vocab`), each trained on the train split when the workdir has none; ``model.encoder = "pretrained"``
reads the checkpoint's own (:mod:`.pretrained`).
"""

from __future__ import annotations

import os

from openvivqa_jax.data.datasets import load_builder
from openvivqa_jax.data.records import DatasetError, load_source
from openvivqa_jax.reading import features as feats
from openvivqa_jax.reading.config import check_reading_config
from openvivqa_jax.reading.vocab import WordTokenizer, train_word_tokenizer
from openvivqa_jax.text.normalize import normalize_text
from openvivqa_jax.text.tokenizer import Tokenizer, train_sentencepiece

__all__ = ["read_split", "word_text", "load_tokenizer", "tokenizer_file", "reader_windows", "setup"]


def _text(v) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def read_split(builder, split: str) -> list[dict]:
    """The questions of ``split`` as ``{question_id, question, passage, answer_texts, answer_starts,
    answer_ends}`` (strings decoded, offsets as ints), in the split's order.

    Raises:
      DatasetError: the split is not in the built dataset, or the dataset has no ``passage`` (built before the
        span fields existed: rebuild it).
    """
    if "passage" not in builder.info.features:
        raise DatasetError(f"{builder.name} at {builder.data_dir} has no 'passage' feature (built by an older "
                           "builder version); rebuild it or choose another data.data_dir")
    src = load_source(builder, split)
    out = []
    for i in range(len(src)):
        ex = src[i]
        out.append({"question_id": _text(ex["question_id"]), "question": _text(ex["question"]),
                    "passage": _text(ex["passage"]), "answer_texts": [_text(a) for a in ex["answer_texts"]],
                    "answer_starts": [int(a) for a in ex["answer_starts"]],
                    "answer_ends": [int(a) for a in ex["answer_ends"]]})
    return out


def tokenizer_file(cfg) -> str | None:
    """The workdir file of the config's tokenizer (``spm.model`` or ``words.json``), None for a checkpoint's."""
    if cfg.model.get("encoder") == "pretrained":
        return None
    return "words.json" if cfg.tokenizer.model_type == "words" else "spm.model"


def word_text(passage: str) -> str:
    """``passage`` as the word tokenizer reads it: its words (:func:`.features.split_words`) each normalized on
    its own (:func:`~openvivqa_jax.text.normalize.normalize_text`), as :func:`.features.tokenize_passage` keys
    them, joined by single spaces."""
    return " ".join(normalize_text(passage[s:e]) for s, e in feats.split_words(passage))


def load_tokenizer(cfg, workdir: str, train_records: list[dict] | None):
    """The run's tokenizer (module doc): its workdir file, trained first on the train split's normalized passages
    and questions when absent (the train split only, as the answer generators' tokenizer)."""
    name = tokenizer_file(cfg)
    if name is None:
        from openvivqa_jax.reading.pretrained import CheckpointReaderTokenizer, pretrained_folder

        return CheckpointReaderTokenizer(pretrained_folder(cfg.model))
    path = os.path.join(workdir, name)
    words = name == "words.json"
    if os.path.exists(path):
        return WordTokenizer.load(path) if words else Tokenizer(path)
    passages = dict.fromkeys(r["passage"] for r in train_records)
    if words:
        sentences = [word_text(p) for p in passages] + [r["question"] for r in train_records]
        return train_word_tokenizer(sentences, path, min_count=int(cfg.tokenizer.get("min_count", 1)),
                                    max_words=int(cfg.tokenizer.vocab_size))
    sentences = [normalize_text(p) for p in passages] + [r["question"] for r in train_records]
    return train_sentencepiece(sentences, path, cfg.tokenizer.vocab_size, model_type=cfg.tokenizer.model_type)


def reader_windows(cfg, tokenizer, records, train: bool) -> feats.Windows:
    """The question/passage windows of ``records`` (:func:`.features.make_windows`) with the config's sizes."""
    m = cfg.model
    return feats.make_windows(tokenizer, records, max_seq_len=m.max_seq_len, max_question_len=m.max_question_len,
                              doc_stride=m.doc_stride, train=train)


def setup(cfg, workdir: str):
    """The checked config's dataset builder and tokenizer: ``(builder, tokenizer, train_records)``
    (``train_records`` read only when the tokenizer had to be trained, else None)."""
    check_reading_config(cfg)
    builder = load_builder(cfg.data)
    train_records = None
    name = tokenizer_file(cfg)
    if name is not None and not os.path.exists(os.path.join(workdir, name)):
        train_records = read_split(builder, cfg.data.train_split)
    tokenizer = load_tokenizer(cfg, workdir, train_records)
    return builder, tokenizer, train_records
