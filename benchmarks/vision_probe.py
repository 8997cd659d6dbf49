"""Linear probe of the grid CNN: how well does the grid cell under a synthetic object encode its colour and kind?

Usage::

    python benchmarks/vision_probe.py [--channels 32,64,96,128] [--image_size 128,96] [--train_images 300]
                                      [--test_images 150] [--seed 0] [--workdir RUN]

Renders synthetic street scenes (``tfds_builders.synthetic_openvivqa.generator``; train split images for
fitting, validation split images for scoring) at 256x192, resizes them bilinearly to ``--image_size`` like the
input pipeline, and runs a freshly initialized :class:`openvivqa_jax.models.layers.SmallCNN` with
``--channels`` (one stride-2 stage per entry; grid ``(H / 2**stages, W / 2**stages)``). Each drawn object
gives one sample: the backbone's ``(C,)`` feature of the grid cell holding the centre of the pixels painted in
its colour (:func:`paint_point`: an umbrella's canopy, not its pole). A ridge one-vs-rest linear classifier
(features standardized, ``lambda = 1``) is fitted on the train objects and scored on the held-out ones, for the
object's colour (12 classes) and kind (5 classes).

Prints one JSON object: ``grid`` ``[gh, gw]``, ``colour_accuracy``, ``kind_accuracy``, their majority-class
rates on the held-out objects, ``colour_accuracy_by_kind`` (the held-out colour accuracy of the objects of
each kind, from the same classifier) and the object counts. Without ``--workdir`` an untrained backbone is
probed: the number says how much of an object's colour survives the downsampling, before any training. With
``--workdir`` the backbone of a trained run (a CNN config; its best checkpoint, channels, pixel features,
space-to-depth and image size, which replace the flags') is probed instead: side by side with the untrained number, it says whether training taught the
backbone an object's kind and colour, or left that to the layers after it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402

#: Path flags, checked before any work (openvivqa_jax/paths.py).
PATH_FLAGS = {"--workdir": paths.INPUT_DIR}


def _pairs(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def render(split: str, n: int, image_size: tuple[int, int]):
    """``n`` scenes of ``split``: ``(images uint8 (n, H, W, 3), objects per image)``; each object dict gains
    ``point``, its :func:`paint_point` in the 256x192 render."""
    from PIL import Image

    from tfds_builders.synthetic_openvivqa import generator as g

    images, objects = [], []
    for i in range(n):
        img, info = g.render_scene(g.image_rng(0, split, i), (256, 192), split=split)
        full = np.asarray(img, np.uint8)
        images.append(np.asarray(img.resize(image_size, Image.BILINEAR), np.uint8))
        objects.append([{**o, "point": paint_point(full, o["box"], g.COLORS[o["color"]])} for o in info["objects"]])
    return np.stack(images), objects


def paint_point(image: np.ndarray, box, rgb) -> tuple[float, float]:
    """Where an object's colour is painted: the mean ``(x, y)`` in [0, 1] of the pixels inside ``box`` (xyxy in
    [0, 1]) that are exactly ``rgb`` in ``image`` ``(H, W, 3)`` uint8 (the renderer paints without
    anti-aliasing), or the box centre when there are none. An umbrella's colour is in its canopy, above the
    box centre (its pole); a person's in the shirt."""
    h, w = image.shape[:2]
    x0, y0, x1, y1 = box
    c0, r0 = int(x0 * w), int(y0 * h)
    c1, r1 = max(int(np.ceil(x1 * w)), c0 + 1), max(int(np.ceil(y1 * h)), r0 + 1)
    rows, cols = np.nonzero((image[r0:r1, c0:c1] == np.asarray(rgb, np.uint8)).all(-1))
    if len(rows) == 0:
        return ((x0 + x1) / 2, (y0 + y1) / 2)
    return (float((cols.mean() + c0 + 0.5) / w), float((rows.mean() + r0 + 0.5) / h))


def cell_features(grid: np.ndarray, objects) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features ``(num_objects, C)`` of the cell holding each object's ``point`` (``(x, y)`` in [0, 1]; the box
    centre when absent), colour and kind indices."""
    from tfds_builders.synthetic_openvivqa import generator as g

    colours, kinds = list(g.COLORS), [k.key for k in g.OBJECT_KINDS]
    _, gh, gw, _ = grid.shape
    feats, ys_colour, ys_kind = [], [], []
    for j, objs in enumerate(objects):
        for o in objs:
            x0, y0, x1, y1 = o["box"]
            x, y = o.get("point", ((x0 + x1) / 2, (y0 + y1) / 2))
            row = min(int(y * gh), gh - 1)
            col = min(int(x * gw), gw - 1)
            feats.append(grid[j, row, col])
            ys_colour.append(colours.index(o["color"]))
            ys_kind.append(kinds.index(o["kind"]))
    return np.asarray(feats, np.float64), np.asarray(ys_colour), np.asarray(ys_kind)


def ridge_predictions(f_train, y_train, f_test, num_classes: int, lam: float = 1.0) -> np.ndarray:
    """Held-out class predictions ``(num_test,)`` of a ridge one-vs-rest linear classifier on standardized
    features."""
    mu, sd = f_train.mean(0), f_train.std(0) + 1e-6
    a = np.c_[(f_train - mu) / sd, np.ones(len(f_train))]
    b = np.c_[(f_test - mu) / sd, np.ones(len(f_test))]
    w = np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ np.eye(num_classes)[y_train])
    return (b @ w).argmax(1)


def ridge_accuracy(f_train, y_train, f_test, y_test, num_classes: int, lam: float = 1.0) -> float:
    """Held-out accuracy of :func:`ridge_predictions`."""
    return float((ridge_predictions(f_train, y_train, f_test, num_classes, lam) == y_test).mean())


def _backbone(args):
    """The probed backbone and the JSON's first fields: a fresh :class:`SmallCNN` from the flags, or the
    trained one of ``args.workdir`` (whose channels and image size replace the flags').

    Raises:
      ValueError: the run's model has no CNN backbone (``model.vision.kind`` is not ``cnn``).
    """
    from flax import nnx

    from openvivqa_jax.models.layers import SmallCNN

    if args.workdir is None:
        cnn = SmallCNN(tuple(args.channels), rngs=nnx.Rngs(args.seed), pixel_features=args.pixel_features,
                       space_to_depth=args.space_to_depth)
        return cnn, {"channels": list(args.channels), "image_size": list(args.image_size),
                     "pixel_features": args.pixel_features, "space_to_depth": args.space_to_depth, "trained_step": None}
    from openvivqa_jax.vqa.inference import load_for_inference

    run = load_for_inference(args.workdir)
    vision = run.cfg.model.get("vision")
    if vision is None or vision.get("kind") != "cnn":
        raise ValueError(f"{args.workdir}: model.vision.kind is {vision and vision.get('kind')!r}; the probe reads a "
                         "CNN backbone (model.vision.kind = 'cnn')")
    args.channels, args.image_size = tuple(vision.cnn_channels), tuple(run.cfg.data.image_size)
    cnn = nnx.merge(run.graphdef, run.params).vision.backbone
    return cnn, {"channels": list(args.channels), "image_size": list(args.image_size),
                 "pixel_features": cnn.pixel_features, "space_to_depth": cnn.space_to_depth, "trained_step": run.step,
                 "workdir": args.workdir}


def main(argv=None) -> dict:
    """Runs the probe and prints (and returns) the JSON result."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--channels", type=_pairs, default=(32, 64, 96, 128))
    p.add_argument("--image_size", type=_pairs, default=(128, 96), help="width,height")
    p.add_argument("--train_images", type=int, default=300)
    p.add_argument("--test_images", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pixel_features", type=int, default=0, help="SmallCNN pixel_features (the default config: 4)")
    p.add_argument("--space_to_depth", type=int, default=1, help="SmallCNN space_to_depth")
    p.add_argument("--workdir", default=None, help="probe the backbone of this trained run (a CNN config)")
    args = p.parse_args(argv)
    paths.check_args(args, PATH_FLAGS)
    cnn, out = _backbone(args)
    data = {}
    for split, n in (("train", args.train_images), ("validation", args.test_images)):
        images, objects = render(split, n, tuple(args.image_size))
        grid = np.asarray(cnn(images.astype(np.float32) / 255.0))
        out["grid"] = list(grid.shape[1:3])
        data[split] = cell_features(grid, objects)
    (f_tr, c_tr, k_tr), (f_te, c_te, k_te) = data["train"], data["validation"]
    from tfds_builders.synthetic_openvivqa import generator as g

    hits = ridge_predictions(f_tr, c_tr, f_te, 12) == c_te
    out.update(colour_accuracy=float(hits.mean()),
               kind_accuracy=ridge_accuracy(f_tr, k_tr, f_te, k_te, 5),
               colour_accuracy_by_kind={k.key: float(hits[k_te == i].mean())
                                        for i, k in enumerate(g.OBJECT_KINDS) if (k_te == i).any()},
               colour_majority_rate=float(np.bincount(c_te).max() / len(c_te)),
               kind_majority_rate=float(np.bincount(k_te).max() / len(k_te)),
               num_train_objects=int(len(c_tr)), num_test_objects=int(len(c_te)))
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    sys.exit(run_script(main))
