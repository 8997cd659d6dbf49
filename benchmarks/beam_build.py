"""Build throughput: the same stand-in photos built in one process, in a local process pool, and on Apache Beam.

    python benchmarks/beam_build.py [--images 20] [--engine tesseract] [--workers 2] [--workdir /tmp/beam_bench]

Writes ``--images`` stand-in photos (320 x 200, two lines of signboard text each, every fifth a PNG that the
build re-encodes) and an EVJVQA public-test file with three questions per photo (vi, en, ja), then builds the
``evjvqa`` dataset with OCR engine ``--engine`` (:data:`openvivqa_jax.data.ocr.ENGINES`) three ways, each into
its own data_dir:

* ``plain_1``: no Beam, ``num_workers=1`` (every image decoded and OCRed in this process);
* ``pool_N``: no Beam, ``num_workers=N`` (:func:`tfds_builders.image_work.map_images`);
* ``beam_N``: Beam's DirectRunner, ``direct_running_mode=multi_processing``, ``direct_num_workers=N``.

Timing: wall clock of ``download_and_prepare`` (annotation parsing, per-image work, writing and TFDS's
shuffle), ``images_per_s = images / seconds``; CPU model, cores and the 1-minute load average before and
after each build are recorded, since other work on the machine changes the ratios. The three builds are
also compared: ``same_examples`` is true when every example (ids in stored order, image bytes, OCR tokens)
is equal to the plain build's.

Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw, ImageFont  # noqa: E402

from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402

#: The path flags (openvivqa_jax.paths), checked before anything is built; ``--workdir`` is emptied first.
PATH_FLAGS = {"--workdir": paths.OUTPUT_DIR}

WORDS = ["PHỞ BÒ", "CÀ PHÊ", "BÁNH MÌ", "HOTEL", "NHÀ THUỐC", "SALE 50%", "KARAOKE", "QUÁN ĂN", "TẠP HÓA", "BIA"]
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"


def make_photos(root: Path, n: int) -> None:
    """``n`` signboard stand-ins in ``root/public-test-images`` and ``root/evjvqa_public_test.json``."""
    img_dir = root / "public-test-images"
    img_dir.mkdir(parents=True, exist_ok=True)
    font = ImageFont.truetype(FONT, 28) if os.path.isfile(FONT) else ImageFont.load_default()
    images, anns = [], []
    for i in range(n):
        im = Image.new("RGB", (320, 200), (240 - (5 * i) % 120, 230, 210))
        d = ImageDraw.Draw(im)
        d.text((20, 40), WORDS[i % len(WORDS)], fill=(20, 20, 20), font=font)
        d.text((20, 110), f"{100 + i} HÀNG BÔNG", fill=(120, 10, 10), font=font)
        name = f"{i:05d}." + ("png" if i % 5 == 4 else "jpg")
        im.save(img_dir / name)
        images.append({"id": i, "filename": name})
        for j, (lang, q, a) in enumerate([("vi", "biển hiệu ghi gì?", WORDS[i % 10].lower()),
                                           ("en", "what is written on the sign?", WORDS[i % 10].lower()),
                                           ("ja", "看板には何と書いてありますか？", "フォー")]):
            anns.append({"id": 100 * i + j, "image_id": i, "question": q, "answer": a, "language": lang})
    (root / "evjvqa_public_test.json").write_text(
        json.dumps({"images": images, "annotations": anns}, ensure_ascii=False), encoding="utf-8")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def build(kind: str, workers: int, engine: str, manual: Path, data_dir: Path) -> tuple[dict, list]:
    """One build; returns its timing row and its examples (question id, image bytes, OCR texts) in stored order."""
    import tensorflow_datasets as tfds

    from tfds_builders.evjvqa import Builder, EvjvqaConfig

    cfg = EvjvqaConfig(name=f"bench_{engine.replace('+', '_')}", ocr_engine=engine,
                       num_workers=1 if kind == "plain" else workers)
    kw = {}
    if kind == "beam":
        from apache_beam.options.pipeline_options import PipelineOptions

        kw["beam_options"] = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                                              f"--direct_num_workers={workers}"])
    builder = Builder(config=cfg, data_dir=str(data_dir), file_format="array_record")
    load0 = _load()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # TFDS prints progress on stdout; the JSON goes there
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual), **kw))
    seconds = time.perf_counter() - t0
    examples = [(ex["question_id"], np.asarray(ex["image"]).tobytes(), list(ex["ocr"]["text"]))
                for ex in builder.as_data_source()["test"]]
    return {"seconds": round(seconds, 2), "load_before": load0, "load_after": _load()}, examples


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=20)
    p.add_argument("--engine", default="tesseract")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--workdir", default="/tmp/beam_bench")
    args = p.parse_args(argv)
    paths.check_args(args, PATH_FLAGS)
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    manual = work / "manual"
    make_photos(manual, args.images)
    rows, reference = {}, None
    for kind, workers in (("plain", 1), ("pool", args.workers), ("beam", args.workers)):
        label = f"{kind}_{workers}"
        print(f"building {label} ...", file=sys.stderr)
        row, examples = build(kind, workers, args.engine, manual, work / label)
        row["images_per_s"] = round(args.images / row["seconds"], 3)
        reference = examples if reference is None else reference
        row["same_examples"] = examples == reference
        rows[label] = row
    out = {"benchmark": "beam_build", "images": args.images, "questions": 3 * args.images, "engine": args.engine,
           "workers": args.workers, "cpu": _cpu_model(), "cores": os.cpu_count(), "builds": rows,
           "speedup_beam_vs_plain": round(rows["plain_1"]["seconds"] / rows[f"beam_{args.workers}"]["seconds"], 3),
           "speedup_pool_vs_plain": round(rows["plain_1"]["seconds"] / rows[f"pool_{args.workers}"]["seconds"], 3)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
