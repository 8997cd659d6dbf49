"""CLinRel and CMedRel: annotation-free relevance in a visual feature space
(``papers/cross_lingual_caption_eval.md``, beside WMDRel of :mod:`.wmd`).

A W2VV++ encoder per language (the ``relevance`` task, :mod:`openvivqa_jax.relevance`) projects a sentence into
a visual feature space; ``v(s)`` is that projection.

* **CLinRel** ``= cos(v(hypothesis), v(reference))``, each projected by the encoder of its own language (the
  question's ``language``; no machine translation), the max over the question's references; in [-1, 1], 1 for a
  hypothesis equal to a reference.
* **CMedRel** ``= cos(v(hypothesis), v(x))`` with ``v(x)`` the visual feature of the question's image, in the
  encoder's space (standardized with the train images' statistics); no reference is used; in [-1, 1].

Inputs (:class:`RelevanceInputs`, ``score(..., relevance=...)``): the encoders (``runs/w2vvpp_vi``, or one per
language ``vi=runs/a,en=runs/b``), for CMedRel the image of every question (``image_id`` of the records) and the
image features (a ``.npz`` keyed by image id, :func:`openvivqa_jax.relevance.features.read_feature_file`; by default
the ``image_features.npz`` each encoder's workdir got at training). A model trained on ``question_answer`` pairs
scores ``question + answer`` when the questions are known.

Missing inputs: no encoder given -> both metrics None with a note; no image ids or features -> CMedRel None
with a note. Wrong inputs raise one-line errors: a model of another language than a question's
(:class:`~openvivqa_jax.relevance.RelevanceModelError`), a features file of another width than the
model's space or without a question's image (:class:`~openvivqa_jax.relevance.FeatureFileError`).
An empty hypothesis scores 0 on both (counted).

Arrays: projections ``(n, visual_dim)``; per-question scores ``(n,)`` float64.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from openvivqa_jax import jsonio
from openvivqa_jax.relevance import FeatureFileError, RelevanceModelError
from openvivqa_jax.relevance.features import read_feature_file

__all__ = ["RELEVANCE_METRICS", "RelevanceInputs", "parse_model_spec", "load_models", "image_ids_from_file",
           "clinrel", "cmedrel", "score_relevance"]

#: The metric names.
RELEVANCE_METRICS = ("CLinRel", "CMedRel")

_ENCODERS: dict[str, Any] = {}  # absolute workdir -> loaded encoder (one load per process)


@dataclasses.dataclass
class RelevanceInputs:
    """What CLinRel and CMedRel need besides the predictions and references.

    Attributes:
      models: the encoders: a spec string (:func:`parse_model_spec`), ``{language or None: workdir or
        RelevanceEncoder}``, or None (both metrics None with a note).
      image_features: a features file, ``{image id: (d,)}``, or None (each encoder's ``image_features.npz``).
      image_ids: question id -> image id (CMedRel).
      questions: question id -> question text (models trained on ``question_answer`` pairs).
    """

    models: Any = None
    image_features: Any = None
    image_ids: Mapping[str, str] = dataclasses.field(default_factory=dict)
    questions: Mapping[str, str] = dataclasses.field(default_factory=dict)


def parse_model_spec(spec: str) -> dict[str | None, str]:
    """``"runs/a"`` -> ``{None: "runs/a"}`` (the model's own language); ``"vi=runs/a,en=runs/b"`` ->
    ``{"vi": "runs/a", "en": "runs/b"}``.

    Raises:
      RelevanceModelError: an empty item, a language named twice, or a plain path beside ``lang=path`` items.
    """
    items = [x.strip() for x in str(spec).split(",")]
    if any(not x for x in items):
        raise RelevanceModelError(f"--relevance_model {spec!r}: an empty item (expected PATH or LANG=PATH,...)")
    out: dict[str | None, str] = {}
    for item in items:
        lang, sep, path = item.partition("=")
        key = lang.strip().lower() if sep else None
        path = path.strip() if sep else item
        if key in out or (sep and not key) or not path:
            raise RelevanceModelError(f"--relevance_model {spec!r}: item {item!r} is not LANG=PATH with a language "
                                      "named once")
        out[key] = path
    if None in out and len(out) > 1:
        raise RelevanceModelError(f"--relevance_model {spec!r}: name the language of every model (vi=PATH,en=PATH)")
    return out


def _encoder(path_or_encoder: Any):
    from openvivqa_jax import accelerator
    from openvivqa_jax.relevance.model import load_encoder  # heavy: JAX, Flax and orbax, for a model to load

    if not isinstance(path_or_encoder, (str, os.PathLike)):
        return path_or_encoder
    key = os.path.abspath(os.path.expanduser(str(path_or_encoder)))
    if key not in _ENCODERS:
        if not _ENCODERS:  # the first model this process loads: the log names the backend it runs on
            accelerator.start_backend()
        _ENCODERS[key] = load_encoder(key)
    return _ENCODERS[key]


def load_models(models: Any) -> dict[str, Any]:
    """The encoders by language: each named language must be its model's own.

    Args:
      models: a spec string, or ``{language or None: workdir or encoder}``.

    Returns:
      language -> encoder.

    Raises:
      RelevanceModelError: a workdir without a model, or a model named for another language than its own.
    """
    spec = parse_model_spec(models) if isinstance(models, str) else dict(models)
    out: dict[str, Any] = {}
    for lang, where in spec.items():
        enc = _encoder(where)
        if lang is not None and enc.language != lang:
            raise RelevanceModelError(f"relevance model {enc.workdir} encodes {enc.language!r}, not {lang!r} as "
                                      f"--relevance_model names it")
        out[enc.language] = enc
    return out


def image_ids_from_file(path: str | os.PathLike | None) -> dict[str, str]:
    """Question id -> image id from a JSON predictions or references file that carries them: evaluator records
    (``[{question_id, image_id, ...}]``), the OpenViVQA release (``{"annotations": {qid: {image_id}}}`` or a list
    of ``{id, image_id}``). Other files (or None) give ``{}``."""
    if not path or not str(path).endswith(".json") or not os.path.exists(path):
        return {}
    try:
        data = jsonio.read_json(path, error=ValueError)
    except ValueError:  # unreadable or not JSON: the file's own reader reports it
        return {}
    out: dict[str, str] = {}
    recs: Any = data
    if isinstance(data, dict) and "annotations" in data:
        recs = data["annotations"]
        if isinstance(recs, dict):
            return {str(q): str(a["image_id"]) for q, a in recs.items() if isinstance(a, dict) and "image_id" in a}
    if isinstance(recs, list):
        for r in recs:
            if isinstance(r, dict) and r.get("image_id") is not None:
                qid = r.get("question_id", r.get("id"))
                if qid is not None:
                    out[str(qid)] = str(r["image_id"])
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _texts(enc, answers: Sequence[str], questions: Sequence[str] | None) -> list[str]:
    if enc.pair_text == "question_answer" and questions is not None:
        return [f"{q} {a}" for q, a in zip(questions, answers)]
    return list(answers)


def _encoded_hypotheses(
    encoders: Mapping[str, Any], hyps: Sequence[str], languages: Sequence[str], questions: Sequence[str] | None,
) -> Iterator[tuple[Any, list[int], list[str] | None, np.ndarray]]:
    """Each encoder with the hypotheses of its language: ``(encoder, idx, their questions or None, h)``, ``h``
    ``(len(idx), dim)`` the unit-length projections of ``hyps[idx]``; an encoder whose language no question has
    is passed over."""
    for lang, enc in encoders.items():
        idx = [i for i, x in enumerate(languages) if x == lang]
        if not idx:
            continue
        q = [questions[i] for i in idx] if questions is not None else None
        yield enc, idx, q, _unit(enc.encode(_texts(enc, [hyps[i] for i in idx], q)))


def clinrel(encoders: Mapping[str, Any], hyps: Sequence[str], refs: Sequence[Sequence[str]],
            languages: Sequence[str], questions: Sequence[str] | None = None) -> np.ndarray:
    """CLinRel per question (module doc): ``(n,)`` float64, the max over references of the cosine of the
    projections; 0 for an empty hypothesis.

    Args:
      encoders: language -> encoder; hyps ``(n,)``, refs ``(n, >= 1)``, languages ``(n,)`` (each a key of
        ``encoders``); questions ``(n,)`` or None.
    """
    out = np.zeros(len(hyps), np.float64)
    for enc, idx, q, h in _encoded_hypotheses(encoders, hyps, languages, questions):
        flat, owner = [], []
        for k, i in enumerate(idx):
            for r in refs[i]:
                flat.append(r)
                owner.append(k)
        rq = [q[k] for k in owner] if q is not None else None
        r = _unit(enc.encode(_texts(enc, flat, rq)))
        cos = (h[np.asarray(owner)] * r).sum(-1)
        best = np.full(len(idx), -np.inf)
        np.maximum.at(best, np.asarray(owner), cos)
        out[idx] = best
    out[[i for i, h in enumerate(hyps) if not str(h).strip()]] = 0.0
    return out


def cmedrel(encoders: Mapping[str, Any], hyps: Sequence[str], image_vectors: np.ndarray, languages: Sequence[str],
            questions: Sequence[str] | None = None) -> np.ndarray:
    """CMedRel per question (module doc): ``(n,)`` float64, the cosine of the hypothesis's projection and its
    image's feature ``image_vectors`` ``(n, visual_dim)`` (as stored; standardized here by each encoder); 0 for an
    empty hypothesis."""
    out = np.zeros(len(hyps), np.float64)
    for enc, idx, _, h in _encoded_hypotheses(encoders, hyps, languages, questions):
        v = _unit(enc.visual(np.asarray(image_vectors)[idx]))
        out[idx] = (h * v).sum(-1)
    out[[i for i, h in enumerate(hyps) if not str(h).strip()]] = 0.0
    return out


def _languages(ctx, encoders: Mapping[str, Any]) -> list[str]:
    """Each question's encoder language: its ``language``, or the one model's when it has none."""
    only = next(iter(encoders)) if len(encoders) == 1 else None
    out = []
    for qid, lang in zip(ctx.ids, ctx.languages):
        lang = lang or only or "vi"
        if lang not in encoders:
            have = ", ".join(f"{k} ({e.workdir})" for k, e in encoders.items())
            raise RelevanceModelError(f"question {qid!r} is in {lang!r}, but the relevance model(s) given encode "
                                      f"{have}: pass one per language, e.g. "
                                      f"--relevance_model {lang}=runs/w2vvpp_{lang}")
        out.append(lang)
    return out


def _set(ctx, name: str, values: np.ndarray | None) -> None:
    for g, idx in ctx.groups.items():
        ctx.result[g][name] = None if values is None else float(np.mean(values[idx]))
    if values is not None:
        ctx.per_q[name] = values


def score_relevance(ctx) -> None:
    """Computes the requested CLinRel / CMedRel into ``ctx`` (a :class:`.evaluator.ScoringContext`; inputs in
    ``ctx.options["relevance"]``, a :class:`RelevanceInputs` or None).

    Raises:
      RelevanceModelError, FeatureFileError: wrong inputs (module doc; one line).
    """
    wanted = [m for m in RELEVANCE_METRICS if ctx.wants(m)]
    inputs = ctx.options.get("relevance")
    if inputs is None or not inputs.models:
        for m in wanted:
            _set(ctx, m, None)
        ctx.notes.append(f"{'/'.join(wanted)} unavailable: no relevance model given (--relevance_model, a workdir of "
                         "configs/relevance/w2vvpp.py)")
        return
    encoders = load_models(inputs.models)
    langs = _languages(ctx, encoders)
    questions = None
    if any(e.pair_text == "question_answer" for e in encoders.values()):
        if all(q in inputs.questions for q in ctx.ids):
            questions = [str(inputs.questions[q]) for q in ctx.ids]
        else:
            ctx.notes.append("CLinRel/CMedRel: the relevance model was trained on question + answer, but the "
                             "questions are not known; answers were encoded alone")
    empty = sum(not str(h).strip() for h in ctx.raw_hyps)
    if empty:
        ctx.counts["relevance_empty_hypotheses"] = empty
        ctx.notes.append(f"CLinRel/CMedRel: {empty} empty predictions score 0")
    if ctx.wants("CLinRel"):
        _set(ctx, "CLinRel", clinrel(encoders, ctx.raw_hyps, ctx.raw_refs, langs, questions))
    if not ctx.wants("CMedRel"):
        return
    missing_ids = [q for q in ctx.ids if q not in inputs.image_ids]
    if missing_ids:
        _set(ctx, "CMedRel", None)
        ctx.notes.append(f"CMedRel unavailable: {len(missing_ids)} of {len(ctx.ids)} questions have no image id "
                         f"(e.g. {missing_ids[0]!r}; the records or the references file must carry image_id)")
        return
    width = next(iter(encoders.values())).visual_dim
    feats = inputs.image_features
    source = "--image_features"
    if feats is None:
        owned = [(e.workdir, e.image_features()) for e in encoders.values()]
        owned = [(w, f) for w, f in owned if f is not None]
        if not owned:
            _set(ctx, "CMedRel", None)
            ctx.notes.append("CMedRel unavailable: no image features given (--image_features) and the relevance "
                             "model's workdir has none")
            return
        source, feats = owned[0][0] + "/image_features.npz", owned[0][1]
    elif isinstance(feats, (str, os.PathLike)):
        source, feats = str(feats), read_feature_file(str(feats), width)
    for e in encoders.values():
        d = len(next(iter(feats.values())))
        if e.visual_dim != d:
            raise FeatureFileError(f"image features {source} have width {d}, but relevance model {e.workdir} "
                                   f"projects into a visual space of width {e.visual_dim}")
    vecs = []
    for qid in ctx.ids:
        iid = str(inputs.image_ids[qid])
        if iid not in feats:
            raise FeatureFileError(f"image features {source} have no vector for image {iid!r} (question {qid!r})")
        vecs.append(feats[iid])
    _set(ctx, "CMedRel", cmedrel(encoders, ctx.raw_hyps, np.stack(vecs), langs, questions))
