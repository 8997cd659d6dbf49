"""Class-free region proposals on synthetic scenes: how many objects keep a segment of their own, how many
segments a picture has, and what a picture costs.

Usage::

    python benchmarks/proposals.py [--images 100] [--image_size 128,96] [--num_regions 64] [--min_size 8]
                                   [--scale 400] [--quality 95]

Renders ``--images`` synthetic street scenes (``tfds_builders.synthetic_openvivqa.generator``, train split) at
the builder's 256x192, encodes each as JPEG at ``--quality`` (as the builder stores them), and makes its
proposals as training does (:func:`openvivqa_jax.data.proposals.padded_proposals`: decoded, area-averaged to
``--image_size``, segmented). An object counts as found when one of the ``--num_regions`` kept segments (of 4
pixels or more) lies inside its box, widened by one pixel: the slot that carries its colour (an umbrella's
canopy, a person's shirt).

Prints one JSON object: ``objects_found`` (overall) and ``objects_found_by_kind``, ``segments_mean`` /
``segments_max`` per picture, ``kept_area_mean`` (the fraction of the picture the kept segments cover),
``ms_per_picture`` (decode, resize, segment and features, one process) and the settings.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from openvivqa_jax.cli import run_script  # noqa: E402


def _pairs(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def main(argv=None) -> dict:
    """Runs the measurement (module doc) and prints its JSON object."""
    from PIL import Image

    from openvivqa_jax.data.proposals import padded_proposals
    from tfds_builders.synthetic_openvivqa import generator as g

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=100)
    p.add_argument("--image_size", type=_pairs, default=(128, 96), help="width,height the proposals are made at")
    p.add_argument("--num_regions", type=int, default=64)
    p.add_argument("--min_size", type=int, default=8)
    p.add_argument("--scale", type=float, default=400.0)
    p.add_argument("--quality", type=int, default=95, help="JPEG quality of the stored pictures")
    args = p.parse_args(argv)
    w, h = args.image_size
    found, total, segments, kept, seconds = Counter(), Counter(), [], [], 0.0
    for i in range(args.images):
        img, info = g.render_scene(g.image_rng(0, "train", i), (256, 192), split="train")
        buf = io.BytesIO()
        Image.fromarray(np.asarray(img)[:, :, :3]).save(buf, format="JPEG", quality=args.quality)
        t0 = time.perf_counter()
        feats, boxes, mask, n = padded_proposals(buf.getvalue(), f"scene {i}", width=w, height=h,
                                                 max_pixels=10 ** 8, num_regions=args.num_regions,
                                                 min_size=args.min_size, scale=args.scale)
        seconds += time.perf_counter() - t0
        segments.append(n)
        kept.append(float((feats[mask, 6] ** 2).sum()))  # feature 6: sqrt of the segment's area fraction
        px = np.rint(boxes[mask] * [w, h, w, h]).astype(int)
        big = feats[mask, 6] ** 2 * w * h >= 4
        for o in info["objects"]:
            x0, y0, x1, y1 = o["box"]
            bx = (int(x0 * w) - 1, int(y0 * h) - 1, int(np.ceil(x1 * w)) + 1, int(np.ceil(y1 * h)) + 1)
            inside = (px[:, 0] >= bx[0]) & (px[:, 1] >= bx[1]) & (px[:, 2] <= bx[2]) & (px[:, 3] <= bx[3]) & big
            total[o["kind"]] += 1
            found[o["kind"]] += bool(inside.any())
    out = {"images": args.images, "image_size": [w, h], "num_regions": args.num_regions,
           "min_size": args.min_size, "scale": args.scale, "jpeg_quality": args.quality,
           "objects_found": round(sum(found.values()) / max(1, sum(total.values())), 4),
           "objects_found_by_kind": {k: round(found[k] / total[k], 4) for k in sorted(total)},
           "objects": sum(total.values()), "segments_mean": round(float(np.mean(segments)), 1),
           "segments_max": int(np.max(segments)), "kept_area_mean": round(float(np.mean(kept)), 4),
           "ms_per_picture": round(1000 * seconds / args.images, 2)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    sys.exit(run_script(main))
