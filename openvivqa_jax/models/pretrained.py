"""Pretrained text initializations from the user's files, applied once after a model is built.

* ``model.question_embedding = "fasttext"``: row ``i`` of the question piece embedding ``question/embedding``
  ``(V, word_dim)`` starts as the fastText vector of piece ``i``'s text
  (:func:`openvivqa_jax.text.word_vectors.piece_vectors`; OpenViVQA §4.2 QuMLAG, §4.3 MLPAG, and LoRRA's
  question embedding). Pieces without a vector keep the random initialization. ``model.fasttext.freeze`` keeps
  the table as loaded (:func:`openvivqa_jax.training.state.frozen_param_regex`), otherwise it is fine-tuned.
* ``model.text_encoder.kind = "bert"`` (M4C): the Hugging Face BERT / RoBERTa checkpoint of
  ``model.text_encoder.path`` is loaded into ``text_bert`` (:func:`openvivqa_jax.models.bert.load_hf_checkpoint`).

When the path of either is not set, the model keeps its random start and one warning line says so.
"""

from __future__ import annotations

import os

import jax.numpy as jnp
import numpy as np
from absl import logging

__all__ = ["initialize_pretrained", "fasttext_path", "FASTTEXT_HINT"]

#: Where users get the paper's vectors (named in the warnings and errors).
FASTTEXT_HINT = "cc.vi.300.bin from https://fasttext.cc/docs/en/crawl-vectors.html"


def fasttext_path(model_cfg) -> str | None:
    """``model.fasttext.path`` (``~`` expanded), or None when not set."""
    ft = model_cfg.get("fasttext")
    path = ft.get("path") if ft is not None else None
    return os.path.expanduser(path) if path else None


def initialize_pretrained(model, model_cfg, tokenizer) -> list[str]:
    """Loads the pretrained parts ``model_cfg`` names into ``model`` (module doc), in place.

    Args:
      model: a built model of the zoo (concrete, not abstract).
      model_cfg: ``config.model``.
      tokenizer: the run's SentencePiece tokenizer (``V`` pieces: the question embedding's rows).

    Returns:
      One line per thing loaded or left random (also logged).

    Raises:
      openvivqa_jax.text.word_vectors.WordVectorsError: a missing or bad fastText file, or one whose width is not
        ``model.word_dim``.
      openvivqa_jax.models.bert.BertCheckpointError: a missing, bad or mismatched BERT checkpoint.
    """
    notes = []
    if (model_cfg.get("question_embedding", "learned") or "learned") == "fasttext":
        table = model.question.embedding.embedding
        path = fasttext_path(model_cfg)
        if not path:
            notes.append(f"model.question_embedding='fasttext' but model.fasttext.path is not set: the question "
                         f"embeddings start random (the paper starts from {FASTTEXT_HINT})")
            logging.warning("%s", notes[-1])
        else:
            from openvivqa_jax.text.word_vectors import piece_vectors

            vectors, found = piece_vectors(path, tokenizer, dim=int(table.shape[1]))
            if vectors.shape[0] != table.shape[0]:
                raise ValueError(f"question embedding has {table.shape[0]} rows, the tokenizer {vectors.shape[0]}")
            # Rows without a vector keep their random start, scaled like the found rows so both train alike.
            old = np.asarray(table[...])
            if found.any():
                scale = float(vectors[found].std()) / max(float(old.std()), 1e-12)
                old = old * scale
            table[...] = jnp.asarray(np.where(found[:, None], vectors, old), table[...].dtype)
            notes.append(f"question embedding: {int(found.sum())} of {len(found)} pieces from fastText {path}")
            logging.info("%s", notes[-1])
    if getattr(model, "uses_bert", False):
        from openvivqa_jax.models.bert import load_hf_checkpoint, text_encoder_folder

        report = load_hf_checkpoint(model.text_bert, text_encoder_folder(model_cfg))
        notes.append(report.summary())
        logging.info("%s", notes[-1])
    return notes
