"""A run's text assets: the SentencePiece tokenizer, the answer list, and the input encoders built on them.

Both files live in the workdir and are made from the train split only (never dev/test), once:

* ``<workdir>/spm.model``: the tokenizer, trained on the normalized questions, answers and OCR tokens
  (:func:`load_tokenizer`);
* ``<workdir>/answers.json``: the classifiers' top-``model.num_answers`` answers (:func:`load_answer_list`).

Training builds them; evaluation, prediction and resumed runs load them. :func:`make_inputs` builds what
turns a record into arrays (:class:`~openvivqa_jax.data.pipeline.Preprocessor`, with and without OCR) and
decoded ids back into text (:class:`~openvivqa_jax.text.answer_vocab.AnswerVocab`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable

import jax
import numpy as np
from jax.experimental import multihost_utils

from openvivqa_jax.data import pipeline
from openvivqa_jax.text.answer_list import AnswerList
from openvivqa_jax.text.answer_vocab import AnswerVocab
from openvivqa_jax.text.tokenizer import Tokenizer, train_sentencepiece

__all__ = ["exists_on_process_0", "load_tokenizer", "load_answer_list", "Inputs", "make_inputs"]


def exists_on_process_0(path: str) -> bool:
    """``os.path.exists(path)`` as process 0 sees it, on every process.

    Each process checking for itself races with process 0 writing the file: a process that already sees
    it skips the barrier process 0 waits at, and the next collective fails with a name mismatch.
    """
    exists = os.path.exists(path)
    if jax.process_count() > 1:
        exists = bool(multihost_utils.broadcast_one_to_all(np.int32(exists)))
    return exists


def load_tokenizer(cfg, workdir: str, train_records: Iterable | None = None) -> Tokenizer:
    """Loads ``<workdir>/spm.model`` or trains it on the normalized train split (questions, answers,
    OCR tokens joined by spaces) and writes it there (process 0 writes; the others wait for it).

    Args:
      cfg: the experiment config (``tokenizer.vocab_size``, ``tokenizer.model_type``).
      workdir: the run folder.
      train_records: the train split's :class:`~openvivqa_jax.data.pipeline.Record` s; needed only when
        the file does not exist yet.

    Raises:
      FileNotFoundError: the file does not exist and no ``train_records`` were given.
    """
    path = os.path.join(workdir, "spm.model")
    if exists_on_process_0(path):
        return Tokenizer(path)
    if train_records is None:
        raise FileNotFoundError(f"{path} does not exist and no train split was given to train it")
    sents = []
    for r in train_records:
        sents.append(r.question)
        sents.extend(r.answers)
        if r.ocr_texts:
            sents.append(" ".join(r.ocr_texts))
    if jax.process_index() == 0:
        train_sentencepiece(sents, path, cfg.tokenizer.vocab_size,
                            model_type=cfg.tokenizer.get("model_type", "bpe"))
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices("spm_trained")
    return Tokenizer(path)


def load_answer_list(cfg, workdir: str, train_records_fn: Callable[[], Iterable] | None = None) -> AnswerList:
    """Loads ``<workdir>/answers.json`` or builds the top-``model.num_answers`` list from the train split
    (never dev/test) and writes it; sets ``cfg.model.num_answers`` to the list's length.

    Args:
      cfg: the experiment config (changed in place: ``model.num_answers``).
      workdir: the run folder.
      train_records_fn: returns the train split's records; called only when the file does not exist yet.

    Raises:
      FileNotFoundError: the file does not exist and no ``train_records_fn`` was given.
    """
    path = os.path.join(workdir, "answers.json")
    if exists_on_process_0(path):
        alist = AnswerList.load(path)
    else:
        if train_records_fn is None:
            raise FileNotFoundError(f"{path} does not exist and no train split was given to build it")
        answers = [a for r in train_records_fn() for a in r.answers]
        alist = AnswerList.build(answers, int(cfg.model.num_answers))
        if jax.process_index() == 0:
            alist.save(path)
    with cfg.unlocked():
        cfg.model.num_answers = len(alist)
    return alist


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What turns records into model inputs and decoded ids into answers, for one run.

    Attributes:
      tokenizer: the run's SentencePiece model (``V`` pieces).
      answer_list: the classifiers' answers (None for generators).
      vocab: ids ``(steps,)`` over ``V + N`` -> answer text (pieces or copied OCR slots).
      pre: the :class:`~openvivqa_jax.data.pipeline.Preprocessor` with OCR tokens.
      pre_no_ocr: the same with OCR tokens masked out (the OCR ablation).
      counter: the counts of truncated / skipped inputs both preprocessors share.
    """

    tokenizer: Tokenizer
    answer_list: AnswerList | None
    vocab: AnswerVocab
    pre: pipeline.Preprocessor
    pre_no_ocr: pipeline.Preprocessor
    counter: pipeline.SkipCounter


def make_inputs(cfg, tokenizer: Tokenizer, answer_list: AnswerList | None, model) -> Inputs:
    """The :class:`Inputs` of ``cfg``'s model.

    Args:
      cfg: the experiment config.
      tokenizer, answer_list: from :func:`load_tokenizer` / :func:`load_answer_list` (None for generators).
      model: the model (concrete or from ``nnx.eval_shape``); its class says whether answers may copy OCR
        tokens (``copies_ocr``) and how many OCR classes it scores (``num_ocr_classes``).
    """
    counter = pipeline.SkipCounter()
    allow_copy = getattr(type(model), "copies_ocr", False)
    kw = dict(counter=counter, allow_copy=allow_copy, answer_list=answer_list,
              num_ocr_classes=getattr(model, "num_ocr_classes", 0))
    vocab = AnswerVocab(tokenizer, cfg.model.num_ocr, cfg.model.max_answer_len, allow_copy=allow_copy)
    return Inputs(tokenizer, answer_list, vocab, pipeline.Preprocessor(cfg, tokenizer, **kw),
                  pipeline.Preprocessor(cfg, tokenizer, mask_ocr=True, **kw), counter)
