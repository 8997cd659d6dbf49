"""OCR engines on real OpenViVQA photos: answer words read, and seconds per image.

    python benchmarks/ocr_engines.py --examples ../shared/data/openvivqa_examples [--engines a,b] [--repeats 1]

For each engine of :data:`openvivqa_jax.data.ocr.ENGINES` (``none`` excluded) and each question of the
examples file (``{"images": {id: filename}, "annotations": {qid: {image_id, question, answer}}}``):

* the answer's words that are not in the question (after :func:`normalize_text`, the answer rules) are
  the words OCR has to supply; ``found`` counts those that appear among the engine's OCR words (its
  tokens after :func:`openvivqa_jax.data.ocr.run_ocr`'s normalization and word split);
* ``seconds``: wall clock of ``run_ocr`` on the decoded image (:func:`openvivqa_jax.data.images.decode_image`),
  the minimum over ``--repeats`` runs, the detector's model load excluded (one warm-up image first);
  ``cpu_seconds``: CPU time of this process plus the tesseract subprocesses over the same call (less
  sensitive to other load on the machine than the wall clock).

Prints one JSON object on stdout: per engine the rows ``{image, needed, found, found_words, seconds}`` and
the totals.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402
from openvivqa_jax.data import images, ocr  # noqa: E402
from openvivqa_jax.text.normalize import normalize_text  # noqa: E402


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the tesseract subprocesses)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


#: The path flags (openvivqa_jax.paths), checked before anything is read.
PATH_FLAGS = {"--examples": paths.INPUT_DIR}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", default=os.path.join(ROOT, "..", "shared", "data", "openvivqa_examples"))
    p.add_argument("--engines", default=",".join(e for e in ocr.ENGINES if e != "none"))
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args(argv)
    paths.check_args(args, PATH_FLAGS)
    with open(os.path.join(args.examples, "examples_data.json"), encoding="utf-8") as f:
        data = json.load(f)
    imgs = {str(k): v for k, v in data["images"].items()}
    decoded = {k: images.decode_image(os.path.join(args.examples, "images", v)).pil for k, v in imgs.items()}
    out = {"examples": os.path.abspath(args.examples), "repeats": args.repeats, "engines": {}}
    for engine in args.engines.split(","):
        ocr.run_ocr(next(iter(decoded.values())), engine)  # warm-up (detector model load)
        rows = []
        for qid, ann in data["annotations"].items():
            key = str(ann["image_id"])
            q = set(normalize_text(ann["question"]).split())
            needed = [w for w in normalize_text(ann["answer"]).split() if w not in q]
            best = cpu_best = float("inf")
            for _ in range(args.repeats):
                t0, c0 = time.perf_counter(), _cpu()
                toks = ocr.run_ocr(decoded[key], engine)
                best = min(best, time.perf_counter() - t0)
                cpu_best = min(cpu_best, _cpu() - c0)
            words = {t["text"] for t in toks}
            found = [w for w in needed if w in words]
            rows.append({"image": imgs[key], "question_id": qid, "needed": needed, "found": len(found),
                         "found_words": found, "num_tokens": len(toks), "seconds": round(best, 3),
                         "cpu_seconds": round(cpu_best, 3)})
            print(f"{engine} {imgs[key]}: {len(found)}/{len(needed)} {found} {best:.2f}s", file=sys.stderr)
        out["engines"][engine] = {
            "rows": rows, "found": sum(r["found"] for r in rows), "needed": sum(len(r["needed"]) for r in rows),
            "seconds_per_image": round(sum(r["seconds"] for r in rows) / len(rows), 3),
            "cpu_seconds_per_image": round(sum(r["cpu_seconds"] for r in rows) / len(rows), 3)}
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
