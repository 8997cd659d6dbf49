"""Predict on any photo: read, OCR, decode, explain, print.

Single question::

    python -m openvivqa_jax.predict --workdir runs/mlpag --image shop.jpg --question "cửa hàng này tên gì?" \\
        [--ocr tesseract|none|FILE] [--beam N] [--json] [--plot out.png]

Batch (:func:`openvivqa_jax.evaluation.question_files.read_questions_file`), writing the Codalab submission
``{question_id: answer}`` (UTF-8 JSON)::

    python -m openvivqa_jax.predict --workdir runs/mlpag --questions test.json --image_dir images/ \\
        --output runs/mlpag/submission.json [--plot_dir runs/mlpag/pictures/] [--skip_bad] [--ocr ...] [--beam N]

The run is restored by :func:`openvivqa_jax.vqa.inference.load_for_inference` (parameters only; the dataset is
never opened); OCR by the builders' engines (:func:`openvivqa_jax.data.ocr.run_ocr`) or a FILE
(:func:`openvivqa_jax.data.ocr.read_ocr_table`); answers, word provenance and the attention heat map by
:meth:`openvivqa_jax.vqa.inference.Inference.answer_photos`; the picture by :func:`openvivqa_jax.plot.plot_prediction`.
Bad input ends with exit code 2 and one ``error:`` line on stderr naming the file or question; nothing is
skipped silently. ``--skip_bad`` (batch) answers every question whose image can be used and counts the others per
reason on stderr (each in ``<output stem>.skipped.json``); cut and other-language questions get a ``warning:``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from absl import logging

from openvivqa_jax.cli import run_main
from openvivqa_jax.data import images
from openvivqa_jax.data import ocr as ocr_lib
from openvivqa_jax.data.images import DEFAULT_MAX_PIXELS as DEFAULT_MAX_IMAGE_PIXELS
from openvivqa_jax.data.ocr import (  # engines in data/ocr/engines.py, the merge of passes in data/ocr/tokens.py
    DEFAULT_ENGINE as DEFAULT_OCR_ENGINE,
    DEFAULT_OCR_PASSES,
    ENGINES as OCR_ENGINES,
    merge_ocr_passes,
    plausible_token,
    read_ocr_table,
    run_ocr_passes,
)
from openvivqa_jax import accelerator, paths
from openvivqa_jax.errors import UserError
from openvivqa_jax.evaluation import questions as question_files
from openvivqa_jax.plot import plot_prediction
from openvivqa_jax.training import interrupts
from openvivqa_jax.vqa.report import (answer_warnings, format_result, json_result, no_text_note, skipped_summary,
                                      write_submission)
from openvivqa_jax.vqa.workdir import answering_reads, check_workdir, load_config

__all__ = ["PredictError", "DEFAULT_MAX_PIXELS", "DEFAULT_OCR_PASSES", "DEFAULT_OCR_ENGINE", "OCR_ENGINES",
           "plausible_token", "run_ocr_passes", "merge_ocr_passes", "load_image", "load_run",
           "build_parser", "format_result", "run", "PATH_FLAGS"]

#: Largest image accepted (pixels, width x height), checked from the header before decoding; about the
#: area of a 50-megapixel photo. A 20000 x 20000 image (400 MP, 1.2 GB decoded) is refused.
DEFAULT_MAX_PIXELS = DEFAULT_MAX_IMAGE_PIXELS

#: The path flags (:mod:`openvivqa_jax.paths`), checked before anything is read; also ``--ocr`` when it names
#: a file rather than an engine (an input file).
PATH_FLAGS = {"--workdir": paths.INPUT_DIR, "--image": paths.INPUT_FILE, "--questions": paths.INPUT_FILE,
              "--image_dir": paths.INPUT_DIR, "--output": paths.OUTPUT_FILE, "--plot": paths.OUTPUT_FILE,
              "--plot_dir": paths.OUTPUT_DIR}


class PredictError(UserError):
    """Unusable input; the message (one line) names the file or the question and what is wrong."""


def _input(fn, *args, prefix: str = ""):
    """``fn(*args)``, its input errors (:class:`~openvivqa_jax.evaluation.formats.InputError`,
    :class:`~openvivqa_jax.data.ocr.OcrFileError`, :class:`~openvivqa_jax.data.pipeline.DatasetError`, a
    missing workdir file) as :class:`PredictError` (message ``prefix`` + the error's)."""
    try:
        return fn(*args)
    except _input_errors() as e:  # evaluated only when fn raised
        raise PredictError(f"{prefix}{e}") from None


def _input_errors() -> tuple[type, ...]:
    """The input-error classes of the modules imported so far (no module is imported for them)."""
    kinds = [("openvivqa_jax.evaluation.formats", "InputError"), ("openvivqa_jax.data.ocr", "OcrFileError"),
             ("openvivqa_jax.data.pipeline", "DatasetError"),
             ("openvivqa_jax.training.checkpoints", "CheckpointMismatchError")]
    return (FileNotFoundError, UserError, *(getattr(sys.modules[m], n) for m, n in kinds if m in sys.modules))


def load_image(path: str, max_pixels: int = DEFAULT_MAX_PIXELS, question: str | None = None):
    """The RGB ``PIL.Image`` of ``path`` by :func:`openvivqa_jax.data.images.decode_image` (as the builders and
    the training pipeline): at most ``max_pixels`` (``width * height``, from the header); ``question`` is named
    in errors.

    Raises:
      PredictError: missing file, a folder, a 0-byte file, not an image, over ``max_pixels``, below the
        minimum size, or a corrupt / truncated image (one line naming the path).
    """
    try:
        return images.decode_image(path, question=question, max_pixels=max_pixels).pil
    except images.ImageDecodeError as e:
        raise PredictError(str(e)) from None


def load_run(workdir: str, beam: int | None = None):
    """``(run, beam)``: the run of ``workdir`` restored for answering photos on one device
    (:func:`openvivqa_jax.vqa.inference.load_for_inference`) and the beam size (None: ``eval.beam_size``).

    Raises:
      PredictError: an unusable workdir, a beam below 1, or a model whose vision input is pre-extracted region
        features (a photo cannot feed it).
    """
    workdir = os.path.abspath(os.path.expanduser(workdir))
    _input(check_workdir, workdir)  # before JAX is imported: bad input fails fast
    cfg = _input(load_config, workdir)
    kind = cfg.model.vision.get("kind", "cnn")
    if kind not in ("cnn", "vit", "proposals"):
        raise PredictError(f"workdir {workdir}: model.vision.kind is {kind!r}; predicting from a photo needs a "
                           "vision input made from pixels ('cnn', 'vit' or 'proposals'), not pre-extracted region "
                           "features")
    if beam is not None and beam < 1:
        raise PredictError(f"--beam must be >= 1, got {beam}")
    with cfg.unlocked():
        cfg.mesh.shape = (1, 1)  # one example at a time, on one device
    from openvivqa_jax.vqa import inference  # heavy: JAX, imported once the input is known good
    accelerator.start_backend()  # outside _input: a backend JAX cannot start is the machine's, not the workdir's
    return _input(inference.load_for_inference, workdir, cfg, prefix=f"workdir {workdir}: "), int(
        beam or cfg.eval.beam_size)


def _ocr_tokens(image, mode: str, image_keys: Sequence[str], ocr_cfg: dict, stats: dict) -> list[dict]:
    """OCR tokens of ``image`` by ``mode``: an engine of :data:`OCR_ENGINES`
    (:func:`openvivqa_jax.data.ocr.run_ocr`), or the OCR file's entry for the image."""
    if mode in OCR_ENGINES:
        try:
            return ocr_lib.run_ocr(image, mode, stats=stats, passes=ocr_cfg["passes"], filter_tokens=ocr_cfg["filter"])
        except ocr_lib.OcrUnavailableError as e:
            raise PredictError(f"OCR: {e}") from None
    return [dict(t) for t in _input(ocr_lib.ocr_tokens_for, ocr_cfg["table"], image_keys, mode, prefix="OCR file ")]


# ---------------------------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="python -m openvivqa_jax.predict",
                                description="Answer questions about photos with a trained run; report OCR, the answer "
                                            "and where each answer word came from.")
    p.add_argument("--workdir", required=True, help="run folder (config.json, spm.model, checkpoints)")
    p.add_argument("--image", help="image file (single question)")
    p.add_argument("--question", help="question text (single question)")
    p.add_argument("--questions", help="batch: questions JSON in the public release's layout")
    p.add_argument("--image_dir", help="batch: folder of the images named in --questions (default: its folder, "
                   "then its images/ and <file stem>/ subfolders)")
    p.add_argument("--output", help="batch: submission file {question_id: answer} (default: submission.json)")
    p.add_argument("--ocr", default=DEFAULT_OCR_ENGINE,
                   help=f"OCR engine ({', '.join(OCR_ENGINES)}; default {DEFAULT_OCR_ENGINE}) or a JSON file of OCR tokens")
    p.add_argument("--ocr_passes", default=",".join(DEFAULT_OCR_PASSES),
                   help="the tesseract engine's passes to merge: gray,R,G,B (default all)")
    p.add_argument("--no_ocr_filter", action="store_true",
                   help="keep every tesseract word (no corroboration / plausibility filter)")
    p.add_argument("--beam", type=int, default=None, help="beam size (default: the run's eval.beam_size)")
    p.add_argument("--batch_size", type=int, default=8, help="batch: questions decoded together")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--plot", help="single: write the picture to this PNG")
    p.add_argument("--plot_dir", help="batch: write one picture per question (<question_id>.png) here")
    p.add_argument("--max_pixels", type=int, default=DEFAULT_MAX_PIXELS, help="largest image accepted (width*height)")
    p.add_argument("--skip_bad", action="store_true",
                   help="batch: answer every usable question (a usable question and image); count the others (empty "
                        "question, unknown image id, repeated id, unusable image) per reason on stderr, list them in "
                        "<output stem>.skipped.json {question_id: reason}, instead of stopping at the first")
    p.add_argument("--verbose", action="store_true", help="show library logging on stderr")
    return p


def _ocr_settings(args) -> dict:
    """``--ocr`` / ``--ocr_passes``: the OCR table of a file (loaded and validated) and the tesseract passes."""
    ocr_table = None
    if args.ocr not in OCR_ENGINES:
        ocr_table = _input(read_ocr_table, args.ocr, bool(args.skip_bad), prefix="OCR file ")
    passes = tuple(p.strip() for p in args.ocr_passes.split(",") if p.strip())
    bad = [p for p in passes if p not in DEFAULT_OCR_PASSES]
    if bad or not passes:
        raise PredictError(f"--ocr_passes {args.ocr_passes!r}: expected a comma-separated subset of gray,R,G,B")
    return {"table": ocr_table, "passes": passes, "filter": not args.no_ocr_filter}


def _run(args) -> int:
    """Reads the questions and checks every image, then loads the run, answers and reports (the stages below);
    returns the exit code."""
    single = args.image is not None or args.question is not None
    args.output = args.output or ("submission.json" if args.questions and not single else None)  # checked too
    skipped_list = os.path.splitext(args.output)[0] + ".skipped.json" if args.output and args.skip_bad else None
    paths.check_args(args, PATH_FLAGS, extra=[("--ocr", None if args.ocr in OCR_ENGINES else args.ocr,
                                               paths.INPUT_FILE), ("--skip_bad list", skipped_list, paths.OUTPUT_FILE)],
                     reads=answering_reads(args.workdir, args.questions, args.image_dir))
    records, question_skips = _read_records(args, single)
    ocr_cfg = _ocr_settings(args)
    # Every image is checked before the model is loaded, so bad input fails fast (or, with --skip_bad in batch
    # mode, the questions of unusable images are set aside, answered by no one, and listed at the end).
    records, images, skipped = _load_images(args, records, single, question_skips)
    interrupts.raise_if_received()
    run, beam = load_run(args.workdir, beam=args.beam)
    pre = run.inputs.pre
    pre.max_image_pixels = max(pre.max_image_pixels, args.max_pixels)  # the images passed --max_pixels
    stats: dict[str, int] = {}
    items = _photo_questions(args, records, images, ocr_cfg, stats)
    want_plot = bool(args.plot or args.plot_dir)
    interrupts.raise_if_received()
    results = _input(run.answer_photos, items, beam, 1 if single else args.batch_size, want_plot)
    if want_plot:
        _plot_results(args, run, beam, results, items, single)
    interrupts.raise_if_received()
    notes = answer_warnings(results, pre.q_len, run.workdir, records, single)
    output = skipped_path = None
    if not single:
        output, skipped_path = write_submission(args.output, results, skipped)
    _print_results(args, results, single, output)
    for line in [*notes, *skipped_summary(skipped, len(skipped) + len(results), skipped_path)]:
        print(line, file=sys.stderr)
    if args.ocr in OCR_ENGINES and args.ocr != "none":  # an engine ran (not --ocr none, not a tokens file)
        note = no_text_note(args.ocr, items)
        if note:
            print(note, file=sys.stderr)
    if stats:
        logging.info("OCR counters: %s", stats)
    return 0


def _read_records(args, single: bool) -> tuple[list[dict], dict[str, str] | None]:
    """``(records, question_skips)``: the questions to answer (``[{question_id, image_id, question,
    image_path}]``: the one of ``--image``/``--question``, or those of the ``--questions`` file) and, in batch
    mode with ``--skip_bad``, the questions set aside ``{question_id: reason}`` (else None).

    Raises:
      PredictError: the options do not say one mode, or a question (or, without ``--skip_bad``, any question of
        the file) is unusable.
    """
    if single and args.questions:
        raise PredictError("give either --image and --question, or --questions (batch), not both")
    if not single and not args.questions:
        raise PredictError("give --image and --question, or --questions with --image_dir")
    if single:
        if args.image is None or args.question is None:
            raise PredictError("a single prediction needs both --image and --question")
        question = _input(question_files.clean_question, args.question, f"--question {args.question!r}")
        return [{"question_id": "0", "image_id": os.path.basename(args.image), "question": question,
                 "image_path": args.image}], None
    question_skips: dict[str, str] | None = {} if args.skip_bad else None
    records = _input(question_files.read_questions_file, args.questions,
                     question_files.image_folders(args.questions, args.image_dir), question_skips)
    return records, question_skips


def _load_images(args, records: list[dict], single: bool,
                 question_skips: dict[str, str] | None) -> tuple[list[dict], dict[str, Any], dict[str, str]]:
    """``(records, images, skipped)``: each distinct image of ``records`` loaded once (``{image_path: PIL
    image}``); with ``--skip_bad`` in batch mode the questions of unusable images are left out of ``records`` and
    added to ``skipped`` ``{question_id: reason}`` (which starts from ``question_skips``).

    Raises:
      PredictError: an unusable image (without ``--skip_bad``, or in single mode), or no question left.
    """
    images: dict[str, Any] = {}
    bad_images: dict[str, str] = {}
    skipped: dict[str, str] = {} if single or not question_skips else dict(question_skips)
    for r in records:
        if r["image_path"] in bad_images:
            skipped[r["question_id"]] = bad_images[r["image_path"]]
        elif r["image_path"] not in images:
            try:
                images[r["image_path"]] = load_image(r["image_path"], args.max_pixels,
                                                     question=r["question"] if single else None)
            except PredictError as e:
                if single:
                    raise
                if not args.skip_bad:
                    raise PredictError(f"question {r['question_id']!r}: {e} (--skip_bad answers the other "
                                       "questions and lists the bad ones)") from None
                bad_images[r["image_path"]] = skipped[r["question_id"]] = " ".join(str(e).split())
    if bad_images:
        records = [r for r in records if r["image_path"] not in bad_images]
        if not records:
            raise PredictError(f"questions file {args.questions}: no question has a usable image "
                               f"({len(skipped)} skipped, e.g. {next(iter(skipped.values()))})")
    return records, images, skipped


def _photo_questions(args, records: list[dict], images: dict[str, Any], ocr_cfg: dict, stats: dict) -> list:
    """One :class:`openvivqa_jax.vqa.inference.PhotoQuestion` per record, with its image's OCR tokens (found once
    per image; the engines' counters added to ``stats``)."""
    from openvivqa_jax.vqa.inference import PhotoQuestion  # heavy (JAX), already imported by load_run

    ocr_cache: dict[str, list[dict]] = {}
    items = []
    for r in records:
        path = r["image_path"]
        if path not in ocr_cache:
            keys = [r["image_id"], os.path.basename(path), os.path.splitext(os.path.basename(path))[0], path]
            ocr_cache[path] = _ocr_tokens(images[path], args.ocr, keys, ocr_cfg, stats)
        items.append(PhotoQuestion(r["question_id"], r["image_id"], r["question"], images[path], path, ocr_cache[path]))
    return items


def _plot_results(args, run, beam: int, results: list[dict], items: list, single: bool) -> None:
    """Writes each result's picture (``--plot``, or ``<question_id>.png`` under ``--plot_dir``) and records its
    path in the result's ``plot``."""
    for res, it in zip(results, items):
        out = args.plot if single else os.path.join(args.plot_dir, f"{_safe_name(res['question_id'])}.png")
        res["plot"] = plot_prediction(np.asarray(it.image), out, question=res["question"], answer=res["answer"],
                                      words=res["words"], ocr_tokens=res["ocr"], heat=res.get("heat"),
                                      heat_note=res.get("heat_note", ""),
                                      title=f"{os.path.basename(it.image_path)} - {run.cfg.model.name} "
                                            f"step {run.step}, beam {beam}")


def _print_results(args, results: list[dict], single: bool, output: str | None) -> None:
    """The results on stdout: JSON (``--json``: one object in single mode, a list in batch mode) or text blocks
    (:func:`format_result`, then the submission's path in batch mode)."""
    if args.json:
        payload = [json_result(r) for r in results]
        json.dump(payload[0] if single else payload, sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
    else:
        blocks = []
        for r in results:
            head = "" if single else f"[{r['question_id']}] image {r['image']}\n"
            blocks.append(head + format_result(r))
        print("\n\n".join(blocks))
        if not single:
            print(f"\nwrote {output}: {len(results)} answers")


def _safe_name(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s) or "question"


def run(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code (0 success, 2 unusable input)."""
    args = build_parser().parse_args(argv)
    # Predicting imports no TensorFlow (no TFDS, no clu), so there are no start-up notices to filter
    # (openvivqa_jax/quiet.py) and no import to pay for. SIGTERM keeps its default.
    return run_main(lambda: _run(args), verbose=args.verbose, log_level=logging.ERROR, quiet_warnings=True,
                    sigterm=False, with_class=False, exit_codes={UserError: 2})

if __name__ == "__main__":
    sys.exit(run())
