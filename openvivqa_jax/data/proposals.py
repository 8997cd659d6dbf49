"""Class-free region proposals from pixels: region features for pictures that have no detector.

The paper's models read an object detector's region features (bottom-up attention, Anderson et al., CVPR 2018):
one memory slot per object, which carries the object's look, its colours and its box. A pixel grid gives the
model cells instead, and the question's attention has to learn which cells make up the object it names before
anything about that object can be learned; on the synthetic set this takes thousands of steps more than with
one slot per object. Users who train on their own photos have no detector, so this module makes object-aligned
slots from the pixels alone, with no classes and no training: the graph-based segmentation of Felzenszwalb and
Huttenlocher (IJCV 2004, ``skimage.segmentation.felzenszwalb``), the first step of selective search's class-free
proposals (Uijlings et al., IJCV 2013). Each segment becomes one region:

* its box, ``(x0, y0, x1, y1)`` in ``[0, 1]`` of the picture;
* its own pixels' mean and standard deviation (RGB in ``[0, 1]``, 6 values): the colour of the segment alone,
  not of the background around it;
* its area (square root of the fraction of the picture, 1 value);
* its shape: the segment's occupancy of its box on a ``POOL x POOL`` grid (16 values);
* its box's pixels on a ``POOL x POOL`` grid (RGB, 48 values);
* its context: the pixels of the box grown to twice its width and height about its centre, clipped to the
  picture, on a ``POOL x POOL`` grid (RGB, 48 values), so that a shirt's segment sees the head above it.

Segments are ordered by area, largest first; the ``max_regions`` largest are kept (the rest, mostly text
strokes and specks, are counted by the caller). The features are a deterministic function of the resized
pixels, so training, evaluation and predict on a photo compute the same regions.
"""

from __future__ import annotations

import numpy as np
from PIL import Image
from scipy import ndimage
from skimage.segmentation import felzenszwalb

from openvivqa_jax.data import images

__all__ = ["POOL", "PROPOSAL_FEATURE_DIM", "OBJECT_FEATURE_DIM", "BOX_PIXELS_DIM", "read_feature_dim",
           "region_proposals", "padded_proposals", "box_pixels"]

#: Side of the grids the box, context and shape are pooled on.
POOL = 4
#: Width of a proposal's features (module doc): colour 6 + area 1 + shape 16 + box pixels 48 + context 48 = 119.
PROPOSAL_FEATURE_DIM = 6 + 1 + POOL * POOL + 2 * 3 * POOL * POOL
#: The first features of a proposal that describe the segment alone (colour 6 + area 1 + shape 16 = 23), without
#: the pixels of its box and context, which also tell one picture from another.
OBJECT_FEATURE_DIM = 6 + 1 + POOL * POOL
#: Width of :func:`box_pixels`: a box's RGB on a ``POOL x POOL`` grid.
BOX_PIXELS_DIM = 3 * POOL * POOL


def read_feature_dim(choice: str, vision_kind: str, feature_dim: int, owner: str) -> int:
    """How many of the ``feature_dim`` stored region features a small region module (the verifier, the counter)
    reads: with ``choice`` ``"objects"`` and class-free proposals (``vision_kind`` ``"proposals"``), the segment's
    own colour, area and shape (:data:`OBJECT_FEATURE_DIM`); with ``"all"``, or other region features, all of them.

    Raises:
      ValueError: ``choice`` is neither ``"objects"`` nor ``"all"`` (the message names ``owner``'s setting,
        e.g. ``model.counter``).
    """
    if choice not in ("objects", "all"):
        raise ValueError(f"{owner}.proposal_features must be 'objects' or 'all', got {choice!r}")
    if vision_kind == "proposals" and choice == "objects":
        return min(feature_dim, OBJECT_FEATURE_DIM)
    return feature_dim


def _bin_edges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pixel ranges ``[lo_k, hi_k)`` of the ``POOL`` bins of the spans ``[lo, hi)``: ``(n, POOL)`` each; bin ``k``
    covers ``floor(k * span / POOL)`` to ``ceil((k + 1) * span / POOL)``, never empty (a span shorter than
    ``POOL`` pixels repeats pixels across bins)."""
    span = (hi - lo)[:, None]
    k = np.arange(POOL)[None]
    return lo[:, None] + (k * span) // POOL, lo[:, None] + -((-(k + 1) * span) // POOL)


def _pooled(integral: np.ndarray, y0, y1, x0, x1) -> np.ndarray:
    """Area means of the boxes ``[y0, y1) x [x0, x1)`` (``(n,)`` int each) on a ``POOL x POOL`` grid, from the
    zero-padded integral image ``(height + 1, width + 1, c)``: ``(n, POOL * POOL * c)``, row-major."""
    ya, yb = _bin_edges(y0, y1)
    xa, xb = _bin_edges(x0, x1)
    ya, yb = ya[:, :, None], yb[:, :, None]
    xa, xb = xa[:, None, :], xb[:, None, :]
    sums = integral[yb, xb] - integral[ya, xb] - integral[yb, xa] + integral[ya, xa]
    return (sums / ((yb - ya) * (xb - xa))[..., None]).reshape(len(y0), -1)


def _integral(a: np.ndarray) -> np.ndarray:
    """``(h, w, c)`` -> the zero-padded integral image ``(h + 1, w + 1, c)`` float64."""
    out = np.zeros((a.shape[0] + 1, a.shape[1] + 1, a.shape[2]), np.float64)
    out[1:, 1:] = a.cumsum(0).cumsum(1)
    return out


def region_proposals(image: np.ndarray, max_regions: int, *, min_size: int = 8,
                     scale: float = 400.0) -> tuple[np.ndarray, np.ndarray, int]:
    """Class-free region proposals of one picture and their features (module doc).

    Args:
      image: ``(height, width, 3)`` uint8 RGB, the picture as the model's input pipeline resized it.
      max_regions: ``R``, how many segments to keep (the largest).
      min_size: the segmentation's smallest segment, in pixels of ``image`` (Felzenszwalb's ``min_size``).
      scale: the segmentation's scale (Felzenszwalb's ``k``; larger: fewer, larger segments).

    Returns:
      ``(features (num_kept, PROPOSAL_FEATURE_DIM) float32, boxes (num_kept, 4) float32 xyxy in [0, 1],
      num_segments)``: ``num_kept = min(R, num_segments)``, largest segment first.

    Raises:
      ValueError: ``image`` is not ``(height, width, 3)`` uint8 of at least 2x2 pixels, or ``max_regions`` or
        ``min_size`` is below 1.
    """
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or min(image.shape[:2]) < 2:
        raise ValueError(f"region_proposals: image must be (height, width, 3) uint8 of at least 2x2 pixels, "
                         f"got {image.shape} {image.dtype}")
    if max_regions < 1 or min_size < 1:
        raise ValueError(f"region_proposals: max_regions ({max_regions}) and min_size ({min_size}) must be >= 1")
    h, w = image.shape[:2]
    labels = felzenszwalb(image, scale=scale, sigma=0.0, min_size=min_size)
    n = int(labels.max()) + 1
    flat = labels.ravel()
    area = np.bincount(flat, minlength=n).astype(np.float64)
    rgb = image.reshape(-1, 3).astype(np.float64) / 255.0
    mean = np.stack([np.bincount(flat, rgb[:, k], n) for k in range(3)], 1) / area[:, None]
    sq = np.stack([np.bincount(flat, rgb[:, k] ** 2, n) for k in range(3)], 1) / area[:, None]
    std = np.sqrt(np.maximum(sq - mean ** 2, 0.0))
    slices = ndimage.find_objects(labels + 1)
    keep = np.argsort(-area, kind="stable")[:max_regions]
    y0 = np.array([slices[s][0].start for s in keep], np.int64)
    y1 = np.array([slices[s][0].stop for s in keep], np.int64)
    x0 = np.array([slices[s][1].start for s in keep], np.int64)
    x1 = np.array([slices[s][1].stop for s in keep], np.int64)
    bh, bw = y1 - y0, x1 - x0
    cy0, cy1 = np.maximum(0, y0 - bh // 2), np.minimum(h, y1 + (bh + 1) // 2)
    cx0, cx1 = np.maximum(0, x0 - bw // 2), np.minimum(w, x1 + (bw + 1) // 2)
    pixels = _integral(image.astype(np.float64) / 255.0)
    occupancy = np.zeros((len(keep), POOL * POOL), np.float64)
    for i, s in enumerate(keep):
        crop = (labels[y0[i]:y1[i], x0[i]:x1[i]] == s)[:, :, None]
        occupancy[i] = _pooled(_integral(crop), np.array([0]), bh[i:i + 1], np.array([0]), bw[i:i + 1])[0]
    feats = np.concatenate([mean[keep], std[keep], np.sqrt(area[keep] / (h * w))[:, None], occupancy,
                            _pooled(pixels, y0, y1, x0, x1), _pooled(pixels, cy0, cy1, cx0, cx1)], 1)
    boxes = np.stack([x0 / w, y0 / h, x1 / w, y1 / h], 1)
    return feats.astype(np.float32), boxes.astype(np.float32), n


def padded_proposals(data: bytes, name: str, *, width: int, height: int, max_pixels: int, num_regions: int,
                     min_size: int, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """An encoded picture -> its proposals at the model's input size, zero-padded to ``num_regions`` (``R``).

    The picture is decoded by :func:`openvivqa_jax.data.images.decode_image` (as the builders and predict decode
    it) and resized to ``(width, height)`` by area averaging (PIL's box filter), which also averages out JPEG's
    block noise; with the segmentation's default scale (400) the few-pixel strips it blends along edges merge
    into their neighbours.

    Returns:
      ``(region_features (R, PROPOSAL_FEATURE_DIM) float32, region_boxes (R, 4) float32, region_mask (R,) bool,
      num_segments)``.

    Raises:
      openvivqa_jax.data.images.ImageDecodeError: the bytes are not a usable image (one line naming ``name``).
    """
    rgb = images.decode_image(data, name=name, max_pixels=max_pixels).pil
    pixels = np.asarray(rgb.resize((width, height), Image.Resampling.BOX), np.uint8)
    f, b, n = region_proposals(pixels, num_regions, min_size=min_size, scale=scale)
    feats = np.zeros((num_regions, PROPOSAL_FEATURE_DIM), np.float32)
    boxes = np.zeros((num_regions, 4), np.float32)
    feats[: len(f)], boxes[: len(f)] = f, b
    return feats, boxes, np.arange(num_regions) < len(f), n


def box_pixels(image: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """The pixels under each box on a ``POOL x POOL`` grid: an OCR token's own appearance, from the picture
    alone (M4C reads a detector's features of the token's box; this is its detector-free stand-in).

    Args:
      image: ``(height, width, 3)`` uint8 RGB.
      boxes: ``(num_boxes, 4)`` xyxy in ``[0, 1]``; each covers at least one pixel (``floor`` of the start,
        ``ceil`` of the end, within 1e-4 pixel of a boundary, clipped to the picture).

    Returns:
      ``(num_boxes, BOX_PIXELS_DIM)`` float32, RGB in ``[0, 1]``, row-major bins (as the proposals' pooled box).
    """
    h, w = image.shape[:2]
    boxes = np.clip(np.asarray(boxes, np.float64).reshape(-1, 4), 0.0, 1.0)
    eps = 1e-4  # an edge on a pixel boundary, stored as float32, must not take in the next pixel
    x0 = np.minimum(np.floor(boxes[:, 0] * w + eps), w - 1).astype(np.int64)
    y0 = np.minimum(np.floor(boxes[:, 1] * h + eps), h - 1).astype(np.int64)
    x1 = np.clip(np.ceil(boxes[:, 2] * w - eps).astype(np.int64), x0 + 1, w)
    y1 = np.clip(np.ceil(boxes[:, 3] * h - eps).astype(np.int64), y0 + 1, h)
    if not len(boxes):
        return np.zeros((0, BOX_PIXELS_DIM), np.float32)
    return _pooled(_integral(image[:, :, :3].astype(np.float64) / 255.0), y0, y1, x0, x1).astype(np.float32)
