"""Answer, and score when it has answers, any SQuAD-form file with a trained span reader: a reading set of another
domain read directly, without building a dataset and without touching the run's own ``eval/`` scores.

::

    python -m openvivqa_jax.reading.predict --workdir runs/viquad_drqa --input other_domain.json \\
        --output runs/viquad_drqa/other_domain [--checkpoint best|checkpoints] [--batch_size 64]

The run is restored from its folder alone (:mod:`openvivqa_jax.reading.train`'s layout): ``config.json``, the
tokenizer file (``words.json`` or ``spm.model``; a pretrained reader's checkpoint folder from the config) and the
parameters of the best dev checkpoint (``--checkpoint checkpoints``: the latest). Every question of the file is
answered as dev and test are (:func:`openvivqa_jax.reading.evals.predict_split`: all windows of its passage, the
best span, cut from the passage as written).

The input is SQuAD v1.1 (or 2.0) JSON, ``{"data": [{"title", "paragraphs": [{"context", "qas": [{"id",
"question", "answers": [{"text", "answer_start"}]}]}]}]}``; questions are normalized as the builder does
(:func:`openvivqa_jax.text.normalize.normalize_text`); answers are optional. Repeated ids follow the builder's
rule (an exact duplicate dropped; the n-th question of an id repeated with another question renamed ``<id>#<n>``;
counted and logged); an empty question or passage, an id repeated with the same question and other answers, or a
file without that structure stops with one ``error:`` line naming the file and the record (exit status 2).

Written to ``--output``: ``predictions.json`` ``{id: answer}`` (the prediction file of SQuAD's
``evaluate-v1.1.py``, also read by ``python -m openvivqa_jax.evaluate``), ``spans.json`` (``{id: {start, end,
score}}``, characters of the passage as written); when questions have answers, ``input_metrics.json`` and
``input_predictions.json`` (EM and F1 by the run's ``eval.text_mode``, ``official`` = SQuAD v1.1's script; the
ViQuAD human protocol over questions with two or more answers) and the table on stdout. Questions without answers
(SQuAD 2.0's ``is_impossible``) are answered and left out of the scores (counted).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from absl import logging

from openvivqa_jax import jsonio, outputs, paths
from openvivqa_jax.cli import run_main
from openvivqa_jax.data import repairs
from openvivqa_jax.errors import UserError
from openvivqa_jax.reading import ReadingError
from openvivqa_jax.text.normalize import normalize_text

__all__ = ["read_squad_file", "load_reader", "predict_file", "main", "PATH_FLAGS"]

#: The path flags (:mod:`openvivqa_jax.paths`), checked before anything is read.
PATH_FLAGS = {"--workdir": paths.INPUT_DIR, "--input": paths.INPUT_FILE, "--output": paths.OUTPUT_DIR}


def _err(path: str, where: str, what: str) -> ReadingError:
    return ReadingError(f"{path}: {where}: {what}")


def read_squad_file(path: str) -> tuple[list[dict], dict]:
    """The questions of a SQuAD-form file (module doc) as the reader's records ``{question_id, question,
    passage, answer_texts}``, in file order, and counts ``{questions, without_answers, repairs}``.

    Repeated ids follow the dataset builder's rule (:class:`openvivqa_jax.data.repairs.RepeatedIds`): an exact
    duplicate is dropped, the n-th question of an id repeated with another question is renamed ``<id>#<n>``
    (as the builder and ``python -m openvivqa_jax.evaluate`` name it), each counted in ``repairs`` and logged.

    Raises:
      ReadingError: the file is not SQuAD JSON, a record lacks its id, question or passage, an answer is not
        ``{"text": str}``, or an id is repeated with the same question and other answers (one line, the file
        and the record).
    """
    data = jsonio.read_json(path, what="--input file", error=ReadingError)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ReadingError(f"{path}: expected {{\"data\": [articles]}} (SQuAD v1.1 form)")
    raw: list[tuple[str, str, object]] = []
    for ai, article in enumerate(data["data"]):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise _err(path, f"data[{ai}]", "an article needs a 'paragraphs' list")
        for pi, para in enumerate(article["paragraphs"]):
            where = f"data[{ai}].paragraphs[{pi}]"
            if not isinstance(para, dict) or not isinstance(para.get("qas"), list):
                raise _err(path, where, "a paragraph needs a 'qas' list")
            passage = para.get("context")
            if not isinstance(passage, str) or not normalize_text(passage):
                raise _err(path, where, "empty or missing 'context' (the passage)")
            raw.extend((f"{where}.qas[{qi}]", passage, qa) for qi, qa in enumerate(para["qas"]))

    def refuse(file, record, message, reason):
        raise _err(str(file), record, message)

    log = repairs.RepairLog(f"reading/{os.path.basename(path)}", refuse)
    ids = repairs.RepeatedIds(log, reserved={str(qa["id"]) for *_, qa in raw
                                             if isinstance(qa, dict) and qa.get("id") is not None})
    records: list[dict] = []
    for where, passage, qa in raw:
        rec = _record(path, where, qa, passage)
        content = {k: v for k, v in qa.items() if k != "id"}
        new_id = ids.resolve(rec["question_id"], [qa.get("question"), passage], content, path=path,
                             record=f"question {rec['question_id']} ({where})")
        if new_id is not None:
            records.append(dict(rec, question_id=new_id))
    log.log_summary()
    counts = {"questions": len(records), "without_answers": sum(not r["answer_texts"] for r in records),
              "repairs": log.totals()}
    return records, counts


def _record(path: str, where: str, qa, passage: str) -> dict:
    """One question's record (:func:`read_squad_file`)."""
    if not isinstance(qa, dict) or qa.get("id") is None:
        raise _err(path, where, f"a question needs an 'id', got {qa!r}"[:300])
    qid = str(qa["id"])
    here = f"{where} (id {qid!r})"
    question = qa.get("question")
    if not isinstance(question, str) or not normalize_text(question):
        raise _err(path, here, f"empty or missing 'question' ({question!r})"[:300])
    answers = [] if qa.get("is_impossible") is True else qa.get("answers") or []
    if not isinstance(answers, list) or not all(isinstance(a, dict) and isinstance(a.get("text"), str)
                                                for a in answers):
        raise _err(path, here, f"'answers' must be a list of {{\"text\": str, ...}}, got {answers!r}"[:300])
    texts = [a["text"] for a in answers if a["text"].strip()]
    return {"question_id": qid, "question": normalize_text(question), "passage": passage, "answer_texts": texts}


def load_reader(workdir: str, which: str = "best"):
    """The trained reader of ``workdir``: ``(cfg, tokenizer, graphdef, params, step)``.

    Raises:
      ReadingError: the folder has no ``config.json``, tokenizer file or checkpoint (one line, what is missing);
      CheckpointMismatchError: the checkpoint does not fit the config's model.
    """
    from flax import nnx

    from openvivqa_jax.reading.data import load_tokenizer, tokenizer_file
    from openvivqa_jax.reading.evals import one_device_abstract
    from openvivqa_jax.reading.model import build_reader
    from openvivqa_jax.training import checkpoints
    from openvivqa_jax.vqa.workdir import load_config

    workdir = os.path.abspath(os.path.expanduser(workdir))
    if not os.path.isfile(os.path.join(workdir, "config.json")):
        raise ReadingError(f"workdir {workdir}: no config.json; is it a reader's run folder?")
    cfg = load_config(workdir)
    if cfg.get("task") != "reading":
        raise ReadingError(f"workdir {workdir}: its config.json is a {cfg.get('task', 'vqa')!r} run, not a reader's")
    name = tokenizer_file(cfg)
    if name is not None and not os.path.exists(os.path.join(workdir, name)):
        raise ReadingError(f"workdir {workdir}: no {name} (the tokenizer); train first")
    tokenizer = load_tokenizer(cfg, workdir, None)
    abstract = nnx.eval_shape(lambda: build_reader(cfg.model, tokenizer.vocab_size, seed=cfg.seed,
                                                   num_chars=getattr(tokenizer, "num_chars", 0)))
    graphdef, params = nnx.split(abstract, nnx.Param)
    try:
        params, step = checkpoints.restore_params(workdir, one_device_abstract(params), which)
    except FileNotFoundError as e:
        raise ReadingError(f"workdir {workdir}: no checkpoint in {which}/ ({e}); train first") from e
    return cfg, tokenizer, graphdef, params, step


#: The files :func:`predict_file` writes into its output folder.
WRITTEN = ("predictions.json", "spans.json", "input_metrics.json", "input_predictions.json")


def _check_written_files(input_path: str, output: str) -> None:
    """Refuses an input file that is one of the files the command would write (``WRITTEN`` in ``output``).

    Raises:
      ReadingError: naming the input and the output file it would be replaced by.
    """
    src = os.path.realpath(input_path)
    for name in WRITTEN:
        target = os.path.join(output, name)
        same = os.path.realpath(target) == src
        if not same and os.path.exists(target):
            same = os.path.samefile(target, input_path)
        if same:
            raise ReadingError(f"--input {input_path}: is the file {target} this command writes; writing the "
                               "output would replace it, so give another --output folder")


def predict_file(workdir: str, input_path: str, output: str, which: str = "best",
                 batch_size: int | None = None) -> dict:
    """Answers (and scores) ``input_path`` with the reader of ``workdir`` into ``output`` (module doc).

    Returns:
      ``{"step", "counts", "metrics"}`` (``metrics`` None when no question has answers).

    Raises:
      ReadingError: the input is one of the files written to ``output``, ``batch_size`` is below 1, or
        :func:`read_squad_file` / :func:`load_reader` refuse the file or the run folder (one line).
    """
    from openvivqa_jax import evaluation
    from openvivqa_jax.reading.evals import predict_split

    _check_written_files(input_path, output)
    if batch_size is not None and batch_size < 1:
        raise ReadingError(f"--batch_size {batch_size}: must be a positive number of windows")
    records, counts = read_squad_file(input_path)
    cfg, tokenizer, graphdef, params, step = load_reader(workdir, which)
    if batch_size:
        cfg.eval.batch_size = int(batch_size)
    logging.info("%s: %d questions (%d without answers), reader of %s at step %d", input_path,
                 counts["questions"], counts["without_answers"], workdir, step)
    preds, spans = predict_split(cfg, graphdef, params, tokenizer, records)
    os.makedirs(output, exist_ok=True)
    outputs.write_json(os.path.join(output, "predictions.json"),
                       {p["question_id"]: p["prediction"] for p in preds}, indent=1)
    outputs.write_json(os.path.join(output, "spans.json"), spans, indent=1)
    scored = [p for p in preds if p["references"]]
    metrics = None
    if scored:
        metrics = evaluation.evaluate_split(scored, output, "input", metrics=tuple(cfg.eval.metrics),
                                            text_mode=cfg.eval.get("text_mode", "openvivqa"))
        metrics["decoding"] = {"method": "best_span", "max_answer_len": int(cfg.model.max_answer_len),
                               "step": int(step), "workdir": os.path.abspath(workdir),
                               "input": os.path.abspath(input_path), "counts": counts}
        outputs.write_json(os.path.join(output, "input_metrics.json"), metrics, indent=2)
    return {"step": int(step), "counts": counts, "metrics": metrics}


def build_parser() -> argparse.ArgumentParser:
    """The command line of the module doc."""
    p = argparse.ArgumentParser(prog="python -m openvivqa_jax.reading.predict", description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True, help="the trained reader's run folder")
    p.add_argument("--input", required=True, help="a SQuAD-form JSON file (answers optional)")
    p.add_argument("--output", required=True, help="folder for predictions.json, spans.json and the scores")
    p.add_argument("--checkpoint", choices=("best", "checkpoints"), default="best",
                   help="the best dev checkpoint (default) or the latest")
    p.add_argument("--batch_size", type=int, default=None, help="windows per forward pass (default: the run's)")
    p.add_argument("--verbose", action="store_true", help="keep the libraries' start-up notices and INFO logs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; exit status 0, 2 for unusable input (one ``error:`` line)."""
    args = build_parser().parse_args(argv)

    def body() -> int:
        paths.check_args(args, PATH_FLAGS)
        from openvivqa_jax import evaluation

        result = predict_file(args.workdir, args.input, args.output, args.checkpoint, args.batch_size)
        c = result["counts"]
        print(f"{c['questions']} questions answered with the reader of {args.workdir} (step {result['step']}); "
              f"predictions in {os.path.join(args.output, 'predictions.json')}")
        if result["metrics"] is None:
            print("no question has answers: nothing scored")
        else:
            if c["without_answers"]:
                print(f"{c['without_answers']} questions without answers answered, not scored")
            print(evaluation.format_table(result["metrics"]))
        return 0

    return run_main(body, verbose=args.verbose, import_tensorflow=True, exit_codes={UserError: 2})


if __name__ == "__main__":
    sys.exit(main())
