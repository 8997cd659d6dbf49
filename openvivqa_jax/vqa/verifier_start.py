"""What the training loop sets once in the region verifier (:mod:`openvivqa_jax.models.verifying`) before the
first step: its input statistics and the answer pieces' polarity. A resumed run restores both from its
checkpoint, where the optimizer has left them as set (:data:`openvivqa_jax.training.state.VERIFIER_STATS`)."""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from openvivqa_jax.models.comparing import (answer_piece_nothing, answer_piece_numbers, question_piece_roles,
                                           relation_pieces)
from openvivqa_jax.models.verifying import TEXT_REGION_SHARE, answer_piece_polarity, text_region_share
from openvivqa_jax.training.state import TrainState
from openvivqa_jax.vqa.counting_stream import input_statistics, read_features

__all__ = ["set_verifier_inputs"]


def set_verifier_inputs(state: TrainState, batches: Callable[[], dict], tokenizer) -> TrainState:
    """``state`` with ``verifier/input_mean`` and ``verifier/input_std`` (per-feature statistics of the regions
    of 8 training batches drawn by ``batches()``: :func:`openvivqa_jax.vqa.counting_stream.input_statistics`, of
    the features the verifier reads and the box) and
    ``verifier/answer_polarity`` (:func:`openvivqa_jax.models.verifying.answer_piece_polarity` of ``tokenizer``),
    and with ``compare`` ``verifier/split_piece``, ``verifier/reverse_piece``
    (:func:`openvivqa_jax.models.comparing.question_piece_roles`) and ``verifier/answer_number``
    (:func:`openvivqa_jax.models.comparing.answer_piece_numbers`), and with ``relate`` ``verifier/nothing_piece``
    and ``verifier/relation_piece`` (:func:`openvivqa_jax.models.comparing.answer_piece_nothing`,
    :func:`openvivqa_jax.models.comparing.relation_pieces`), each in its parameter's sharding; one log line
    naming the affirming and denying pieces found (and the comparison, number, absence and side pieces), and a
    WARNING when the tokenizer has no whole piece for an affirming or a denying answer word, or, with
    ``compare``, for the split words or a number answer, or, with ``relate``, for a side word, or, with
    ``ocr_tokens``, when the sampled batches hold no OCR token (a folder without ``ocr.json``); with
    ``ocr_tokens``, one line counting the sampled regions it does not score for lying inside an OCR token's box.

    Raises:
      openvivqa_jax.errors.DatasetError: the batches hold no valid region.
    """
    params = state.params
    ocr_tokens: list[int] = []
    text_regions: list[int] = []
    mean, std, n = input_statistics(_counting_ocr_tokens(batches, ocr_tokens, text_regions), 8,
                                    owner="model.verifier: the training questions'",
                                    read_features=read_features(params["verifier"]))
    if "text_weight" in params["verifier"]:
        _report_ocr_tokens(ocr_tokens, text_regions, n)
    polarity = answer_piece_polarity(tokenizer)
    values = {"input_mean": mean, "input_std": std, "answer_polarity": polarity}
    if "split_piece" in params["verifier"]:
        values["split_piece"], values["reverse_piece"] = question_piece_roles(tokenizer)
        # Every number up to 20: the model leaves those above its max_count without a bias.
        values["answer_number"] = answer_piece_numbers(tokenizer, 20).astype("float32")
    if "nothing_piece" in params["verifier"]:
        values["nothing_piece"] = answer_piece_nothing(tokenizer)
        values["relation_piece"] = relation_pieces(tokenizer)
    for name, value in values.items():
        var = params["verifier"][name]
        var[...] = jax.device_put(value, var[...].sharding)

    def named(table, want=None):
        return [tokenizer.id_to_piece(int(i)).lstrip("\u2581")
                for i in ((table != 0) if want is None else (table == want)).nonzero()[0]]

    pieces = {s: named(polarity, s) for s in (1, -1)}
    if "split_piece" in values:
        logging.info("Region verifier, counting and comparing: split pieces %s, ending the second thing %s, "
                     "reversing %s, number answers %s", named(values["split_piece"], 1) or "none",
                     named(values["split_piece"], 2) or "none", named(values["reverse_piece"]) or "none",
                     named(values["answer_number"]) or "none")
        effects = [effect for found, effect in (
            ((values["split_piece"] == 1).any(), "compares no two things (no whole piece for than, and, hơn or và)"),
            (values["answer_number"].any(),
             "counts nothing (no whole piece for a number answer: one, two, một, hai, ...)")) if not found]
        if effects:
            # A small tokenizer splits even frequent words into pieces; the rules read whole-word pieces only.
            logging.warning("Region verifier: it %s; a larger tokenizer.vocab_size keeps such words whole",
                            " and ".join(effects))

    if "nothing_piece" in values:
        # "không" also denies and "phải" also affirms: the tables are read in different places (answers'
        # first pieces, questions' pieces), so one piece may have a role in each.
        logging.info("Region verifier, relating: answers' first pieces saying nothing is there %s; questions' "
                     "side pieces %s",
                     named(values["nothing_piece"]) or "none", named(values["relation_piece"]) or "none")
        if not values["relation_piece"].any():
            logging.warning("Region verifier: no whole piece for a side word (left, right, above, below, trái, "
                            "phải, trên, dưới), so a relation question's thing is scored by all its words and "
                            "its answer 'nothing' is not moved; a larger tokenizer.vocab_size keeps such words "
                            "whole")
    logging.info("Region verifier: input statistics from %d regions of 8 training batches; affirming answer "
                 "pieces %s, denying %s", n, pieces[1] or "none", pieces[-1] or "none")
    missing = [name for s, name in ((1, "an affirming (yes, có, đúng, ...)"),
                                    (-1, "a denying (no, không, sai, ...)")) if not pieces[s]]
    if missing:
        # Expected on a folder with few yes/no answers: the tokenizer keeps only frequent words whole.
        logging.warning("Region verifier: the tokenizer has no whole piece for %s answer word, so the verifier %s "
                        "(fine where the training answers are seldom yes or no)", " nor ".join(missing),
                        "moves no answer" if len(missing) == 2 else "moves only the pieces listed above")
    return state.replace(params=params)


def _counting_ocr_tokens(batches: Callable[[], dict], counts: list[int],
                         text_regions: list[int]) -> Callable[[], dict]:
    """``batches``, appending to ``counts`` the number of real OCR tokens (``ocr_mask``) of each batch drawn, and
    to ``text_regions`` that of its valid regions that the verifier does not score for lying inside one
    (:meth:`openvivqa_jax.models.verifying.RegionVerifier.scored_regions`)."""

    def draw() -> dict:
        b = batches()
        counts.append(int(np.sum(np.asarray(b["ocr_mask"], bool))) if "ocr_mask" in b else 0)
        inside = 0
        if counts[-1] and "ocr_boxes" in b:
            share = np.asarray(text_region_share(b["region_boxes"], b["ocr_boxes"], b["ocr_mask"]))
            inside = int(np.sum(np.asarray(b["region_mask"], bool) & (share >= TEXT_REGION_SHARE)))
        text_regions.append(inside)
        return b

    return draw


def _report_ocr_tokens(counts: list[int], text_regions: list[int], num_regions: int) -> None:
    """A WARNING when the batches counted by :func:`_counting_ocr_tokens` held no OCR token, and one line
    counting their regions that lie inside one (of ``num_regions`` valid regions)."""
    # Summed over the processes, as num_regions is (each draws its own rows of the global batches).
    inside = int(np.sum(multihost_utils.process_allgather(np.asarray(sum(text_regions), np.int64))))
    logging.info("Region verifier: %d of the %d regions of 8 training batches lie at least %.0f%% inside an OCR "
                 "token's box (letters, the labels they are printed on) and are not scored as things",
                 inside, num_regions, 100 * TEXT_REGION_SHARE)
    if not sum(counts):
        # Nothing fails without OCR tokens: the questions about written words just train on pixels alone.
        logging.warning("Region verifier: it reads OCR tokens (model.verifier.ocr_tokens), but the %d training "
                        "batches sampled hold none, so questions about written words are answered from the pixels "
                        "alone; give the folder an ocr.json, or build it with "
                        "--config.data.builder_config=detector_tesseract", len(counts))
