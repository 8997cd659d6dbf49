"""Image features of the relevance task, with NumPy only: the feature files keyed by image id
(:func:`read_feature_file`, what CMedRel and training read), the pooling of region features and of grids into
one vector per image, and the standardization into the encoder's visual space.
"""

from __future__ import annotations

import collections
import os

import numpy as np

from openvivqa_jax.relevance import FeatureFileError

__all__ = ["FEATURES_FILE", "read_feature_file", "pool_regions", "pool_grid", "standardize"]

#: Every image's visual feature, written at training.
FEATURES_FILE = "image_features.npz"


def read_feature_file(path: str, width: int | None = None) -> dict[str, np.ndarray]:
    """Reads precomputed image vectors keyed by image id.

    Formats: ``.npz`` with one array ``(d,)`` per image id (the keys), or with two arrays ``ids`` ``(n,)`` and
    ``features`` ``(n, d)``; ``.npy`` ``(n, d)`` with the ids one per line in ``<path without .npy>.ids.txt``.

    Args:
      path: the file.
      width: the expected ``d`` (None: any, but all equal).

    Returns:
      image id -> ``(d,)`` float32.

    Raises:
      FeatureFileError: unreadable, another layout, vectors of several widths or of another width than ``width``
        (one line naming the file).
    """
    path = os.path.expanduser(str(path))
    try:
        if path.endswith(".npy"):
            mat = np.load(path, allow_pickle=False)
            ids_path = path[:-4] + ".ids.txt"
            with open(ids_path, encoding="utf-8") as f:
                ids = [ln.strip() for ln in f if ln.strip()]
            if mat.ndim != 2 or len(ids) != mat.shape[0]:
                raise FeatureFileError(f"image features file {path}: expected an (n, d) array with the n ids in "
                                       f"{ids_path}, got shape {mat.shape} and {len(ids)} ids")
            out = {i: np.asarray(v, np.float32) for i, v in zip(ids, mat)}
        else:
            with np.load(path, allow_pickle=False) as z:
                if set(z.files) == {"ids", "features"}:
                    out = {str(i): np.asarray(v, np.float32) for i, v in zip(z["ids"], z["features"])}
                else:
                    out = {k: np.asarray(z[k], np.float32) for k in z.files}
    except FeatureFileError:
        raise
    except (OSError, ValueError) as e:
        raise FeatureFileError(f"image features file {path} cannot be read: {' '.join(str(e).split())}") from None
    if not out:
        raise FeatureFileError(f"image features file {path} holds no vector")
    shapes = collections.Counter(v.shape for v in out.values())
    if len(shapes) > 1 or len(next(iter(shapes))) != 1:
        raise FeatureFileError(f"image features file {path}: every vector must be 1-D of one width, got shapes "
                               f"{dict(shapes)}")
    d = next(iter(shapes))[0]
    if width is not None and d != width:
        raise FeatureFileError(f"image features file {path} has vectors of width {d}, but the relevance model "
                               f"projects into a visual space of width {width}")
    return out


def pool_regions(features: np.ndarray, boxes: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """Region features ``(num_regions, d)`` with boxes ``(num_regions, 4)`` xyxy in [0, 1] -> ``(rows * cols *
    d,)``: the mean of the regions whose box centre lies in each cell (zeros for an empty cell), cells in
    row-major order. ``(1, 1)`` is the mean of all region features."""
    rows, cols = grid
    d = features.shape[1]
    out = np.zeros((rows, cols, d), np.float32)
    if len(features):
        cx = np.clip(((boxes[:, 0] + boxes[:, 2]) / 2 * cols).astype(int), 0, cols - 1)
        cy = np.clip(((boxes[:, 1] + boxes[:, 3]) / 2 * rows).astype(int), 0, rows - 1)
        for r in range(rows):
            for c in range(cols):
                sel = (cy == r) & (cx == c)
                if sel.any():
                    out[r, c] = features[sel].mean(0)
    return out.reshape(-1)


def pool_grid(grid: np.ndarray, cells: tuple[int, int]) -> np.ndarray:
    """Grid features ``(batch, H, W, d)`` -> ``(batch, rows * cols * d)``: the mean over each of ``rows x cols``
    nearly equal blocks (``np.array_split``), cells in row-major order."""
    rows, cols = cells
    out = []
    for band in np.array_split(np.asarray(grid, np.float32), rows, axis=1):
        for block in np.array_split(band, cols, axis=2):
            out.append(block.mean((1, 2)))
    return np.concatenate(out, -1)


def standardize(meta: dict, features: np.ndarray) -> np.ndarray:
    """Visual features ``(..., visual_dim)`` as the encoder's space has them: ``(x - mean) / std`` with the
    train split's statistics stored in ``meta`` (unchanged when the model has none)."""
    x = np.asarray(features, np.float32)
    if meta.get("visual_mean") is None:
        return x
    return ((x - np.asarray(meta["visual_mean"], np.float32)) / np.asarray(meta["visual_std"], np.float32))
