"""Range checks of experiment config values, run before anything is built.

A value out of range (``--config.tokenizer.vocab_size=100``, ``--config.train.batch_size=0``) would otherwise
fail minutes later, deep in SentencePiece, the optimizer or JAX, with a traceback. :func:`check_config` raises
one :class:`ConfigError` whose one-line message names the field, the value, the allowed range and the flag
that sets it. Only fields present in the config are checked (model families have different fields).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openvivqa_jax.accelerator import PLATFORMS
from openvivqa_jax.errors import ConfigError
from openvivqa_jax.evaluation.evaluator import TEXT_MODES
from openvivqa_jax.evaluation.vqa_accuracy import ANSWER_RULES
from openvivqa_jax.models import DTYPES, MODEL_REGISTRY, OCR_FEATURE_GROUPS
from openvivqa_jax.models.fields import config_files_for, missing_fields
from openvivqa_jax.text.tokenizer import MODEL_TYPES
from openvivqa_jax.vqa import config as vqa_config
from openvivqa_jax.vqa.config import parse_kind_weights
from openvivqa_jax.vqa.run_length import derived_steps

__all__ = ["ConfigError", "check_config", "parse_kind_weights", "MIN_VOCAB_SIZE", "CHOICES"]

#: The smallest ``tokenizer.vocab_size``: the 256 byte-fallback pieces and the 4 specials (pad, unk, bos, eos)
#: of :mod:`openvivqa_jax.text.tokenizer`, plus one learned piece.
MIN_VOCAB_SIZE = 261


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _at_least(lo: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: _int(v) and v >= lo), f"an integer >= {lo}"


_POSITIVE_NUMBER = ((lambda v: _num(v) and v > 0), "a number > 0")
_PROBABILITY = ((lambda v: _num(v) and 0 <= v < 1), "a number in [0, 1)")

#: (dotted field, check, what is allowed).
_RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("tokenizer.vocab_size", *_at_least(MIN_VOCAB_SIZE)),
    ("train.batch_size", *_at_least(1)),
    ("train.log_every_steps", *_at_least(1)),
    ("train.checkpoint_every_steps", *_at_least(1)),
    ("train.eval_every_steps", *_at_least(0)),
    ("train.keep_checkpoints", *_at_least(1)),
    ("train.warmup_steps", *_at_least(0)),
    ("train.grad_accum_steps", *_at_least(1)),
    ("train.patience", *_at_least(0)),
    ("train.lr_scale", *_POSITIVE_NUMBER),
    ("train.learning_rate", *_POSITIVE_NUMBER),
    ("model.d_model", *_at_least(1)),
    ("model.num_heads", *_at_least(1)),
    ("model.ffn_dim", *_at_least(1)),
    ("model.dropout", *_PROBABILITY),
    ("model.max_question_len", *_at_least(1)),
    ("model.max_answer_len", *_at_least(1)),
    ("model.num_ocr", *_at_least(0)),
    ("model.num_decoder_layers", *_at_least(1)),
    ("model.num_fusion_layers", *_at_least(0)),
    ("model.vision.space_to_depth", *_at_least(1)),
    ("model.vision.pixel_features", *_at_least(0)),
    ("model.vision.num_regions", *_at_least(1)),
    ("model.vision.proposal_min_size", *_at_least(1)),
    ("model.vision.proposal_scale", *_POSITIVE_NUMBER),
    ("model.vision.proposal_features", (lambda v: v in ("all", "objects")), "'all' or 'objects'"),
    ("model.visual_glimpses.num", *_at_least(0)),
    ("model.visual_glimpses.hidden_dim", *_at_least(1)),
    ("model.visual_glimpses.max_count", *_at_least(1)),
    ("model.visual_glimpses.count_loss", (lambda v: _num(v) and v >= 0), "a number >= 0"),
    ("model.word_region_loss.weight", (lambda v: _num(v) and v >= 0), "a number >= 0"),
    ("model.counter.weight", (lambda v: _num(v) and v >= 0), "a number >= 0"),
    ("model.counter.hidden_dim", *_at_least(1)),
    ("model.counter.max_count", *_at_least(1)),
    ("model.counter.batch_size", *_at_least(1)),
    ("model.counter.learning_rate", *_POSITIVE_NUMBER),
    ("model.verifier.enabled", (lambda v: isinstance(v, bool)), "True or False"),
    ("model.verifier.hidden_dim", *_at_least(1)),
    ("model.verifier.learning_rate", *_POSITIVE_NUMBER),
    ("model.verifier.proposal_features", (lambda v: v in ("all", "objects")), "'all' or 'objects'"),
    ("model.verifier.ocr_tokens", (lambda v: isinstance(v, bool)), "True or False"),
    ("model.verifier.compare", (lambda v: isinstance(v, bool)), "True or False"),
    ("model.verifier.max_count", *_at_least(1)),
    ("model.verifier.relate", (lambda v: isinstance(v, bool)), "True or False"),
    ("model.verifier.decay_start", (lambda v: _num(v) and 0 <= v <= 1), "a number in [0, 1] (1: a constant rate)"),
    ("model.counter.proposal_features", (lambda v: v in ("all", "objects")), "'all' or 'objects'"),
    ("model.word_region_loss.temperature", *_POSITIVE_NUMBER),
    ("model.word_region_loss.sharpness", *_POSITIVE_NUMBER),
    ("model.word_region_loss.max_words", (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
     "an integer >= 0 (0: every question token)"),
    ("data.max_ocr_pieces", *_at_least(1)),
    ("data.num_threads", *_at_least(0)),
    ("data.prefetch", *_at_least(0)),
    ("data.image_cache_size", *_at_least(0)),
    ("data.preprocess_workers", *_at_least(0)),
    ("eval.batch_size", *_at_least(1)),
    ("eval.beam_size", *_at_least(1)),
    ("eval.max_eval_examples", *_at_least(0)),
)


#: (dotted field, allowed values) for fields that name a choice; a typo would otherwise fail only when the
#: value is first used (``model.name`` after the dataset and tokenizer are built, ``eval.answer_rules`` at the
#: first evaluation, after training).
CHOICES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model.name", tuple(MODEL_REGISTRY)),
    ("model.dtype", DTYPES),
    ("tokenizer.model_type", MODEL_TYPES),
    ("eval.answer_rules", ANSWER_RULES),
    ("eval.text_mode", TEXT_MODES),
    ("eval.decoding", ("greedy", "beam")),
    ("eval.select_decoding", ("", "greedy", "beam")),
    ("model.attention_impl", ("xla", "cudnn")),
    ("train.dropout_prng", ("threefry2x32", "rbg", "unsafe_rbg")),
    ("model.question_embedding", ("learned", "fasttext")),
    ("model.text_encoder.kind", ("learned", "bert")),
    ("model.vision.kind", ("cnn", "vit", "region", "proposals")),
    ("platform", PLATFORMS),
)


def _get(cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        if node is None or not hasattr(node, "get") or part not in node:
            return _MISSING
        node = node.get(part)
    return node


_MISSING = object()


def _fail(field: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"config value {field}={value!r} is out of range: must be {allowed} "
                      f"(set it with --config.{field}=...)")


def _check_model_fields(cfg) -> None:
    """Raises a :class:`ConfigError` when ``config.model`` lacks fields its model's constructor reads
    (:func:`openvivqa_jax.models.fields.missing_fields`: a config made for another model), naming them and the
    shipped configs made for the model."""
    model = _get(cfg, "model")
    if model is _MISSING or model is None:
        return
    missing = missing_fields(model)
    if not missing:
        return
    name = model.get("name")
    builder = _get(cfg, "data.builder")
    starts = config_files_for(name, builder if isinstance(builder, str) else None)
    hint = (f"start from {starts[0]}, which has them" + (f" (or {', '.join(starts[1:])})" if starts[1:] else "")
            if starts else f"start from a config made for {name}")
    raise ConfigError(f"config value model.name={name!r} needs model fields this config does not have: "
                      f"{', '.join('model.' + f for f in missing)} (the config was made for another model); {hint}")


def _check_steps(cfg) -> None:
    """``train.num_train_steps`` >= 1, or 0 with a valid ``train.steps_from_data`` rule: ConfigError before any
    dataset is built (the rule is applied only once the training split is read)."""
    steps = _get(cfg, "train.num_train_steps")
    rule = _get(cfg, "train.steps_from_data")
    derived = rule not in (_MISSING, None)
    if steps is not _MISSING and not (_int(steps) and (steps >= 1 or (steps == 0 and derived))):
        _fail("train.num_train_steps", steps, "an integer >= 1" + (", or 0 (derived from the data: "
                                                                   "train.steps_from_data)" if derived else ""))
    if steps == 0 and derived:
        try:
            epochs, low, high = float(rule.epochs), int(rule.min_steps), int(rule.max_steps)
        except (AttributeError, TypeError, ValueError) as e:
            raise ConfigError(f"config value train.steps_from_data must hold numbers epochs, min_steps and "
                              f"max_steps: {e}") from None
        derived_steps(1, 1, epochs=epochs, min_steps=low, max_steps=high)  # its range check, ConfigError


def _check_verifier(cfg, name, kind) -> None:
    """The region verifier scores the regions of MLPAG's image: ConfigError on another model or vision."""
    if _get(cfg, "model.verifier.enabled") is True and (name not in ("mlpag", _MISSING)
                                                        or kind not in ("proposals", "region", _MISSING)):
        raise ConfigError(f"config value model.verifier.enabled=True scores the regions of MLPAG's image, and the "
                          f"config has model.name={name!r}, model.vision.kind={kind!r} (use mlpag with "
                          "--config.model.vision.kind=proposals, which makes regions from the pixels, or region; or "
                          "--config.model.verifier.enabled=False)")


def check_config(cfg) -> None:
    """Checks the ranges of the config's values (module doc).

    Args:
      cfg: the experiment ``ml_collections.ConfigDict``.

    Raises:
      ConfigError: the first value out of range (one line: field, value, allowed range, flag), or a choice
        field (:data:`CHOICES`) with a value it does not know, a ``config.model`` without the fields its model
        reads (a config made for another model), or a ``model.ocr_features`` group that is not one of
        :data:`openvivqa_jax.models.OCR_FEATURE_GROUPS`; also
        ``model.d_model`` not divisible by ``model.num_heads``, ``model.word_region_loss.weight`` > 0 without
        ``model.question_over_image``, a ``data.image_size`` that is not two
        integers >= 8, or a ``data.train_kind_weights`` that :func:`parse_kind_weights` refuses.
    """
    for field, ok, allowed in _RULES:
        value = _get(cfg, field)
        if value is _MISSING or value is None:
            continue
        if not ok(value):
            _fail(field, value, allowed)
    answering = _get(cfg, "task") in (_MISSING, None, "", "vqa")
    for field, allowed_values in CHOICES:
        value = _get(cfg, field)
        if value is _MISSING or value is None or value == "":
            continue
        if field == "model.name" and not answering:  # other tasks name their own models
            continue
        if field == "tokenizer.model_type" and value == "words" and _get(cfg, "task") == "reading":
            continue  # the span reader's syllable vocabulary (openvivqa_jax/reading/vocab.py)
        if value not in allowed_values:
            _fail(field, value, "one of " + ", ".join(repr(v) for v in allowed_values))
    if answering:
        _check_model_fields(cfg)
        vqa_config.plan(cfg)  # the evaluations after training: kinds, fields and references
    _check_steps(cfg)
    groups = _get(cfg, "model.ocr_features")
    if isinstance(groups, (tuple, list)) and set(groups) - set(OCR_FEATURE_GROUPS):
        _fail("model.ocr_features", tuple(groups), "a tuple of " + ", ".join(repr(v) for v in OCR_FEATURE_GROUPS))
    weights = _get(cfg, "data.train_kind_weights")
    if weights is not _MISSING and weights:
        parse_kind_weights(weights)
    d, h = _get(cfg, "model.d_model"), _get(cfg, "model.num_heads")
    if _int(d) and _int(h) and d % h:
        raise ConfigError(f"config value model.d_model={d} is not divisible by model.num_heads={h} (attention "
                          "heads split d_model evenly; set --config.model.d_model or --config.model.num_heads)")
    wr = _get(cfg, "model.word_region_loss.weight")
    if _num(wr) and wr > 0 and _get(cfg, "model.question_over_image") is not True:
        raise ConfigError(f"config value model.word_region_loss.weight={wr} trains the attention of the question over "
                          "the image, which is off (set --config.model.question_over_image=True, or the weight to 0)")
    cl = _get(cfg, "model.visual_glimpses.count_loss")
    if _num(cl) and cl > 0 and not (_int(_get(cfg, "model.visual_glimpses.num"))
                                    and _get(cfg, "model.visual_glimpses.num") >= 1):
        raise ConfigError(f"config value model.visual_glimpses.count_loss={cl} trains the first glimpse's soft count, "
                          "and there are no glimpses (set --config.model.visual_glimpses.num=1 or more, or the "
                          "weight to 0)")
    cw = _get(cfg, "model.counter.weight")
    kind = _get(cfg, "model.vision.kind")
    name = _get(cfg, "model.name")
    if _num(cw) and cw > 0 and name not in ("mlpag", _MISSING):
        raise ConfigError(f"config value model.counter.weight={cw} adds a count token to MLPAG's memory, and "
                          f"model.name={name!r} has no such memory (set --config.model.counter.weight=0)")
    if _num(cw) and cw > 0 and kind not in ("proposals", "region", _MISSING):
        raise ConfigError(f"config value model.counter.weight={cw} counts regions, and model.vision.kind={kind!r} has "
                          "none (set --config.model.vision.kind=proposals, which makes them from the pixels, or the "
                          "weight to 0)")
    _check_verifier(cfg, name, kind)
    size = _get(cfg, "data.image_size")
    if size is not _MISSING and size is not None:
        if not (isinstance(size, (tuple, list)) and len(size) == 2 and all(_int(v) and v >= 8 for v in size)):
            _fail("data.image_size", tuple(size) if isinstance(size, list) else size,
                  "(width, height), two integers >= 8")
