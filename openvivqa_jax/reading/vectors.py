"""Word vectors trained in the run's workdir before the reader is built (``model.fasttext.train_here``).

Where no published vectors are at hand, skip-gram fastText (:mod:`openvivqa_jax.text.fasttext_train`) on the
train split's own passages and questions gives the word embedding a start that knows which syllables occur in
the same contexts, learned from every passage word rather than only from the answer spans' gradients
(docs/viquad.md measures it).
"""

from __future__ import annotations

import os
import time

from absl import logging

from openvivqa_jax.reading.data import read_split
from openvivqa_jax.text.fasttext_train import default_dim, reading_sentences, train_fasttext

__all__ = ["vectors_trained_here", "TRAINED_VECTORS"]

#: The workdir file of the vectors :func:`vectors_trained_here` trains.
TRAINED_VECTORS = "fasttext_train.vec"


def vectors_trained_here(cfg, workdir: str, builder, train_records: list[dict] | None) -> list[dict] | None:
    """With ``model.fasttext.train_here`` and no ``model.fasttext.path``: skip-gram fastText vectors of the word
    embedding's width trained on the train split's passages and questions
    (:func:`openvivqa_jax.text.fasttext_train.reading_sentences`; dev and test are never read), with the run's
    seed, written once to ``<workdir>/fasttext_train.vec`` (reused when present, so a resumed run does not train
    them again) and set as ``model.fasttext.path`` for the reader to start from. Logs what it trained.

    Returns:
      ``train_records``, read here when None and needed.
    """
    ft = cfg.model.get("fasttext")
    if ft is None or not ft.get("train_here"):
        return train_records
    if ft.get("path"):
        logging.warning("model.fasttext.train_here is set but so is model.fasttext.path: the reader starts from "
                        "%s and no vectors are trained", ft.path)
        return train_records
    path = os.path.join(workdir, TRAINED_VECTORS)
    if os.path.exists(path):
        logging.info("fastText vectors trained here earlier: %s", path)
    else:
        if train_records is None:
            train_records = read_split(builder, cfg.data.train_split)
        dim, epochs, t0 = default_dim(cfg), int(ft.get("epochs", 10)), time.time()
        model = train_fasttext(reading_sentences(train_records), path, dim=dim, epochs=epochs, seed=int(cfg.seed))
        logging.info("fastText vectors trained here (skip-gram, dim %d, %d epochs, seed %d) on the %s split's %d "
                     "passages and %d questions: %d words in %.0f s, %s", dim, epochs, int(cfg.seed),
                     cfg.data.train_split, len({r["passage"] for r in train_records}), len(train_records),
                     len(model.wv.key_to_index), time.time() - t0, path)
    ft.path = path
    return train_records
