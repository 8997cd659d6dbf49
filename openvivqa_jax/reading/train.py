"""Training and evaluation of the span reader (config ``task = "reading"``, dispatched by
:data:`openvivqa_jax.main.TASKS`): ``python -m openvivqa_jax.main --config configs/viquad/reader.py --workdir DIR``.

The run folder is laid out as the answer generators' (:mod:`openvivqa_jax.train`): ``config.json``,
``spm.model`` (SentencePiece, trained on the train split's normalized passages and questions when absent),
orbax checkpoints in ``checkpoints/<step>/`` (items ``state`` = :class:`~openvivqa_jax.train.TrainState` and
``data_iter`` = the epoch and position of the shuffled window stream, so a killed run resumes where it
stopped) and ``best/<step>/`` (the best dev ``train.best_metric``), TensorBoard event files and
``metrics.jsonl`` (clu), and per evaluated split ``eval/<split>_metrics.json`` (EM, F1 and the ViQuAD
human-performance protocol, :func:`openvivqa_jax.evaluation.evaluate_split`), ``eval/<split>_predictions.json``
and ``eval/<split>_spans.json`` (each prediction's characters ``[start, end)`` in its original passage and its
span score).

Predictions are cut from the original passage by character offsets (:mod:`.features`), then scored by the
project's SQuAD EM/F1 (:mod:`openvivqa_jax.evaluation.squad`) against the answers as written.

One device: the reader is small; the batch is not sharded.

Ctrl-C / SIGTERM save the current step and stop with one line (:mod:`openvivqa_jax.interrupts`).
"""

from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl import logging
from flax import nnx

from openvivqa_jax import checkpoints, evaluation, inference, interrupts
from openvivqa_jax.config_check import ConfigError
from openvivqa_jax.reading import ReadingError
from openvivqa_jax.reading import features as feats
from openvivqa_jax.reading.model import build_reader, span_loss
from openvivqa_jax.reading.spans import best_spans
from openvivqa_jax.run_log import JsonlWriter, MeanAccumulator
from openvivqa_jax.text.tokenizer import Tokenizer, train_sentencepiece
from openvivqa_jax.train import TrainState, checkpoint_managers, make_optimizer

__all__ = ["check_reading_config", "read_split", "load_tokenizer", "predict_split", "evaluate_split",
           "train_and_evaluate", "evaluate"]

_EVAL_METRICS = ("EM", "F1")


def check_reading_config(cfg) -> None:
    """Checks the reading fields :func:`openvivqa_jax.config_check.check_config` does not know.

    Raises:
      ConfigError: ``model.max_seq_len`` too small for the question and 3 special pieces, ``model.doc_stride``
        or ``model.num_layers`` < 1, ``train.best_metric`` not EM/F1, ``model.encoder`` unknown (one line, the
        field and the flag).
    """
    from openvivqa_jax.reading.model import ENCODERS

    m = cfg.model
    checks = (
        ("model.num_layers", m.num_layers, isinstance(m.num_layers, int) and m.num_layers >= 1, "an integer >= 1"),
        ("model.doc_stride", m.doc_stride, isinstance(m.doc_stride, int) and m.doc_stride >= 1, "an integer >= 1"),
        ("model.max_seq_len", m.max_seq_len, isinstance(m.max_seq_len, int) and m.max_seq_len >= m.max_question_len + 4,
         f"an integer >= model.max_question_len + 4 = {m.max_question_len + 4} (the question, 3 special pieces "
         "and one passage piece)"),
        ("train.best_metric", cfg.train.best_metric, cfg.train.best_metric in _EVAL_METRICS, "'EM' or 'F1'"),
        ("model.encoder", m.encoder, m.encoder in ENCODERS, "one of " + ", ".join(repr(k) for k in ENCODERS)),
    )
    for field, value, ok, allowed in checks:
        if not ok:
            raise ConfigError(f"config value {field}={value!r} is out of range: must be {allowed} "
                              f"(set it with --config.{field}=...)")


def _text(v) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def read_split(builder, split: str) -> list[dict]:
    """The questions of ``split`` as ``{question_id, question, passage, answer_texts, answer_starts,
    answer_ends}`` (strings decoded, offsets as ints), in the split's order.

    Raises:
      DatasetError: the split is not in the built dataset, or the dataset has no ``passage`` (built before the
        span fields existed: rebuild it).
    """
    from openvivqa_jax.data.pipeline import DatasetError, load_source

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


def load_tokenizer(cfg, workdir: str, train_records: list[dict] | None) -> Tokenizer:
    """``<workdir>/spm.model``, trained first on the train split's normalized passages and questions when
    absent (the train split only, as the answer generators' tokenizer)."""
    from openvivqa_jax.text.normalize import normalize_text

    path = os.path.join(workdir, "spm.model")
    if os.path.exists(path):
        return Tokenizer(path)
    passages = dict.fromkeys(r["passage"] for r in train_records)
    sentences = [normalize_text(p) for p in passages] + [r["question"] for r in train_records]
    return train_sentencepiece(sentences, path, cfg.tokenizer.vocab_size, model_type=cfg.tokenizer.model_type)


def _windows(cfg, tokenizer, records, train: bool) -> feats.Windows:
    m = cfg.model
    return feats.make_windows(tokenizer, records, max_seq_len=m.max_seq_len, max_question_len=m.max_question_len,
                              doc_stride=m.doc_stride, train=train)


def _span_fn(graphdef, max_answer_len: int):
    """The jitted ``(params, batch) -> (start, end, score)`` (``(batch,)`` each; :func:`.spans.best_spans`)."""

    @jax.jit
    def fn(params, batch):
        model = nnx.merge(graphdef, params)
        s, e = model(batch, deterministic=True)
        return best_spans(s, e, batch["passage_mask"], max_answer_len)

    return fn


def predict_split(cfg, graphdef, params, tokenizer, records: list[dict]) -> tuple[list[dict], dict]:
    """Best span per question (the best over its windows) cut from its original passage.

    Returns:
      ``(predictions, spans)``: per question ``{question_id, question, prediction, references, qa_type}`` for :func:`openvivqa_jax.evaluation.evaluate_split`, and ``{question_id: {"start", "end",
      "score"}}`` (characters of the passage, span score).
    """
    w = _windows(cfg, tokenizer, records, train=False)
    fn = _span_fn(graphdef, int(cfg.model.max_answer_len))
    bs = int(cfg.eval.batch_size)
    n = len(w)
    starts, ends, scores = np.zeros(n, np.int64), np.zeros(n, np.int64), np.full(n, -np.inf)
    for b0 in range(0, n, bs):
        idx = np.arange(b0, b0 + bs) % max(n, 1)  # the last batch padded with repeats: one compiled shape
        s, e, v = jax.device_get(fn(params, w.batch(idx)))
        k = min(bs, n - b0)
        starts[b0:b0 + k], ends[b0:b0 + k], scores[b0:b0 + k] = s[:k], e[:k], v[:k]
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
    ``_spans.json``. Returns ``(metrics, predictions)``."""
    interrupts.raise_if_received()
    limit = int(cfg.eval.get("max_eval_examples", 0) or 0)
    records = records[:limit] if limit else records
    preds, spans = predict_split(cfg, graphdef, params, tokenizer, records)
    out = os.path.join(workdir, "eval")
    metrics = evaluation.evaluate_split(preds, out, tag, metrics=tuple(cfg.eval.metrics))
    metrics["decoding"] = {"method": "best_span", "max_answer_len": int(cfg.model.max_answer_len),
                           "step": None if step is None else int(step)}
    with open(os.path.join(out, f"{tag}_metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, ensure_ascii=False, indent=2)
    with open(os.path.join(out, f"{tag}_spans.json"), "w", encoding="utf-8") as f:
        json.dump(spans, f, ensure_ascii=False, indent=1)
    return metrics, preds


class _Stream:
    """Windows in a fresh random order every epoch (``seed + epoch``); the state is ``{epoch, position}``."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.bs, self.seed = n, batch_size, seed
        self.epoch, self.position = 0, 0
        self._order = None

    def _perm(self) -> np.ndarray:
        if self._order is None:
            self._order = np.random.default_rng(self.seed + self.epoch).permutation(self.n)
        return self._order

    def next(self) -> np.ndarray:
        out = []
        while len(out) < self.bs:
            take = self._perm()[self.position:self.position + self.bs - len(out)]
            out.extend(take.tolist())
            self.position += len(take)
            if self.position >= self.n:
                self.epoch, self.position, self._order = self.epoch + 1, 0, None
        return np.asarray(out)

    def get_state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def set_state(self, state: dict) -> None:
        self.epoch, self.position, self._order = int(state["epoch"]), int(state["position"]), None


def _jsonl(workdir: str, step: int, kind: str, values: dict) -> None:
    JsonlWriter(os.path.join(workdir, "metrics.jsonl")).write(step, kind, values)


def _setup(cfg, workdir: str):
    """The checked config's dataset builder and tokenizer: ``(builder, tokenizer, train_records)``
    (``train_records`` read only when the tokenizer had to be trained, else None)."""
    from openvivqa_jax.data.pipeline import load_builder

    check_reading_config(cfg)
    builder = load_builder(cfg.data)
    train_records = None
    if not os.path.exists(os.path.join(workdir, "spm.model")):
        train_records = read_split(builder, cfg.data.train_split)
    tokenizer = load_tokenizer(cfg, workdir, train_records)
    return builder, tokenizer, train_records


def _abstract(state) -> object:
    # One device, as a mesh (inference.restore_params places parameters by their sharding's mesh).
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))
    dev = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=dev), state)


def _final(cfg, workdir, builder, tokenizer, graphdef, abstract_params, fallback=None) -> dict:
    """Scores dev and test with the best checkpoint; prints the tables and example answers."""
    try:
        params, p_step = inference.restore_params(workdir, abstract_params, "best")
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
        metrics, preds = evaluate_split(cfg, workdir, graphdef, params, tokenizer, read_split(builder, split),
                                        split, p_step)
        results[split] = metrics
        lines.append(f"\n== {split} ({len(preds)} questions, step {p_step}) ==\n{evaluation.format_table(metrics)}")
        _jsonl(workdir, p_step, "final", {f"{split}/{k}": v for k, v in metrics["overall"].items() if v is not None})
        if split == cfg.data.test_split:
            lines.append(f"\n== example answers ({split}) ==")
            for p in preds[: cfg.eval.num_examples_to_print]:
                lines.append(f"Q: {p['question']}\n   predicted: {p['prediction']}\n   reference: "
                             f"{' | '.join(p['references'])}")
    print("\n".join(lines), flush=True)
    return results


def train_and_evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """Trains the reader in ``workdir`` (resuming from its latest checkpoint), evaluates dev every
    ``train.eval_every_steps``, then scores dev and test with the best checkpoint; returns ``{split: metrics}``.

    Raises:
      ConfigError: see :func:`check_reading_config`; DatasetError, DatasetInputError: the data;
      CheckpointMismatchError: the workdir's checkpoint was made with other model sizes.
    """
    from clu import metric_writers, periodic_actions

    workdir = os.path.abspath(os.path.expanduser(workdir))
    os.makedirs(workdir, exist_ok=True)
    builder, tokenizer, train_records = _setup(cfg, workdir)
    windows = _train_windows(cfg, builder, tokenizer, train_records)
    dev_records = read_split(builder, cfg.data.eval_split) if cfg.data.eval_split in builder.info.splits else None

    model = build_reader(cfg.model, tokenizer.vocab_size, seed=cfg.seed)
    graphdef, params = nnx.split(model, nnx.Param)
    del model
    t = cfg.train
    tx, schedule = make_optimizer(t, cfg.model.d_model)
    state = TrainState(jnp.int32(0), params, tx.init(params))
    num_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))
    logging.info("Span reader: %d parameters, %d train windows of %d pieces", num_params, len(windows),
                 cfg.model.max_seq_len)
    latest, best = checkpoint_managers(workdir, t)
    stream = _Stream(len(windows), int(t.batch_size), int(cfg.seed))
    state, start, best_score = _resume(workdir, latest, state, stream)
    with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
        f.write(cfg.to_json_best_effort(indent=2))
    writer = metric_writers.create_default_writer(workdir)
    report = periodic_actions.ReportProgress(num_train_steps=t.num_train_steps, writer=writer,
                                             every_steps=t.log_every_steps)
    train_step = _make_train_step(graphdef, tx, schedule, int(cfg.seed))

    def save(step: int) -> None:
        latest.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data_iter=ocp.args.JsonSave({"iterator": stream.get_state(), "best_score": float(best_score)})))

    acc = MeanAccumulator()
    t0 = time.time()
    step = start
    with interrupts.StopSignals() as signals:
        for step in range(start + 1, t.num_train_steps + 1):
            state, m = train_step(state, windows.batch(stream.next()))
            report(step)
            acc.add(m)
            if step % t.log_every_steps == 0 or step == t.num_train_steps:
                t0 = _log_train_means(cfg, workdir, writer, step, acc, t0)
            if dev_records is not None and t.eval_every_steps and (
                    step % t.eval_every_steps == 0 or step == t.num_train_steps):
                score = _eval_dev(cfg, workdir, writer, graphdef, state.params, tokenizer, dev_records, step)
                best.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)), metrics={"score": score})
                best_score = max(best_score, score)
            if step % t.checkpoint_every_steps == 0 or step == t.num_train_steps:
                save(step)
            if signals.requested:
                checkpoints.stop_with_checkpoint(signals.requested, step, save, latest, best)
    latest.wait_until_finished()
    best.wait_until_finished()
    writer.flush()
    return _final(cfg, workdir, builder, tokenizer, graphdef, _abstract(state.params),
                  fallback=(state.params, int(jax.device_get(state.step))))


def _train_windows(cfg, builder, tokenizer: Tokenizer, train_records):
    """The training windows of the train split (``train_records``, read here when None), their counts logged.

    Raises:
      DatasetError: no question has its first answer inside a window.
    """
    if train_records is None:
        train_records = read_split(builder, cfg.data.train_split)
    windows = _windows(cfg, tokenizer, train_records, train=True)
    logging.info("train windows: %s", windows.counts)
    if len(windows) == 0:
        from openvivqa_jax.data.pipeline import DatasetError

        raise DatasetError(f"{builder.name}/{cfg.data.train_split}: no question has its first answer inside a "
                           f"window of model.max_seq_len={cfg.model.max_seq_len} pieces ({windows.counts})")
    return windows


def _resume(workdir: str, latest: ocp.CheckpointManager, state: TrainState, stream: _Stream):
    """``(state, start_step, best_score)`` from the latest checkpoint of ``latest``, with ``stream`` moved to
    where that checkpoint's was; ``(state, 0, -inf)`` when there is none.

    Raises:
      CheckpointMismatchError: the checkpoint was made with other model sizes.
    """
    if latest.latest_step() is None:
        return state, 0, -np.inf
    step = latest.latest_step()
    inference.check_checkpoint_fits(os.path.join(str(latest.directory), str(step), "state"), state.params,
                                    os.path.join(workdir, "config.json"))
    restored = latest.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(_abstract(state)), data_iter=ocp.args.JsonRestore()))
    stream.set_state(restored["data_iter"]["iterator"])
    start = int(step)
    logging.info("Resumed from step %d (%s)", start, latest.directory)
    return restored["state"], start, restored["data_iter"].get("best_score", -np.inf)


def _make_train_step(graphdef, tx: optax.GradientTransformation, schedule: optax.Schedule, seed: int):
    """The jitted training step ``(state, batch) -> (state, metrics)``; dropout keys are
    ``fold_in(key(seed), step)``, so a resumed run computes what the uninterrupted one would."""

    @jax.jit
    def train_step(state: TrainState, batch):
        key = jax.random.fold_in(jax.random.key(seed), state.step)

        def loss_fn(p):
            model = nnx.merge(graphdef, p)
            s, e = model(batch, deterministic=False, rngs=nnx.Rngs(dropout=key))
            return span_loss(s, e, batch["start_positions"], batch["end_positions"])

        (_, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        m = dict(m, grad_norm=optax.tree.norm(grads), learning_rate=schedule(state.step))
        return TrainState(state.step + 1, params, opt_state), m

    return train_step


def _log_train_means(cfg, workdir: str, writer, step: int, acc: MeanAccumulator, t0: float) -> float:
    """Writes the training means accumulated since the last log to TensorBoard, ``metrics.jsonl`` and one log
    line (with steps per second since ``t0``); returns the time the next interval starts."""
    t = cfg.train
    vals = acc.pop_means()
    writer.write_scalars(step, {f"train/{k}": v for k, v in vals.items()})
    _jsonl(workdir, step, "train", vals)
    logging.info("step %d/%d loss %.4f start acc %.3f end acc %.3f lr %.2e (%.1f steps/s)", step,
                 t.num_train_steps, vals["loss"], vals["start_accuracy"], vals["end_accuracy"],
                 vals["learning_rate"], t.log_every_steps / max(1e-9, time.time() - t0))
    return time.time()


def _eval_dev(cfg, workdir: str, writer, graphdef, params, tokenizer: Tokenizer, dev_records, step: int) -> float:
    """Scores the dev split with ``params`` (``eval/`` files, TensorBoard, ``metrics.jsonl``, one log line);
    returns its ``train.best_metric`` (0 when missing)."""
    metrics, _ = evaluate_split(cfg, workdir, graphdef, params, tokenizer, dev_records, cfg.data.eval_split, step)
    overall = {k: v for k, v in metrics["overall"].items() if v is not None}
    writer.write_scalars(step, {f"dev/{k}": v for k, v in overall.items()})
    _jsonl(workdir, step, "eval", {f"dev/{k}": v for k, v in overall.items()})
    logging.info("step %d dev: %s", step, {k: round(v, 4) for k, v in overall.items()})
    return float(overall.get(cfg.train.best_metric, 0.0))


def evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """``--mode evaluate``: scores dev and test with the workdir's best checkpoint (module doc's files).

    Raises:
      ReadingError: the workdir has no tokenizer or no checkpoint (one line, what is missing).
    """
    workdir = os.path.abspath(os.path.expanduser(workdir))
    if not os.path.exists(os.path.join(workdir, "spm.model")):
        raise ReadingError(f"workdir {workdir}: no spm.model (the tokenizer); train first")
    builder, tokenizer, _ = _setup(cfg, workdir)
    abstract = nnx.eval_shape(lambda: build_reader(cfg.model, tokenizer.vocab_size, seed=cfg.seed))
    graphdef, params = nnx.split(abstract, nnx.Param)
    try:
        return _final(cfg, workdir, builder, tokenizer, graphdef, _abstract(params))
    except FileNotFoundError as e:
        raise ReadingError(f"workdir {workdir}: no checkpoint in best/ or checkpoints/ ({e}); train first") from e
