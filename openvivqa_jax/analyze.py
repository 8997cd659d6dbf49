"""Command line: analyse a VQA dataset as the OpenViVQA paper's §3 does, and check its guideline.

Usage::

    # a built TFDS dataset, read through the training data source
    python -m openvivqa_jax.analyze --builder synthetic_openvivqa --builder_config default \\
        --data_dir /tmp/tfds --out runs/analysis [--splits train,test] [--prepare]
    # the dataset of an experiment config (its data section; --data_dir etc. override it)
    python -m openvivqa_jax.analyze --config configs/default.py --out runs/analysis
    # release files: OpenViVQA JSON (public or list form), ViVQA CSV, TextVQA / ST-VQA JSON, ...
    python -m openvivqa_jax.analyze --input vlsp2023_train_data.json dev=vlsp2023_dev_data.json \\
        [--ocr_file ocr.json] --out runs/analysis
    # annotator agreement (alone or with a dataset)
    python -m openvivqa_jax.analyze --agreement qa_type_labels.csv --out runs/analysis

``--input`` takes ``FILE`` or ``SPLIT=FILE``; without ``SPLIT=`` the split is named by the file name
(``train``/``dev``/``val``/``test`` keywords, :func:`tfds_builders.readers.split_from_filename`), else the file
stem.

Writes to ``--out``:

* ``analysis.json``: ``source``; ``splits`` (per split) and ``overall``
  (:func:`openvivqa_jax.analysis.stats.statistics`: images, questions, QAs per image, question/answer lengths
  in syllables with the share of answers of 2-10 syllables, Text/Non-text counts, vocabulary sizes, the
  linguistic level of the answers, OCR coverage); ``guideline`` (one entry per rule of
  :mod:`openvivqa_jax.analysis.guideline`, with the violating question ids per split); ``agreement`` (Fleiss'
  kappa and percent agreement, :mod:`openvivqa_jax.analysis.kappa`) when ``--agreement`` is given;
* ``lengths.png``, ``qa_types.png``, ``linguistic_levels.png`` (:mod:`openvivqa_jax.analysis.figures`) unless
  ``--no_figures``.

A plain-text summary goes to stdout.

Exit codes: 0 on success; 2 for unusable input (a path flag that cannot serve, checked before anything is
read (:data:`PATH_FLAGS`); a dataset that is not built or does not exist, a missing or malformed file, an
agreement file with rows of different lengths, an unknown split): one ``error:`` line on stderr naming it; 1
when a split has no question.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence

import ml_collections
from absl import logging

from openvivqa_jax import outputs
from openvivqa_jax import paths
from openvivqa_jax.analysis import guideline, kappa, stats
from openvivqa_jax.analysis.figures import write_figures
from openvivqa_jax.analysis.records import (AnalysisInputError, EmptySplitError, QA, order_splits,
                                            read_reference_file, read_tfds)
from openvivqa_jax.cli import run_main
from openvivqa_jax.config_files import load_config_spec
from openvivqa_jax.data.ocr import load_ocr_file
from openvivqa_jax.errors import ConfigError, UserError

__all__ = ["build_parser", "analyze", "format_summary", "run", "PATH_FLAGS"]

#: The path flags (:mod:`openvivqa_jax.paths`), checked before anything is read; also ``--config`` (the file of
#: ``FILE[:ARG]``) and each FILE of ``--input [SPLIT=]FILE`` (input files).
PATH_FLAGS = {"--data_dir": paths.DATA_DIR, "--manual_dir": paths.INPUT_DIR, "--ocr_file": paths.INPUT_FILE,
              "--agreement": paths.INPUT_FILE, "--out": paths.OUTPUT_DIR}


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of the command line."""
    p = argparse.ArgumentParser(
        prog="python -m openvivqa_jax.analyze",
        description="Dataset statistics (OpenViVQA paper §3), Fleiss' kappa and the annotation guideline check.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--builder", help="TFDS builder of tfds_builders/ (e.g. synthetic_openvivqa, openvivqa, vivqa)")
    src.add_argument("--config", help="experiment config file (configs/*.py[:arg]); its data section names the dataset")
    src.add_argument("--input", nargs="+", metavar="[SPLIT=]FILE",
                     help="release/reference files (JSON or ViVQA CSV), one per split")
    p.add_argument("--builder_config", default=None, help="builder config name (or JSON), as data.builder_config")
    p.add_argument("--data_dir", default=None, help="TFDS data_dir (default: the config's, else ~/tensorflow_datasets)")
    p.add_argument("--manual_dir", default=None, help="TFDS manual_dir (only used with --prepare)")
    p.add_argument("--prepare", action="store_true", help="build the TFDS dataset if it is not built yet")
    p.add_argument("--splits", default=None, help="comma-separated splits of a TFDS dataset (default: all)")
    p.add_argument("--ocr_file", default=None, help="with --input: OCR tokens JSON {image_id: [{text, box, score}]}")
    p.add_argument("--vocab_split", default="train",
                   help="split whose answer words count as known for OCR coverage's new words (default: train; "
                        "a name that is no split, e.g. none: every answer word is new)")
    p.add_argument("--agreement", default=None,
                   help="agreement file: one row per item, one label per annotator (CSV or TSV)")
    p.add_argument("--out", required=True, help="output folder (analysis.json and PNG figures)")
    p.add_argument("--no_figures", action="store_true", help="write analysis.json only")
    p.add_argument("--title", default=None, help="dataset name in the figure titles (default: the builder or files)")
    p.add_argument("--verbose", action="store_true", help="show library logging on stderr")
    return p


def _data_config(args: argparse.Namespace):
    if args.config:
        try:
            cfg = load_config_spec(args.config)
        except (FileNotFoundError, ConfigError) as e:
            raise AnalysisInputError(str(e)) from None
        data = ml_collections.ConfigDict(cfg.data.to_dict())
    else:
        data = ml_collections.ConfigDict({"builder": args.builder, "builder_config": None, "data_dir": None,
                                          "manual_dir": None, "builder_kwargs": {}})
    for key in ("builder_config", "data_dir", "manual_dir"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    return data


def _read_inputs(inputs: Sequence[str], ocr_file: str | None) -> tuple[dict[str, list[QA]], dict]:
    ocr = None
    if ocr_file:
        ocr = load_ocr_file(ocr_file)
    files: dict[str, str] = {}
    for item in inputs:
        if "=" in item and not os.path.exists(item):
            split, path = item.split("=", 1)
        else:
            from tfds_builders.readers import split_from_filename  # heavy: imports TensorFlow Datasets

            path = item
            split = split_from_filename(path) or os.path.splitext(os.path.basename(path))[0]
        if not split:
            raise AnalysisInputError(f"--input {item!r}: empty split name")
        if split in files:
            raise AnalysisInputError(f"--input: split {split!r} is given twice ({files[split]!r} and {path!r}); "
                                     "name the splits with SPLIT=FILE")
        files[split] = path
    data = {split: read_reference_file(path, split, ocr) for split, path in files.items()}
    return {s: data[s] for s in order_splits(list(data))}, {"kind": "files", "files": files, "ocr_file": ocr_file}


def _guideline_json(per_split: Mapping[str, Mapping[str, guideline.RuleResult]]) -> dict:
    out = {}
    for name in guideline.RULES:
        results = {split: rules[name] for split, rules in per_split.items()}
        first = next(iter(results.values()))
        entry = {
            "source": first.source,
            "rule": first.rule,
            "checkable": all(r.checkable for r in results.values()),
            "checked": sum(r.checked for r in results.values()),
            "unit": first.unit,
            "count": sum(r.count for r in results.values()),
            "reasons": {},
            "splits": {},
            "examples": [],
        }
        for split, r in results.items():
            j = r.to_json()
            for k, v in j["reasons"].items():
                entry["reasons"][k] = entry["reasons"].get(k, 0) + v
            entry["splits"][split] = {k: j[k] for k in ("checkable", "checked", "count", "reasons", "question_ids")}
            for k, v in r.extra.items():
                entry["splits"][split][k] = v
                entry[k] = entry.get(k, 0) + v
            if "review" in j:
                entry["splits"][split]["review"] = j["review"]
            if j.get("note"):
                entry["note"] = j["note"]
            entry["examples"] += [{"split": split, **e} for e in j["examples"]][: 5 - len(entry["examples"])]
        out[name] = entry
    return out


def analyze(data: Mapping[str, Sequence[QA]], vocab_split: str | None = "train") -> dict:
    """The statistics and guideline check of a dataset.

    Args:
      data: ``{split: [QA]}``, every split non-empty.
      vocab_split: the split whose answer vocabulary is known for OCR coverage (ignored when absent: then every
        word is new).

    Returns:
      ``{"vocab_split", "splits": {split: statistics}, "overall": statistics, "guideline": {rule: ...}}``.

    Raises:
      EmptySplitError: a split has no QA.
    """
    for split, qas in data.items():
        if not qas:
            raise EmptySplitError(f"split {split!r} has no questions")
    ref = vocab_split if vocab_split in data else None
    known = stats.answer_vocabulary(data[ref]) if ref else set()
    out = {
        "vocab_split": ref,
        "splits": {split: stats.statistics(qas, known, ref) for split, qas in data.items()},
        "overall": stats.statistics([q for qas in data.values() for q in qas], known, ref),
        "guideline": _guideline_json({split: guideline.check(qas) for split, qas in data.items()}),
    }
    return out


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x, fmt="{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def format_summary(result: Mapping) -> str:
    """A plain-text summary of an analysis dict (the splits table, the guideline counts, kappa)."""
    lines = []
    if result.get("splits"):
        header = ("split", "images", "QAs", "QA/img", "text", "non-text", "q len", "a len", "a 2-10", "word",
                  "phrase", "sentence", "vocab", "OCR any", "OCR ceil")
        rows = []
        for name, st in [*result["splits"].items(), ("overall", result["overall"])]:
            cov = st["ocr_coverage"] or {}
            lv = st["linguistic_level"]["shares"]
            rows.append((name, _num(st["images"], "{}"), str(st["questions"]),
                         _num((st["qas_per_image"] or {}).get("mean"), "{:.2f}"),
                         str(st["qa_types"]["text"]), str(st["qa_types"]["non_text"]),
                         _num(st["question_length"]["mean"]), _num(st["answer_length"]["mean"]),
                         _pct(st["answer_length"]["share_2_to_10"]), _pct(lv["word"]), _pct(lv["phrase"]),
                         _pct(lv["sentence"]), str(st["vocabulary"]["all"]), _pct(cov.get("any_word_in_ocr")),
                         _pct(cov.get("ceiling"))))
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
        lines.append("")
        lines.append("guideline (Table 1, §3.2.4): violating QAs")
        for name, g in result["guideline"].items():
            if not g["checkable"] and name == "directions":
                n = sum(len(s.get("review", [])) for s in g["splits"].values())
                lines.append(f"  {name:18s} not checkable from text; {n} QAs use left/right (listed for review)")
            elif not g["checkable"]:
                lines.append(f"  {name:18s} not checked ({g.get('note', '')})")
            else:
                reasons = ", ".join(f"{k} {v}" for k, v in g["reasons"].items())
                if g["unit"] == "images":
                    lines.append(f"  {name:18s} {g['count']:6d}  (on {g.get('images_below_minimum', 0)} of "
                                 f"{g['checked']} images" + (f"; {reasons})" if reasons else ")"))
                else:
                    lines.append(f"  {name:18s} {g['count']:6d} of {g['checked']}"
                                 + (f"  ({reasons})" if reasons else ""))
    if result.get("agreement"):
        a = result["agreement"]
        lines.append("")
        lines.append(f"agreement ({a['file']}): N={a['N']} items, n={a['n']} annotators, k={a['k']} categories "
                     f"{a['categories']}: Fleiss' kappa {_num(a['kappa'], '{:.4f}')}, percent agreement "
                     f"{_pct(a['percent_agreement'])}")
    return "\n".join(lines)


def run(argv: Sequence[str] | None = None) -> int:
    """Runs the command line.

    Args:
      argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
      The exit code (0 success, 1 an empty split, 2 unusable input).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.builder or args.config or args.input or args.agreement):
        parser.error("give a dataset (--builder, --config or --input) and/or --agreement")
    if args.ocr_file and not args.input:
        parser.error("--ocr_file goes with --input (a TFDS dataset carries its OCR tokens)")
    # An empty split exits 1, every other unusable input 2 (documented); TFDS imports TensorFlow.
    return run_main(lambda: _run(args), verbose=args.verbose, import_tensorflow=True, log_level=logging.ERROR,
                    sigterm=False, with_class=False, exit_codes={EmptySplitError: 1, UserError: 2, FileNotFoundError: 2},
                    handled=(FileNotFoundError,))


def _input_file(item: str) -> str:
    """The file of an ``--input`` item, ``FILE`` or ``SPLIT=FILE`` (as :func:`_read_inputs` reads it)."""
    return item.split("=", 1)[1] if "=" in item and not os.path.exists(item) else item


def _run(args: argparse.Namespace) -> int:
    paths.check_args(args, PATH_FLAGS, extra=[
        ("--config", args.config.partition(":")[0] if args.config else None, paths.INPUT_FILE),
        ("--input", [_input_file(x) for x in args.input or []], paths.INPUT_FILE)])
    result: dict = {}
    if args.builder or args.config:
        splits = [s.strip() for s in args.splits.split(",") if s.strip()] if args.splits else None
        if not args.verbose:
            import tensorflow_datasets as tfds  # heavy: only for a TFDS dataset

            tfds.display_progress_bar(False)
        data, source = read_tfds(_data_config(args), splits, prepare=args.prepare)
        source = {"kind": "tfds", **source}
    elif args.input:
        data, source = _read_inputs(args.input, args.ocr_file)
    else:
        data, source = None, None
    agreement = kappa.agreement(args.agreement) if args.agreement else None
    if data is not None:
        result = {"source": source, **analyze(data, args.vocab_split)}
    if agreement is not None:
        result["agreement"] = agreement
    os.makedirs(args.out, exist_ok=True)
    written = []
    if data is not None and not args.no_figures:
        title = args.title or source.get("builder") or ", ".join(os.path.basename(p) for p in source["files"].values())
        written = write_figures(result["splits"], args.out, title)
        result["figures"] = [os.path.basename(p) for p in written]
    path = os.path.join(args.out, "analysis.json")
    outputs.write_json(path, result, indent=1, newline=True)
    print(format_summary(result))
    print(f"\nwrote {path}" + (f" and {len(written)} figures" if written else ""))
    return 0


if __name__ == "__main__":
    sys.exit(run())
