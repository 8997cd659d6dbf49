"""The span reader's evaluation: the best span per question cut from its original passage, scored by the project's
SQuAD EM/F1 (:func:`openvivqa_jax.evaluation.evaluate_split`), the ``eval/`` files written; the periodic dev
scores and the final scoring the train loop (:mod:`openvivqa_jax.reading.train`) calls down into, and
``--mode evaluate`` (:func:`evaluate`).
"""

from __future__ import annotations

import os
import time

import jax
import ml_collections
import numpy as np
from absl import logging
from flax import nnx

from openvivqa_jax import outputs
from openvivqa_jax import evaluation
from openvivqa_jax.reading import ReadingError
from openvivqa_jax.reading import features as feats
from openvivqa_jax.reading.batching import eval_batches
from openvivqa_jax.reading.data import read_split, reader_windows, setup, tokenizer_file
from openvivqa_jax.reading.model import build_reader
from openvivqa_jax.reading.report import comparison_table
from openvivqa_jax.reading.spans import best_spans
from openvivqa_jax.training import checkpoints, interrupts
from openvivqa_jax.training.run_log import write_jsonl

__all__ = ["predict_split", "evaluate_split", "one_device_abstract", "final_evaluation", "evaluate"]


_SPAN_FNS: dict = {}


def _span_fn(graphdef, max_answer_len: int):
    """The jitted ``(params, batch) -> (start, end, score)`` (``(batch,)`` each; :func:`.spans.best_spans`), one
    per model structure, so that the periodic dev evaluations reuse its compiled shapes."""
    key = (graphdef, int(max_answer_len))
    if key in _SPAN_FNS:
        return _SPAN_FNS[key]

    @jax.jit
    def fn(params, batch):
        model = nnx.merge(graphdef, params)
        s, e = model(batch, deterministic=True)
        return best_spans(s, e, batch["passage_mask"], max_answer_len)

    if len(_SPAN_FNS) > 4:
        _SPAN_FNS.clear()
    _SPAN_FNS[key] = fn
    return fn


def predict_split(cfg, graphdef, params, tokenizer, records: list[dict]) -> tuple[list[dict], dict]:
    """Best span per question (the best over its windows) cut from its original passage; the windows are read in
    batches of ``eval.batch_size``, length-bucketed by ``train.bucket_width`` (:func:`.batching.eval_batches`).

    Returns:
      ``(predictions, spans)``: per question ``{question_id, question, prediction, references, qa_type}`` for :func:`openvivqa_jax.evaluation.evaluate_split`, and ``{question_id: {"start", "end",
      "score"}}`` (characters of the passage, span score).
    """
    w = reader_windows(cfg, tokenizer, records, train=False)
    fn = _span_fn(graphdef, int(cfg.model.max_answer_len))
    n = len(w)
    starts, ends, scores = np.zeros(n, np.int64), np.zeros(n, np.int64), np.full(n, -np.inf)
    width = int(cfg.train.get("bucket_width", 0) or 0)
    for idx, length, k in eval_batches(w.lengths(), int(cfg.eval.batch_size), width, int(cfg.model.max_seq_len)):
        s, e, v = jax.device_get(fn(params, w.batch(idx, length)))
        starts[idx[:k]], ends[idx[:k]], scores[idx[:k]] = s[:k], e[:k], v[:k]
    best: dict[int, int] = {}
    for r in range(n):
        ei = int(w.example[r])
        if ei not in best or scores[r] > scores[best[ei]]:
            best[ei] = r
    preds, spans = [], {}
    for ei, rec in enumerate(records):
        r = best.get(ei)
        if r is None or not np.isfinite(scores[r]):
            text, cs, ce, score = "", 0, 0, None
        else:
            off = int(w.offset[r])
            text, cs, ce = feats.span_text(w.passages[ei], int(starts[r]) - off, int(ends[r]) - off)
            score = float(scores[r])
        preds.append({"question_id": rec["question_id"], "question": rec["question"], "prediction": text,
                      "references": rec["answer_texts"], "qa_type": -1})
        spans[rec["question_id"]] = {"start": cs, "end": ce, "score": score}
    return preds, spans


def evaluate_split(cfg, workdir: str, graphdef, params, tokenizer, records: list[dict], tag: str,
                   step: int | None) -> tuple[dict, list[dict]]:
    """Predicts and scores one split; writes ``eval/<tag>_metrics.json``, ``_predictions.json`` and
    ``_spans.json``; logs one line with the time it took. Returns ``(metrics, predictions)``."""
    interrupts.raise_if_received()
    started = time.perf_counter()
    limit = int(cfg.eval.get("max_eval_examples", 0) or 0)
    records = records[:limit] if limit else records
    preds, spans = predict_split(cfg, graphdef, params, tokenizer, records)
    out = os.path.join(workdir, "eval")
    metrics = evaluation.evaluate_split(preds, out, tag, metrics=tuple(cfg.eval.metrics),
                                        text_mode=cfg.eval.get("text_mode", "openvivqa"))
    metrics["decoding"] = {"method": "best_span", "max_answer_len": int(cfg.model.max_answer_len),
                           "step": None if step is None else int(step)}
    outputs.write_json(os.path.join(out, f"{tag}_metrics.json"), metrics, indent=2)
    outputs.write_json(os.path.join(out, f"{tag}_spans.json"), spans, indent=1)
    logging.info("scored %s (%d questions) with the parameters of step %s in %.1f s", tag, len(preds), step,
                 time.perf_counter() - started)
    return metrics, preds


def one_device_abstract(state) -> object:
    """``state`` as ``jax.ShapeDtypeStruct`` s on the first device (the reader is not sharded): the target of
    checkpoint restores."""
    # One device, as a mesh (restore_params places parameters by their sharding's mesh).
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))
    dev = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=dev), state)


def final_evaluation(cfg, workdir, builder, tokenizer, graphdef, abstract_params, fallback=None,
                     scored=None) -> dict:
    """Scores dev and test with the best checkpoint (else ``fallback``, ``(params, step)``, when given); prints
    the tables and example answers. ``scored``: ``(step, metrics, predictions)`` of the dev split from the
    training loop's last evaluation, used as they are when the best checkpoint is that step (the same parameters
    give the same answers; a run whose best step is its last one is not scored on dev twice)."""
    try:
        params, p_step = checkpoints.restore_params(workdir, abstract_params, "best")
    except FileNotFoundError:
        if fallback is None:
            raise
        params, p_step = fallback
    results, lines = {}, []
    for split in dict.fromkeys([cfg.data.eval_split, cfg.data.test_split]):
        if split not in builder.info.splits:
            logging.warning("final evaluation: split %r is not in %s (splits %s); not scored", split, builder.name,
                            sorted(builder.info.splits))
            continue
        if scored is not None and split == cfg.data.eval_split and scored[0] == p_step:
            metrics, preds = scored[1], scored[2]
        else:
            metrics, preds = evaluate_split(cfg, workdir, graphdef, params, tokenizer, read_split(builder, split),
                                            split, p_step)
        results[split] = metrics
        lines.append(f"\n== {split} ({len(preds)} questions, step {p_step}) ==\n{evaluation.format_table(metrics)}")
        write_jsonl(workdir, p_step, "final",
                    {f"{split}/{k}": v for k, v in metrics["overall"].items() if v is not None})
        if split == cfg.data.test_split:
            lines.append(f"\n== example answers ({split}) ==")
            for p in preds[: cfg.eval.num_examples_to_print]:
                lines.append(f"Q: {p['question']}\n   predicted: {p['prediction']}\n   reference: "
                             f"{' | '.join(p['references'])}")
    lines.append(f"\n== {cfg.model.encoder} reader beside ViQuAD's Table 5 (EM/F1 %) ==")
    lines.append(comparison_table(f"this run ({cfg.model.encoder}, step {p_step})", results,
                                  cfg.data.eval_split, cfg.data.test_split))
    print("\n".join(lines), flush=True)
    return results


def evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """``--mode evaluate``: scores dev and test with the workdir's best checkpoint (the files of
    :mod:`openvivqa_jax.reading.train`'s module doc).

    Raises:
      ReadingError: the workdir has no tokenizer or no checkpoint (one line, what is missing).
    """
    workdir = os.path.abspath(os.path.expanduser(workdir))
    name = tokenizer_file(cfg)
    if name is not None and not os.path.exists(os.path.join(workdir, name)):
        raise ReadingError(f"workdir {workdir}: no {name} (the tokenizer); train first")
    builder, tokenizer, _ = setup(cfg, workdir)
    abstract = nnx.eval_shape(lambda: build_reader(cfg.model, tokenizer.vocab_size, seed=cfg.seed,
                                                   num_chars=getattr(tokenizer, "num_chars", 0)))
    graphdef, params = nnx.split(abstract, nnx.Param)
    try:
        return final_evaluation(cfg, workdir, builder, tokenizer, graphdef, one_device_abstract(params))
    except FileNotFoundError as e:
        raise ReadingError(f"workdir {workdir}: no checkpoint in best/ or checkpoints/ ({e}); train first") from e
