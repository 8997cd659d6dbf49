"""A deterministic, full-size stand-in of the OpenViVQA release, to rehearse a run before downloading anything.

Usage::

    python benchmarks/make_release_standin.py --images 1000 --out /tmp/standin [--features] [--seed 0]

Writes, in ``--out`` (the ``manual_dir`` of ``tfds_builders/openvivqa``)::

    vlsp2023_train_data.json  vlsp2023_dev_data.json  vlsp2023_test_data.json
        the public dict form {"images": {image_id: filename},
                              "annotations": {question_id: {image_id, question, answer}}}
    images/<11-digit id>.jpg  photo-sized JPEGs (640x480 .. 1600x1200, quality 90) with drawn Vietnamese text
    ocr.json                  {image_id: [{text, box (xyxy in [0, 1]), score}]}: the drawn words
    features/<stem>.npy       (--features) the authors' per-image feature dict: region_features
                              (50, 2048) float32, region_boxes (50, 4) pixels, texts, boxes (pixels), scores,
                              image_w, image_h (the form the builder's ``features`` config reads)

Sizes follow the release (Nguyen et al. 2023, Table 2): 11,199 images and 37,914 questions, about 3.39
questions per image; images are split 81.3% / 9.3% / 9.4% into train / dev / test. Questions are built from
Vietnamese templates to 6-16 syllables (the release averages about 10), answers to 2-24 syllables (about 8;
many answers are sentences that quote the scene text). The JPEGs carry smooth colour fields with noise, so they
compress like photos (about 0.1-0.4 MB each), and 2-8 words drawn with DejaVu Sans.

Every image and its questions come from ``numpy.random.default_rng([seed, image_index])``, so the output is the
same for a seed whatever the number of worker processes, and ``--images N`` is the first ``N`` images of the
11,199 (question ids are per image). ``--images`` must be 1..11199; a split with no image gets no file (the
first dev image is image 9, the first test image image 17).

Raises (exit 2 with one line): ``--images`` out of range, or ``--out`` exists and is not empty.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402
from openvivqa_jax.errors import UsageError  # noqa: E402

RELEASE_IMAGES = 11_199
RELEASE_QUESTIONS = 37_914
SPLIT_SHARES = (("train", 0.813), ("dev", 0.093), ("test", 0.094))
FONT = os.environ.get("OPENVIVQA_FONT", "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")
NUM_REGIONS, REGION_DIM = 50, 2048

# Syllables of shop signs, street names and everyday objects (what the release's text questions ask about).
SIGN_WORDS = ("phở", "bún", "cơm", "tấm", "bánh", "mì", "cà", "phê", "trà", "sữa", "quán", "tiệm", "nhà", "hàng",
              "khách", "sạn", "siêu", "thị", "điện", "thoại", "thời", "trang", "hoa", "tươi", "vàng", "bạc",
              "nhà", "thuốc", "tây", "nha", "khoa", "sài", "gòn", "hà", "nội", "huế", "đà", "nẵng", "minh",
              "phương", "hạnh", "phúc", "thành", "công", "đức", "nguyễn", "trần", "lê", "phạm", "hoàng", "bảo",
              "ngọc", "anh", "khang", "thịnh", "phát", "lộc", "an", "bình", "việt", "nam", "xe", "máy", "sửa")
STREETS = ("lê lợi", "nguyễn huệ", "hai bà trưng", "trần hưng đạo", "lý thường kiệt", "tạ hiện", "hàng bạc",
           "nguyễn trãi", "điện biên phủ", "võ văn tần", "pasteur", "cách mạng tháng tám")
OBJECTS = ("chiếc xe máy", "người phụ nữ", "người đàn ông", "cô gái", "chàng trai", "chiếc ô tô", "tấm biển",
           "cái bàn", "chiếc ghế", "con chó", "cây xanh", "chiếc áo", "cửa hàng", "bức tường")
COLOURS = ("màu đỏ", "màu xanh", "màu vàng", "màu trắng", "màu đen", "màu hồng", "màu cam", "màu nâu")
PLACES = ("trên vỉa hè", "bên đường", "trước cửa hàng", "trong quán", "gần cây cột điện", "dưới mái hiên")
TEXT_QUESTIONS = (
    ("{place_kind} này tên là gì vậy ?", "{place_kind} này tên là {name}"),
    ("tên của {place_kind} được ghi trên tấm biển là gì ?", "tên của {place_kind} là {name}"),
    ("{place_kind} {name} nằm trên con đường nào ?", "{place_kind} {name} nằm trên đường {street}"),
    ("số điện thoại được ghi trên biển hiệu của {place_kind} là gì ?", "số điện thoại là {phone}"),
    ("dòng chữ màu trắng trên tấm biển ghi gì ?", "dòng chữ ghi {name}"),
    ("{place_kind} bán món gì ?", "{place_kind} bán {name}"),
)
SCENE_QUESTIONS = (
    ("{obj} {place} có màu gì ?", "{obj} {place} có {colour}"),
    ("có bao nhiêu {obj_plain} trong bức ảnh này ?", "có {count} {obj_plain} trong bức ảnh"),
    ("{obj} đang làm gì {place} ?", "{obj} đang đứng {place} và nhìn về phía {obj2}"),
    ("người mặc áo {colour} đang đứng ở đâu ?", "người mặc áo {colour} đang đứng {place}"),
    ("{obj} ở bên trái của bức ảnh đang ở đâu ?", "{obj} đang ở {place}"),
)
PLACE_KINDS = ("quán", "tiệm", "cửa hàng", "nhà hàng", "quán cà phê", "tiệm bánh", "khách sạn", "hiệu thuốc")
COUNTS = ("một", "hai", "ba", "bốn", "năm", "sáu")


def split_of(index: int) -> str:
    """The split of image ``index`` (0-based): a fixed interleaving with the release's shares."""
    r = ((index * 2654435761) % 1000) / 1000.0  # a fixed low-discrepancy assignment, independent of --images
    acc = 0.0
    for name, share in SPLIT_SHARES:
        acc += share
        if r < acc:
            return name
    return SPLIT_SHARES[-1][0]


def num_questions(rng: np.random.Generator) -> int:
    """Questions of one image: 2..5 with mean 3.39 (37,914 / 11,199)."""
    return int(rng.choice([2, 3, 4, 5], p=[0.18, 0.35, 0.37, 0.10]))


def _name(rng) -> str:
    return " ".join(rng.choice(SIGN_WORDS, size=int(rng.integers(1, 4))))


def _qa(rng, name: str) -> tuple[str, str]:
    """One (question, answer) pair; about half ask about the drawn text (the release's text QA share)."""
    fields = dict(place_kind=str(rng.choice(PLACE_KINDS)), name=name, street=str(rng.choice(STREETS)),
                  phone="0" + "".join(str(d) for d in rng.integers(0, 10, size=9)),
                  obj=str(rng.choice(OBJECTS)), obj2=str(rng.choice(OBJECTS)),
                  obj_plain=str(rng.choice(OBJECTS)).split(" ", 1)[1],
                  place=str(rng.choice(PLACES)), colour=str(rng.choice(COLOURS)), count=str(rng.choice(COUNTS)))
    pool = TEXT_QUESTIONS if rng.random() < 0.5 else SCENE_QUESTIONS
    q, a = pool[int(rng.integers(len(pool)))]
    return q.format(**fields), a.format(**fields)


def _photo(rng, w: int, h: int) -> Image.Image:
    """Smooth colour fields plus sensor-like noise: compresses like a photo, not like a flat drawing."""
    low = rng.integers(0, 256, size=(max(2, h // 96), max(2, w // 96), 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(low).resize((w, h), Image.BICUBIC), np.int16)
    tile = rng.integers(-14, 15, size=(128, 128, 3), dtype=np.int16)
    noise = np.tile(tile, (h // 128 + 1, w // 128 + 1, 1))[:h, :w]
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def make_image(args: tuple) -> dict:
    """Writes image ``index`` (and its feature file); returns its questions, OCR and split."""
    index, out, seed, features = args
    rng = np.random.default_rng([seed, index])
    w = int(rng.integers(640, 1601))
    h = int(np.clip(round(w * rng.choice([0.75, 0.5625, 1.0, 1.333])), 480, 1200))
    im = _photo(rng, w, h)
    draw = ImageDraw.Draw(im)
    sign = _name(rng)
    words = sign.split() + list(rng.choice(SIGN_WORDS, size=int(rng.integers(0, 5))))
    ocr = []
    x, y = int(rng.integers(10, w // 4)), int(rng.integers(10, h // 3))
    for word in words:
        size = int(rng.integers(max(14, h // 30), max(16, h // 10)))
        font = ImageFont.truetype(FONT, size)
        x0, y0, x1, y1 = draw.textbbox((x, y), word.upper(), font=font)
        if x1 >= w - 5:
            x, y = int(rng.integers(10, w // 4)), y1 + 8
            x0, y0, x1, y1 = draw.textbbox((x, y), word.upper(), font=font)
        if y1 >= h - 5:
            break
        draw.rectangle((x0 - 4, y0 - 4, x1 + 4, y1 + 4), fill=tuple(int(v) for v in rng.integers(0, 90, size=3)))
        draw.text((x, y), word.upper(), font=font, fill=(255, 255, 255))
        # Diacritics above a capital at the top edge reach above the image: boxes are clipped to it.
        box = [round(min(max(v / d, 0.0), 1.0), 4) for v, d in ((x0, w), (y0, h), (x1, w), (y1, h))]
        ocr.append({"text": word.upper(), "box": box,
                    "score": round(float(rng.uniform(0.6, 1.0)), 3)})
        x = x1 + int(rng.integers(12, 40))
    image_id = str(index)
    filename = f"{index:011d}.jpg"
    im.save(os.path.join(out, "images", filename), quality=90)
    qas = [_qa(rng, sign) for _ in range(num_questions(rng))]
    if features:
        feats = rng.standard_normal((NUM_REGIONS, REGION_DIM), dtype=np.float32)
        np.maximum(feats, 0, out=feats)  # ReLU'd detector features are non-negative
        xy = rng.uniform(0, 0.7, size=(NUM_REGIONS, 2))
        wh = rng.uniform(0.05, 0.3, size=(NUM_REGIONS, 2))
        rboxes = (np.concatenate([xy, np.minimum(xy + wh, 1.0)], 1) * [w, h, w, h]).astype(np.float32)
        d = {"region_features": feats, "region_boxes": rboxes, "texts": [t["text"] for t in ocr],
             "boxes": (np.asarray([t["box"] for t in ocr], np.float32).reshape(-1, 4)
                       * [w, h, w, h]).astype(np.float32),
             "scores": np.asarray([t["score"] for t in ocr], np.float32), "image_w": w, "image_h": h}
        np.save(os.path.join(out, "features", f"{index:011d}.npy"), d, allow_pickle=True)
    return {"index": index, "image_id": image_id, "filename": filename, "split": split_of(index), "ocr": ocr,
            "qas": qas}


#: The path flags (openvivqa_jax.paths), checked before anything is written.
PATH_FLAGS = {"--out": paths.NEW_OUTPUT_DIR}


def main(argv=None) -> dict:
    """Parses flags, writes the stand-in, prints a one-line JSON summary and returns it."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, required=True, help=f"number of images, 1..{RELEASE_IMAGES}")
    p.add_argument("--out", required=True, help="output folder (created; must be empty)")
    p.add_argument("--features", action="store_true", help="also write features/<stem>.npy per image")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (output does not depend on it)")
    args = p.parse_args(argv)
    if not 1 <= args.images <= RELEASE_IMAGES:
        raise UsageError(f"--images must be 1..{RELEASE_IMAGES} (the release's size), got {args.images}")
    paths.check_args(args, PATH_FLAGS)
    os.makedirs(os.path.join(args.out, "images"), exist_ok=True)
    if args.features:
        os.makedirs(os.path.join(args.out, "features"), exist_ok=True)
    t0 = time.perf_counter()
    jobs = [(i, args.out, args.seed, args.features) for i in range(args.images)]
    if args.workers > 1:
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            made = pool.map(make_image, jobs, chunksize=16)
    else:
        made = [make_image(j) for j in jobs]
    splits = {name: {"images": {}, "annotations": {}} for name, _ in SPLIT_SHARES}
    ocr = {}
    for m in made:  # in image order: the files are the same for any --workers
        s = splits[m["split"]]
        s["images"][m["image_id"]] = m["filename"]
        ocr[m["image_id"]] = m["ocr"]
        for j, (q, a) in enumerate(m["qas"]):
            s["annotations"][f"{m['index']}{j:02d}"] = {"image_id": int(m["image_id"]), "question": q, "answer": a}
    for name, s in splits.items():
        if not s["annotations"]:  # a small stand-in (under 18 images) has no dev or test image: no file
            continue
        with open(os.path.join(args.out, f"vlsp2023_{name}_data.json"), "w", encoding="utf-8") as f:
            json.dump(s, f, ensure_ascii=False, indent=1)
    with open(os.path.join(args.out, "ocr.json"), "w", encoding="utf-8") as f:
        json.dump(ocr, f, ensure_ascii=False)
    jpeg_bytes = sum(os.path.getsize(os.path.join(args.out, "images", m["filename"])) for m in made)
    summary = {"out": args.out, "images": args.images, "seed": args.seed, "features": args.features,
               "questions": {k: len(v["annotations"]) for k, v in splits.items()},
               "images_per_split": {k: len(v["images"]) for k, v in splits.items()},
               "jpeg_mb": round(jpeg_bytes / 2**20, 1), "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    sys.exit(run_script(main))
