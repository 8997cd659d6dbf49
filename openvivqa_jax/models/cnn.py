"""Pixel backbone and grid helpers: :class:`SmallCNN` (grid features of a small convolutional network),
grid cell boxes, box-over-grid overlap weights and the masked mean.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

__all__ = ["SmallCNN", "grid_boxes", "box_overlap_weights", "masked_mean"]

def grid_boxes(grid_h: int, grid_w: int) -> jax.Array:
    """Boxes of a ``grid_h x grid_w`` grid, row-major: ``(grid_h * grid_w, 4)`` xyxy in [0, 1]."""
    ys, xs = jnp.meshgrid(jnp.arange(grid_h), jnp.arange(grid_w), indexing="ij")
    x0, y0 = xs / grid_w, ys / grid_h
    return jnp.stack([x0, y0, x0 + 1 / grid_w, y0 + 1 / grid_h], -1).reshape(-1, 4).astype(jnp.float32)


def box_overlap_weights(boxes: jax.Array, cells: jax.Array) -> jax.Array:
    """Area-overlap weights of each box over grid cells, rows normalized to sum 1.

    Used to pool appearance features "from the grid under the box" (docs/design.md §5).

    Args:
      boxes: ``(batch, num_boxes, 4)`` xyxy in [0, 1].
      cells: ``(num_cells, 4)`` or ``(batch, num_cells, 4)`` xyxy in [0, 1].

    Returns:
      ``(batch, num_boxes, num_cells)``; a box covering no cell (a padding box) gets uniform weights.
    """
    bx0, by0, bx1, by1 = [boxes[..., i : i + 1] for i in range(4)]
    if cells.ndim == 2:
        cells = cells[None]
    cx0, cy0, cx1, cy1 = [cells[:, None, :, i] for i in range(4)]
    w = jnp.clip(jnp.minimum(bx1, cx1) - jnp.maximum(bx0, cx0), 0)
    h = jnp.clip(jnp.minimum(by1, cy1) - jnp.maximum(by0, cy0), 0)
    inter = w * h
    total = inter.sum(-1, keepdims=True)
    uniform = jnp.full_like(inter, 1.0 / cells.shape[1])
    return jnp.where(total > 0, inter / jnp.maximum(total, 1e-12), uniform)


def masked_mean(x: jax.Array, mask: jax.Array, axis: int) -> jax.Array:
    """Mean of ``x`` over ``axis`` counting only ``mask`` positions (``mask`` broadcast over the
    trailing feature axis); all-masked rows give 0 (padding is masked, never zero-summed)."""
    m = mask[..., None].astype(x.dtype)
    return (x * m).sum(axis) / jnp.maximum(m.sum(axis), 1.0)


class SmallCNN(nnx.Module):
    """A small convolutional backbone over pixels giving grid features (for the synthetic data).

    ``num_stages`` stride-2 3x3 conv stages with GroupNorm and ReLU, then optionally a space-to-depth
    rearrangement (pixel unshuffle) that stacks each ``s x s`` block of the last feature map into one grid
    cell's channels: the grid gets ``s**2`` times fewer cells (fewer image tokens for the fusion and the
    decoder) while every finer position keeps its own channels, instead of being averaged away by one more
    strided convolution (small objects keep their colour; ``benchmarks/vision_probe.py``).

    ``pixel_features = p`` (0: none) also stacks the cell's own pixels into its channels: the image is
    average-pooled over ``p x p`` pixel blocks and each grid cell gets its ``(stride / p)**2`` pooled RGB
    values (in [-1, 1]), like a ViT patch embedding's input beside the CNN features. The convolutions
    average a small object (a 5x7-pixel stool at 128x96) with the pavement around it; the pooled pixels
    keep its colour: with it the synthetic set's signboard colours are learned (docs/results.md).

    Args:
      channels: output channels per stage, e.g. ``(32, 64, 128, 128)``.
      space_to_depth: ``s`` (1: none). The grid is ``(H / (2**stages * s), W / (2**stages * s))`` with
        ``channels[-1] * s**2`` channels.
      pixel_features: ``p`` (0: none): adds ``3 * (stride / p)**2`` channels, ``stride = 2**stages * s``.
      rngs: parameter RNGs.

    Raises:
      ValueError: ``space_to_depth`` < 1, or ``pixel_features`` negative or not a divisor of the stride.
    """

    def __init__(self, channels: tuple[int, ...], *, rngs: nnx.Rngs, dtype: Any = jnp.float32,
                 space_to_depth: int = 1, pixel_features: int = 0):
        if int(space_to_depth) < 1:
            raise ValueError(f"space_to_depth must be >= 1, got {space_to_depth}")
        stride = 2 ** len(channels) * int(space_to_depth)
        if int(pixel_features) < 0 or (int(pixel_features) and stride % int(pixel_features)):
            raise ValueError(f"pixel_features must be 0 or a divisor of the grid stride {stride}, got {pixel_features}")
        convs, norms = [], []
        cin = 3
        for c in channels:
            convs.append(nnx.Conv(cin, c, kernel_size=(3, 3), strides=(2, 2), padding="SAME", dtype=dtype,
                                  param_dtype=jnp.float32, rngs=rngs))
            norms.append(nnx.GroupNorm(c, num_groups=min(8, c), dtype=dtype, param_dtype=jnp.float32, rngs=rngs))
            cin = c
        self.convs = nnx.List(convs)
        self.norms = nnx.List(norms)
        self.space_to_depth = int(space_to_depth)
        self.out_dim = cin * self.space_to_depth ** 2
        self.stride = stride
        self.pixel_features = int(pixel_features)
        if self.pixel_features:
            self.out_dim += 3 * (self.stride // self.pixel_features) ** 2

    def __call__(self, images: jax.Array) -> jax.Array:
        """``images``: ``(batch, H, W, 3)`` float in [0, 1] -> grid ``(batch, H/stride, W/stride, out_dim)``.

        Raises:
          ValueError: the last feature map's height or width is not a multiple of ``space_to_depth``.
        """
        x = images * 2.0 - 1.0
        for conv, norm in zip(self.convs, self.norms):
            x = jax.nn.relu(norm(conv(x)))
        s = self.space_to_depth
        if s > 1:
            b, h, w, c = x.shape
            if h % s or w % s:
                raise ValueError(f"SmallCNN: feature map {h}x{w} is not divisible by space_to_depth={s}; "
                                 f"choose an image size that is a multiple of {self.stride}")
            # (batch, h/s, s, w/s, s, c) -> (batch, h/s, w/s, s, s, c): channel index = (dy * s + dx) * c + k.
            x = x.reshape(b, h // s, s, w // s, s, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, h // s, w // s, s * s * c)
        if self.pixel_features:
            x = jnp.concatenate([x, self._cell_pixels(images, x.shape[1], x.shape[2]).astype(x.dtype)], -1)
        return x

    def _cell_pixels(self, images: jax.Array, grid_h: int, grid_w: int) -> jax.Array:
        """``(batch, H, W, 3)`` in [0, 1] -> ``(batch, grid_h, grid_w, 3 * k * k)`` pooled pixels in [-1, 1],
        ``k = stride / pixel_features``; channel index ``(dy * k + dx) * 3 + rgb``.

        Raises:
          ValueError: the image is not exactly ``grid * stride`` pixels high and wide.
        """
        p, b = self.pixel_features, images.shape[0]
        k = self.stride // p
        if images.shape[1:3] != (grid_h * self.stride, grid_w * self.stride):
            raise ValueError(f"SmallCNN: pixel_features needs an image of a multiple of {self.stride} pixels per "
                             f"side, got {images.shape[2]}x{images.shape[1]}")
        px = images.reshape(b, grid_h * k, p, grid_w * k, p, 3).mean((2, 4)) * 2.0 - 1.0
        return px.reshape(b, grid_h, k, grid_w, k, 3).transpose(0, 1, 3, 2, 4, 5).reshape(b, grid_h, grid_w, k * k * 3)
