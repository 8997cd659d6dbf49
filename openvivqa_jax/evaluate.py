"""Command line: score a predictions file against a reference file and print JSON metrics.

Usage::

    python -m openvivqa_jax.evaluate --predictions preds.json --references dev.json \\
        [--metrics BLEU-4,CIDEr,METEOR ...] [--meteor_jar meteor-1.5.jar] [--java /usr/bin/java] \\
        [--vectors vi.vec] [--meteor_timeout 300] [--max_tokens 256] [--per_question] [--table] [--json FILE] \\
        [--answer_rules auto|vietnamese|english] [--text_mode openvivqa|official|pycocoevalcap]
        [--relevance_model runs/w2vvpp_vi | vi=runs/a,en=runs/b] [--image_features feats.npz]

``--relevance_model`` (W2VV++ workdirs of configs/relevance/w2vvpp.py) adds CLinRel and CMedRel to the default
metrics; CMedRel reads each question's ``image_id`` from the predictions or references file and the image
features from ``--image_features`` (``.npz`` keyed by image id) or the model's workdir (docs/relevance.md).

``--text_mode official`` gives each metric its official script's number: pycocoevalcap for BLEU, ROUGE-L, CIDEr
and METEOR (needs Java), the ST-VQA RRC rule for ANLS, EvalAI's TextVQA/ST-VQA rule for VQA-accuracy, SQuAD v1.1's
``evaluate-v1.1.py`` for EM/F1. ``--text_mode openvivqa`` (default) scores the Vietnamese-normalized text (one
tone-mark convention, prices, format characters removed): spellings of one answer count as one, which is what the
OpenViVQA paper's validation step asks of the data; these are not the official numbers. ``--text_mode
pycocoevalcap`` prepares text as the original toolkit does (PTB tokenizer only) for every metric. EVJVQA-F1 and
EVJVQA-BLEU are the challenge scorer's in every mode. The output's ``rules`` (and ``--table``) say which rule each
metric used. ``--answer_rules auto`` uses the official English VQA answer processing for TextVQA/ST-VQA reference
files, the Vietnamese rules otherwise (outside the official mode).

Inputs (see :mod:`openvivqa_jax.evaluation.formats`):

- ``--predictions``: ``{question_id: answer}`` (also the public release's Codalab submission), the
  evaluator's ``<split>_predictions.json`` (records with ``prediction`` and ``references``), or
  ``[{question_id, answer}]``;
- ``--references``: OpenViVQA public (``vlsp2023_*_data.json``) or older list form, ViVQA CSV,
  SQuAD v1.1, TextVQA, ST-VQA, ``{question_id: [answers]}``, or evaluator records. Optional when the
  predictions file carries references.

Output: the :func:`openvivqa_jax.evaluation.score` dict as JSON on stdout (overall, per QA type where
known, counts and notes; EVJVQA-F1 and EVJVQA-BLEU by default when the references carry languages other
than ``vi``, e.g. EVJVQA's ``language`` field; ``by_field``: question count, exact match, CIDEr and the cheap
metrics per QA type, and per ``kind`` and ``language`` where the records carry them), plus ``inputs`` naming
the files and detected formats. ``--table`` prints the plain-text tables on stdout instead (the JSON then goes
only where ``--json FILE`` says, ``-`` for stdout); ``--json FILE`` writes the JSON to a file. METEOR, which
runs a Java scorer for 10-20 s, says on stderr when it starts and how long it took.

Partial submissions: a reference question without a prediction counts as an EMPTY answer by default
(``--missing empty``), as a leaderboard (Codalab, EVJVQA) scores every reference question, so a file answering 2 of 7
questions cannot score as a perfect one. The scores of the answered questions alone are kept beside, under
``answered_subset`` (same layout as the main scores), and ``coverage`` gives both counts
(``reference_questions``, ``answered``, ``missing_scored_empty``); ``--table`` prints both tables and counts.
``--missing skip`` scores the answered questions only (the main scores are then the answered subset, named so in
``coverage``).

Exit codes: 0 on success; 2 for unusable input (a path flag naming no file or a folder that cannot be
written, checked before anything is read (:data:`PATH_FLAGS`); unreadable file, invalid JSON, unknown layout,
malformed record, unknown metric: one ``error:`` line on stderr naming the file/record); 1 when no
prediction id is found in the references. Predictions whose ids are missing from the references are
counted (``counts.missing_in_references``) and announced with one ``warning:`` line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from absl import logging

from openvivqa_jax import paths
from openvivqa_jax.cli import print_error, run_main
from openvivqa_jax.errors import UserError
from openvivqa_jax import jsonio
from openvivqa_jax import outputs
from openvivqa_jax.evaluation import evaluator
from openvivqa_jax.evaluation.formats import InputError, fill_renamed, load_predictions, load_references
from openvivqa_jax.evaluation.meteor import DEFAULT_TIMEOUT_S, meteor_progress
from openvivqa_jax.evaluation.relevance import RelevanceInputs, image_ids_from_file
from openvivqa_jax.evaluation.evaluator import TEXT_MODES
from openvivqa_jax.evaluation.sanitize import MAX_TOKENS
from openvivqa_jax.evaluation.vqa_accuracy import ANSWER_RULES

__all__ = ["build_parser", "run", "PATH_FLAGS"]

#: The path flags (:mod:`openvivqa_jax.paths`), checked before anything is read; also ``--relevance_model``
#: (each PATH of ``PATH`` or ``LANG=PATH,...``: an input folder) and ``--json`` (an output file, unless ``-``).
PATH_FLAGS = {"--predictions": paths.INPUT_FILE, "--references": paths.INPUT_FILE, "--meteor_jar": paths.INPUT_FILE,
              "--java": paths.PROGRAM, "--vectors": paths.INPUT_FILE, "--image_features": paths.INPUT_FILE}


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of the command line."""
    p = argparse.ArgumentParser(
        prog="python -m openvivqa_jax.evaluate",
        description="Score open-ended VQA predictions (BLEU, ROUGE-L, CIDEr, METEOR, ANLS, VQA accuracy, EM/F1, WMDRel).",
    )
    p.add_argument("--predictions", required=True, help="predictions JSON file")
    p.add_argument("--references", default=None, help="reference file (JSON or ViVQA CSV); optional for evaluator records")
    p.add_argument(
        "--metrics",
        nargs="+",
        default=None,
        help=f"metric names, space- or comma-separated (default: all but WMDRel; valid: {', '.join(evaluator.ALL_METRICS)}, BLEU, all)",
    )
    p.add_argument("--meteor_jar", default=None, help="Meteor 1.5 jar (default: the one in pycocoevalcap)")
    p.add_argument("--java", default=None, help="Java binary (default: $OPENVIVQA_JAVA or java on PATH)")
    p.add_argument("--meteor_timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds allowed per METEOR mode")
    p.add_argument("--vectors", default=None, help="word2vec text-format vectors for WMDRel")
    p.add_argument("--relevance_model", default=None,
                   help="W2VV++ workdir(s) for CLinRel/CMedRel: PATH (its own language) or LANG=PATH,LANG=PATH")
    p.add_argument("--image_features", default=None,
                   help="CMedRel: image features .npz keyed by image id (default: the relevance model's own)")
    p.add_argument("--max_tokens", type=int, default=MAX_TOKENS, help="tokens kept per string (longer are capped)")
    p.add_argument("--per_question", action="store_true", help="include every question's scores")
    p.add_argument("--table", action="store_true",
                   help="print the plain-text tables on stdout instead of the JSON (which --json FILE still writes)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="also write the JSON result to FILE ('-': stdout; the default without --table)")
    p.add_argument("--verbose", action="store_true", help="log every note to stderr too (absl logging)")
    p.add_argument(
        "--missing",
        choices=("empty", "skip"),
        default="empty",
        help="reference questions without a prediction: 'empty' (default, as leaderboards score a submission: "
        "each counts as an empty answer; the answered subset's scores are reported beside) or 'skip' (score the "
        "answered questions only)",
    )
    p.add_argument(
        "--answer_rules",
        choices=("auto", *ANSWER_RULES),
        default="auto",
        help="VQA-accuracy answer processing: 'english' (official VQA rules: punctuation, number words, articles, "
        "contractions), 'vietnamese' (the Vietnamese normalizer); 'auto': english for TextVQA/ST-VQA references",
    )
    p.add_argument(
        "--text_mode",
        choices=TEXT_MODES,
        default="openvivqa",
        help="'official': each metric by its official script (pycocoevalcap, ST-VQA RRC, EvalAI, SQuAD v1.1); "
        "'openvivqa': Vietnamese-normalized scores (one tone-mark convention, prices, ...), not the official numbers; "
        "'pycocoevalcap': the original toolkit's PTB tokenization for every metric (needs Java). EVJVQA-F1/BLEU are "
        "the challenge scorer's in every mode",
    )
    return p


def _answer_rules(choice: str, reference_format: str) -> str:
    """The rules for ``--answer_rules auto``: English for TextVQA/ST-VQA reference files."""
    if choice != "auto":
        return choice
    fmt = reference_format.lower()
    return "english" if any(k in fmt for k in ("textvqa", "st-vqa", "stvqa", "st_vqa")) else "vietnamese"


def _decode_notes(path: str, fmt: str) -> dict:
    """``decode_notes`` of an evaluator predictions file (records written by ``evaluate_split``)."""
    if fmt != "records":
        return {}
    data = jsonio.read_json(path, error=InputError)
    return {str(r["question_id"]): r["decode_notes"] for r in data if isinstance(r, dict) and r.get("decode_notes")}


def _relevance_inputs(args: argparse.Namespace, refs):
    """CLinRel/CMedRel inputs: the models, the features file, image ids from the predictions and references files."""
    if not args.relevance_model:
        return None
    ids = {**image_ids_from_file(args.predictions), **image_ids_from_file(args.references)}
    return RelevanceInputs(models=args.relevance_model, image_features=args.image_features, image_ids=ids,
                           questions=dict(refs.questions))


def _error(message: str) -> None:
    print_error(message)


def run(argv: Sequence[str] | None = None) -> int:
    """Runs the command line (through :func:`openvivqa_jax.cli.run_main`).

    Args:
      argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
      The exit code (0 success, 1 nothing to score, 2 unusable input).
    """
    args = build_parser().parse_args(argv)
    # The notes are in the JSON; stderr keeps to the one-line messages.
    return run_main(lambda: _run(args), verbose=args.verbose, log_level=logging.ERROR, sigterm=False,
                    with_class=False, exit_codes={UserError: 2})


def _run(args: argparse.Namespace) -> int:
    """Loads, checks the ids, scores and reports (the stages below); returns the exit code."""
    models = [m.strip().partition("=")[2].strip() if "=" in m else m.strip()
              for m in (args.relevance_model or "").split(",") if m.strip()]
    paths.check_args(args, PATH_FLAGS, extra=[("--relevance_model", models, paths.INPUT_DIR),
                                              ("--json", None if args.json == "-" else args.json, paths.OUTPUT_FILE)])
    try:
        preds, refs, metrics = _load_inputs(args)
    except (InputError, ValueError) as e:
        _error(e)
        return 2
    ref_path = args.references or args.predictions
    code = _check_ids(args, preds, refs, ref_path)
    if code is not None:
        return code
    answered, unanswered, scored = _fill_missing(args, preds, refs)
    try:
        result = _score(args, preds, refs, metrics, scored)
        subset = _score(args, preds, refs, metrics, answered) if unanswered and args.missing == "empty" else None
    except OSError as e:
        _error(f"cannot read vectors file {args.vectors!r}: {e.strerror or e}")
        return 2
    except (TypeError, ValueError) as e:
        _error(e)
        return 2
    result["coverage"] = _coverage(args, refs, answered, unanswered)
    if subset is not None:
        result["answered_subset"] = {k: subset[k] for k in ("overall", *evaluator.GROUPS, "num_questions")
                                     if k in subset}
    result["inputs"] = {
        "predictions": args.predictions,
        "predictions_format": preds.format,
        "references": ref_path,
        "references_format": refs.format,
    }
    if not _write_json(result, args.json or (None if args.table else "-")):
        return 2
    if args.table:
        _print_tables(result, subset, len(answered))
    return 0


def _load_inputs(args: argparse.Namespace):
    """``(predictions, references, metrics)``: the two files read and the metric names resolved.

    Raises:
      InputError, ValueError: an unknown metric name (checked before any file is read), an unusable file, or a
        predictions file without references when ``--references`` is not given.
    """
    evaluator.resolve_metrics(args.metrics, have_vectors=args.vectors is not None)  # unknown names first
    preds = load_predictions(args.predictions)
    if args.references is not None:
        refs = load_references(args.references)
    elif preds.references is not None:
        refs = preds.references
    else:
        raise InputError(
            f"predictions file {args.predictions!r} has no references; pass --references"
        )
    _note_repairs(preds, refs)
    languages = refs.fields.get("language", {})
    metrics = evaluator.resolve_metrics(
        args.metrics, have_vectors=args.vectors is not None,
        multilingual=any(v != "vi" for v in languages.values()))
    if args.metrics is None and args.relevance_model:
        metrics = evaluator.resolve_metrics([*metrics, "CLinRel", "CMedRel"])
    return preds, refs, metrics


def _note_repairs(preds, refs) -> None:
    """One stderr line per repair kind made in reading the references file (repeated ids renamed ``<id>#<n>``,
    exact duplicates dropped: :mod:`openvivqa_jax.data.repairs`), and the renamed questions given their original
    id's prediction (:func:`~openvivqa_jax.evaluation.formats.fill_renamed`), counted in one more line."""
    from openvivqa_jax.data.repairs import KINDS
    for kind, entry in refs.repairs.items():
        first = ", ".join(entry["first"]) + (", ..." if entry["count"] > len(entry["first"]) else "")
        print(f"note: references file {refs.path!r}: {entry['count']} x {KINDS[kind]} ({first})", file=sys.stderr)
    if refs.renamed:
        preds.predictions, filled = fill_renamed(preds.predictions, refs)
        if filled:
            print(f"note: {len(filled)} renamed questions have no prediction of their own and are scored with the "
                  "prediction of their id as in the file, as SQuAD's evaluate-v1.1.py does", file=sys.stderr)


def _check_ids(args: argparse.Namespace, preds, refs, ref_path: str) -> int | None:
    """Exit code 1 (with its error line) when no prediction id is in the references; else None, after one
    warning line when some are not."""
    missing = [q for q in preds.predictions if q not in refs.answers]
    if preds.predictions and len(missing) == len(preds.predictions):
        _error(
            f"none of the {len(missing)} prediction ids in {args.predictions!r} is in references file "
            f"{ref_path!r} (e.g. {missing[0]!r})"
        )
        return 1
    if missing:
        shown = ", ".join(repr(q) for q in missing[:5]) + (", ..." if len(missing) > 5 else "")
        print(
            f"warning: {len(missing)} of {len(preds.predictions)} prediction ids are missing in references file "
            f"{ref_path!r} ({shown}); they are not scored",
            file=sys.stderr,
        )
    return None


def _fill_missing(args: argparse.Namespace, preds, refs) -> tuple[dict, list, dict]:
    """``(answered, unanswered, scored)``: the predictions of reference questions, the reference questions
    without one, and the predictions to score (with ``--missing empty`` the unanswered as empty answers, announced
    by one warning line)."""
    answered = {q: v for q, v in preds.predictions.items() if q in refs.answers}
    unanswered = [q for q in refs.answers if q not in preds.predictions]
    scored = dict(preds.predictions)
    if unanswered and args.missing == "empty":
        scored.update({q: "" for q in unanswered})
        print(f"warning: {len(unanswered)} of {len(refs.answers)} reference questions have no prediction in "
              f"{args.predictions!r}; they are scored as empty answers (the answered subset's scores are under "
              "'answered_subset'; --missing skip scores the answered questions only)", file=sys.stderr)
    return answered, unanswered, scored


def _score(args: argparse.Namespace, preds, refs, metrics, predictions: dict) -> dict:
    """:func:`openvivqa_jax.evaluation.evaluator.score` of ``predictions`` with the command line's settings
    (METEOR's start and time said on stderr)."""
    with meteor_progress(sys.stderr):
        return evaluator.score(
            predictions,
            refs.answers,
            refs.qa_types,
            metrics,
            java=args.java,
            meteor_jar=args.meteor_jar,
            meteor_timeout=args.meteor_timeout,
            vectors=args.vectors,
            max_tokens=args.max_tokens,
            per_question=args.per_question,
            fields=refs.fields,
            answer_rules=_answer_rules(args.answer_rules, refs.format),
            text_mode=args.text_mode,
            decode_notes=_decode_notes(args.predictions, preds.format),
            relevance=_relevance_inputs(args, refs),
        )


def _coverage(args: argparse.Namespace, refs, answered: dict, unanswered: list) -> dict:
    """The result's ``coverage``: how many reference questions were answered and how the others were scored."""
    return {
        "reference_questions": len(refs.answers),
        "answered": len(answered),
        "missing_scored_empty": len(unanswered) if args.missing == "empty" else 0,
        "missing_not_scored": len(unanswered) if args.missing == "skip" else 0,
        "scores": "all reference questions (missing answers scored as empty)" if args.missing == "empty"
        else "answered questions only (--missing skip)",
    }


def _write_json(result: dict, json_to: str | None) -> bool:
    """Writes ``result`` as JSON to ``json_to`` (``-``: stdout; None: nowhere; a file through
    :func:`openvivqa_jax.outputs.write_json`); False (after the error line) when the file cannot be written."""
    if json_to == "-":
        json.dump(result, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    elif json_to:
        try:  # written whole, then renamed: a failed write keeps the earlier file
            outputs.write_json(json_to, result, what="--json", indent=2, newline=True)
        except outputs.OutputWriteError as e:
            _error(e)
            return False
    return True


def _print_tables(result: dict, subset: dict | None, num_answered: int) -> None:
    """``--table``: the scores' table and the coverage line on stdout, then the answered subset's table if any."""
    print(evaluator.format_table(result))
    print(_coverage_line(result["coverage"]))
    if subset is not None:
        print(f"answered subset only ({num_answered} questions):")
        print(evaluator.format_table(result["answered_subset"]))


def _coverage_line(coverage: dict) -> str:
    """One table line with both counts of :func:`run`'s ``coverage``."""
    n, k = coverage["reference_questions"], coverage["answered"]
    if coverage["missing_scored_empty"]:
        return (f"coverage: {n} reference questions, {k} answered, {coverage['missing_scored_empty']} missing "
                "(scored as empty answers)")
    if coverage["missing_not_scored"]:
        return (f"coverage: {n} reference questions, {k} answered, {coverage['missing_not_scored']} missing "
                "(not scored: --missing skip)")
    return f"coverage: {n} reference questions, all answered"


if __name__ == "__main__":
    sys.exit(run())
