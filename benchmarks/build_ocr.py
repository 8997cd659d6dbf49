"""Build-time image work (decode + OCR) in worker processes: images per second at 1, 2, ... workers.

    python benchmarks/build_ocr.py [--examples ../shared/data/openvivqa_examples] [--copies 3]
        [--workers 1,2] [--engines detector+tesseract,tesseract]

Runs :func:`tfds_builders.image_work.map_images` (what the builders run) over the example images, each
listed ``--copies`` times (the files are copied, so every task reads and decodes its own file), with each
engine and worker count, side by side in one run. Images per second = tasks / wall clock of the whole
map, worker start-up (spawn, model load) included. Also checks that every worker count gives the same
tokens in the same order. Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402
from tfds_builders import image_work  # noqa: E402

#: The path flags (openvivqa_jax.paths), checked before anything is read.
PATH_FLAGS = {"--examples": paths.INPUT_DIR}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", default=os.path.join(ROOT, "..", "shared", "data", "openvivqa_examples"))
    p.add_argument("--copies", type=int, default=3)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--engines", default="detector+tesseract,tesseract")
    args = p.parse_args(argv)
    paths.check_args(args, PATH_FLAGS)
    src = os.path.join(args.examples, "images")
    names = sorted(os.listdir(src))
    out = {"images": len(names) * args.copies, "cpus": image_work.default_num_workers(), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        tasks = []
        for c in range(args.copies):
            for n in names:
                dst = os.path.join(tmp, f"{c}_{n}")
                shutil.copyfile(os.path.join(src, n), dst)
                tasks.append(image_work.ImageTask(dst))
        for engine in args.engines.split(","):
            settings = image_work.ImageSettings(ocr_engine=engine)
            reference = None
            for w in (int(x) for x in args.workers.split(",")):
                t0 = time.perf_counter()
                results = list(image_work.map_images(tasks, settings, num_workers=w))
                dt = time.perf_counter() - t0
                tokens = [r.tokens for r in results]
                reference = tokens if reference is None else reference
                row = {"engine": engine, "workers": w, "seconds": round(dt, 2),
                       "images_per_second": round(len(tasks) / dt, 3), "same_tokens_as_first": tokens == reference,
                       "errors": sum(r.error is not None for r in results)}
                print(json.dumps(row), file=sys.stderr)
                out["runs"].append(row)
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
